//! Stand-ins for the constructors of a feature that is off. Without them,
//! calling `Locker::cluster` in a build without the `cluster` feature gets
//! rustc's "no function or associated item named `cluster`", which does not
//! say that a feature would add it; with them, the call fails to compile
//! with a message that names the feature. Each is bounded by a trait that
//! nothing implements, so none can be called, and each is hidden from the
//! documentation, where the real constructor is shown.

#[cfg(not(all(
    feature = "cluster",
    feature = "etcd",
    feature = "postgres",
    feature = "sentinel"
)))]
use crate::{LockError, Locker};

/// Implemented by nothing: the bound of `Locker::connect` and
/// `Locker::redlock` in a build without the `redis` feature.
#[diagnostic::on_unimplemented(
    message = "`Locker::connect` and `Locker::redlock` need the `redis` feature of `lockmacro-runtime`",
    label = "Redis is left out of this build",
    note = "enable it in Cargo.toml: `lockmacro-runtime = {{ version = \"…\", features = [\"redis\"] }}`, or keep the default features"
)]
pub trait RedisFeature {}

/// Implemented by nothing: the bound of `Locker::cluster` in a build
/// without the `cluster` feature.
#[diagnostic::on_unimplemented(
    message = "`Locker::cluster` needs the `cluster` feature of `lockmacro-runtime`",
    label = "Redis Cluster is left out of this build",
    note = "enable it in Cargo.toml: `lockmacro-runtime = {{ version = \"…\", features = [\"cluster\"] }}`"
)]
pub trait ClusterFeature {}

/// Implemented by nothing: the bound of `Locker::sentinel` in a build
/// without the `sentinel` feature.
#[diagnostic::on_unimplemented(
    message = "`Locker::sentinel` needs the `sentinel` feature of `lockmacro-runtime`",
    label = "Redis Sentinel is left out of this build",
    note = "enable it in Cargo.toml: `lockmacro-runtime = {{ version = \"…\", features = [\"sentinel\"] }}`"
)]
pub trait SentinelFeature {}

/// Implemented by nothing: the bound of `Locker::etcd` in a build without
/// the `etcd` feature.
#[diagnostic::on_unimplemented(
    message = "`Locker::etcd` needs the `etcd` feature of `lockmacro-runtime`",
    label = "etcd is left out of this build",
    note = "enable it in Cargo.toml: `lockmacro-runtime = {{ version = \"…\", features = [\"etcd\"] }}`"
)]
pub trait EtcdFeature {}

/// Implemented by nothing: the bound of `Locker::postgres` and
/// `Locker::postgres_pool` in a build without the `postgres` feature.
#[diagnostic::on_unimplemented(
    message = "`Locker::postgres` and `Locker::postgres_pool` need the `postgres` feature of `lockmacro-runtime`",
    label = "PostgreSQL is left out of this build",
    note = "enable it in Cargo.toml: `lockmacro-runtime = {{ version = \"…\", features = [\"postgres\"] }}`"
)]
pub trait PostgresFeature {}

#[cfg(not(feature = "redis"))]
impl Locker {
    /// Needs the `redis` feature: see the crate documentation.
    ///
    /// ```compile_fail,E0277
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// let locker = lockmacro_runtime::Locker::connect("redis://127.0.0.1:6379/").await?;
    /// # Ok(()) }
    /// ```
    #[doc(hidden)]
    pub async fn connect<S>(url: S) -> Result<Self, LockError>
    where
        S: AsRef<str> + RedisFeature,
    {
        let _ = url;
        unreachable!("`RedisFeature` has no implementation, so this cannot be called")
    }

    /// Needs the `redis` feature: see the crate documentation.
    ///
    /// ```compile_fail,E0277
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// let locker = lockmacro_runtime::Locker::redlock(["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/"]).await?;
    /// # Ok(()) }
    /// ```
    #[doc(hidden)]
    pub async fn redlock<I, S>(urls: I) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str> + RedisFeature,
    {
        let _ = urls;
        unreachable!("`RedisFeature` has no implementation, so this cannot be called")
    }
}

#[cfg(not(feature = "cluster"))]
impl Locker {
    /// Needs the `cluster` feature: see the crate documentation.
    ///
    /// ```compile_fail,E0277
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// let locker = lockmacro_runtime::Locker::cluster(["redis://10.0.0.1:6379/"]).await?;
    /// # Ok(()) }
    /// ```
    #[doc(hidden)]
    pub async fn cluster<I, S>(seeds: I) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str> + ClusterFeature,
    {
        let _ = seeds;
        unreachable!("`ClusterFeature` has no implementation, so this cannot be called")
    }
}

#[cfg(not(feature = "etcd"))]
impl Locker {
    /// Needs the `etcd` feature: see the crate documentation.
    ///
    /// ```compile_fail,E0277
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// let locker = lockmacro_runtime::Locker::etcd(["http://10.0.0.1:2379"]).await?;
    /// # Ok(()) }
    /// ```
    #[doc(hidden)]
    pub async fn etcd<I, S>(endpoints: I) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str> + EtcdFeature,
    {
        let _ = endpoints;
        unreachable!("`EtcdFeature` has no implementation, so this cannot be called")
    }
}

#[cfg(not(feature = "postgres"))]
impl Locker {
    /// Needs the `postgres` feature: see the crate documentation.
    ///
    /// ```compile_fail,E0277
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// let locker = lockmacro_runtime::Locker::postgres("postgres://app:secret@10.0.0.5/app").await?;
    /// # Ok(()) }
    /// ```
    #[doc(hidden)]
    pub async fn postgres<S>(url: S) -> Result<Self, LockError>
    where
        S: AsRef<str> + PostgresFeature,
    {
        let _ = url;
        unreachable!("`PostgresFeature` has no implementation, so this cannot be called")
    }

    /// Needs the `postgres` feature: see the crate documentation.
    ///
    /// ```compile_fail,E0277
    /// # async fn demo(pool: std::sync::Arc<()>) -> Result<(), lockmacro_runtime::LockError> {
    /// let locker = lockmacro_runtime::Locker::postgres_pool(pool).await?;
    /// # Ok(()) }
    /// ```
    #[doc(hidden)]
    pub async fn postgres_pool<P>(pool: P) -> Result<Self, LockError>
    where
        P: PostgresFeature,
    {
        let _ = pool;
        unreachable!("`PostgresFeature` has no implementation, so this cannot be called")
    }
}

#[cfg(not(feature = "sentinel"))]
impl Locker {
    /// Needs the `sentinel` feature: see the crate documentation.
    ///
    /// ```compile_fail,E0277
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// let locker = lockmacro_runtime::Locker::sentinel("mymaster", ["redis://10.0.0.1:26379"]).await?;
    /// # Ok(()) }
    /// ```
    #[doc(hidden)]
    pub async fn sentinel<I, S>(master: &str, sentinels: I) -> Result<Self, LockError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str> + SentinelFeature,
    {
        let _ = (master, sentinels);
        unreachable!("`SentinelFeature` has no implementation, so this cannot be called")
    }
}
