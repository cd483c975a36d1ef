//! Connection settings: [`EtcdConfig`].

use std::time::Duration;

#[cfg(feature = "tls-rustls")]
use std::path::PathBuf;

#[cfg(doc)]
use super::EtcdBackend;
#[cfg(feature = "tls-rustls")]
use super::tls::{Pem, TlsSettings};

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
    pub(super) user: Option<Credentials>,
    #[cfg(feature = "tls-rustls")]
    pub(super) tls: TlsSettings,
}

/// An etcd user and password; the password is never shown.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Credentials {
    pub(super) user: String,
    pub(super) password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, password hidden)", self.user)
    }
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            user: None,
            #[cfg(feature = "tls-rustls")]
            tls: TlsSettings::default(),
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

    /// Authenticates as `user` with `password` (etcd's own users and roles),
    /// with every member whose URL names no user of its own
    /// (`http://user:password@host:port`).
    ///
    /// The user needs read and write on the lock keys and everything under
    /// them (`<key>/queue/`, `<key>/shares/`), and on any fence keys: under a
    /// namespace, a role with `readwrite` on the prefix `namespace:`, and on
    /// `{namespace:` for the fence keys derived from lock keys
    /// (`{namespace:key}:fence`). A wrong password fails the connect with
    /// [`BackendErrorKind::Authentication`](crate::BackendErrorKind::Authentication);
    /// a key the user may not write fails its obtain with
    /// [`BackendErrorKind::Permission`](crate::BackendErrorKind::Permission).
    /// etcd's tokens expire (`--auth-token-ttl`, or a JWT's lifetime): the
    /// backend authenticates again when a member says its token is no longer
    /// valid, and sends the call again.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::{EtcdBackend, EtcdConfig, Locker};
    ///
    /// let config = EtcdConfig::default().user("billing", "s3cret");
    /// let locker = Locker::new(EtcdBackend::connect_with(["http://10.0.0.1:2379"], config).await?)
    ///     .with_namespace("billing");
    /// # Ok(()) }
    /// ```
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some(Credentials {
            user: user.into(),
            password: password.into(),
        });
        self
    }
}

#[cfg(feature = "tls-rustls")]
impl EtcdConfig {
    /// Trusts the certificate authorities in `pem` (one or more PEM
    /// certificates, as in etcd's `--trusted-ca-file`) for `https://`
    /// members, *instead of* the system's roots: for members whose
    /// certificate is signed by a private CA.
    ///
    /// Without it, `https://` trusts the operating system's certificate
    /// store. A member's certificate must name the host of its URL (a DNS
    /// name, or the IP address as a subject alternative name). With any TLS
    /// setting, a member given as `host:port` is reached over TLS, and one
    /// given as `http://…` is refused rather than reached without it. The
    /// PEM is checked when connecting.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use lockmacro_runtime::{EtcdBackend, EtcdConfig, Locker};
    ///
    /// let config = EtcdConfig::default().tls_root_certificate(std::fs::read("/etc/etcd/ca.crt")?);
    /// let backend = EtcdBackend::connect_with(["https://etcd-0.internal:2379"], config).await?;
    /// let locker = Locker::new(backend);
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root = Some(Pem::Given(pem.into()));
        self
    }

    /// Like [`tls_root_certificate`](Self::tls_root_certificate), read from
    /// the file at `path` when connecting: a file that is missing or cannot
    /// be read fails the connect, naming it.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::{EtcdBackend, EtcdConfig};
    ///
    /// let config = EtcdConfig::default().tls_root_certificate_file("/etc/etcd/ca.crt");
    /// let backend = EtcdBackend::connect_with(["https://etcd-0.internal:2379"], config).await?;
    /// # let _ = backend; Ok(()) }
    /// ```
    pub fn tls_root_certificate_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.root = Some(Pem::File(path.into()));
        self
    }

    /// Presents the certificate chain in `certificate_pem` (the client's
    /// certificate first) and its private key in `key_pem` (PKCS#8, PKCS#1
    /// or SEC1 PEM) to members that check clients (mutual TLS: etcd's
    /// `--client-cert-auth`). Both are checked when connecting, and the key
    /// is never printed.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use lockmacro_runtime::{EtcdBackend, EtcdConfig};
    ///
    /// let config = EtcdConfig::default()
    ///     .tls_root_certificate(std::fs::read("/etc/etcd/ca.crt")?)
    ///     .tls_client_certificate(
    ///         std::fs::read("/etc/locks/client.crt")?,
    ///         std::fs::read("/etc/locks/client.key")?,
    ///     );
    /// let backend = EtcdBackend::connect_with(["https://etcd-0.internal:2379"], config).await?;
    /// # let _ = backend; Ok(()) }
    /// ```
    pub fn tls_client_certificate(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((
            Pem::Given(certificate_pem.into()),
            Pem::Given(key_pem.into()),
        ));
        self
    }

    /// Like [`tls_client_certificate`](Self::tls_client_certificate), read
    /// from the files at `certificate_path` and `key_path` when connecting.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::{EtcdBackend, EtcdConfig};
    ///
    /// let config = EtcdConfig::default()
    ///     .tls_root_certificate_file("/etc/etcd/ca.crt")
    ///     .tls_client_certificate_files("/etc/locks/client.crt", "/etc/locks/client.key");
    /// let backend = EtcdBackend::connect_with(["https://etcd-0.internal:2379"], config).await?;
    /// # let _ = backend; Ok(()) }
    /// ```
    pub fn tls_client_certificate_files(
        mut self,
        certificate_path: impl Into<PathBuf>,
        key_path: impl Into<PathBuf>,
    ) -> Self {
        self.tls.client = Some((
            Pem::File(certificate_path.into()),
            Pem::File(key_path.into()),
        ));
        self
    }
}
