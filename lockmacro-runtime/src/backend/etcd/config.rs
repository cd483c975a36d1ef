//! Connection settings: [`EtcdConfig`].

use std::time::Duration;

#[cfg(doc)]
use super::EtcdBackend;

/// Settings for [`EtcdBackend::connect_with`].
///
/// ```
/// use std::time::Duration;
/// use lockmacro_runtime::EtcdConfig;
///
/// let config = EtcdConfig::default().response_timeout(Duration::from_secs(1));
/// # let _ = config;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EtcdConfig {
    pub(super) connect_timeout: Duration,
    pub(super) response_timeout: Duration,
    pub(super) user: Option<(String, String)>,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            user: None,
        }
    }
}

impl EtcdConfig {
    /// How long to wait for a TCP connection to one member; then the next
    /// member is tried. Default: 2 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one member may take to answer a request; then the next member
    /// is tried, so that a member that is frozen or cut off costs this much
    /// once, not every call. Also how long a call keeps going round the
    /// members while none can serve it (a cluster electing a leader refuses
    /// everywhere for an election timeout or two). Default: 2 s.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Authenticates as `user` with `password` (etcd's own users and roles).
    /// The user needs read and write on the lock keys, their `/queue/`
    /// prefixes and any fence keys, and the lease permissions.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::{EtcdBackend, EtcdConfig, Locker};
    ///
    /// let config = EtcdConfig::default().user("billing", "s3cret");
    /// let locker = Locker::new(EtcdBackend::connect_with(["http://10.0.0.1:2379"], config).await?);
    /// # Ok(()) }
    /// ```
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }
}
