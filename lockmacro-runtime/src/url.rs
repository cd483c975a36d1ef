//! One URL for any backend: [`Locker::from_url`], which reads the scheme
//! and calls the backend's own constructor, and
//! [`Locker::from_url_if_set_up`], which creates nothing to open it.

use crate::backend::redact;
use crate::{LockError, Locker};

/// The deployment a URL names, with the URLs its constructor takes.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// One Redis server: the URL as given.
    Redis(String),
    /// Seed nodes of a Redis Cluster.
    Cluster(Vec<String>),
    /// The master the sentinels name, as a URL with its credentials and
    /// database, and the sentinels.
    Sentinel {
        master: String,
        sentinels: Vec<String>,
    },
    /// Independent Redis masters.
    Redlock(Vec<String>),
    /// The members of an etcd cluster.
    Etcd(Vec<String>),
    /// A PostgreSQL database: the URL as given.
    Postgres(String),
}

/// The schemes [`Locker::from_url`] reads, for error messages.
const SCHEMES: &str = "redis://, rediss://, redis+cluster://, redis+sentinel://, \
                       redis+redlock:// (each also as rediss+…), etcd://, postgres://";

impl Target {
    fn parse(url: &str) -> Result<Target, LockError> {
        let invalid = |reason: String| LockError::InvalidUrl {
            url: redact(url),
            reason,
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(invalid(format!("no scheme; use one of {SCHEMES}")));
        };
        let scheme = scheme.to_ascii_lowercase();
        let (base, deployment) = scheme.split_once('+').unwrap_or((&scheme, ""));
        // `user:password@host:port,host:port/path`: the credentials and the
        // path apply to every host.
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
            None => (String::new(), authority),
        };
        let hosts: Vec<&str> = hosts.split(',').collect();
        if hosts.iter().any(|host| host.is_empty()) {
            return Err(invalid(
                "a host is missing (`host:port[,host:port…]`)".into(),
            ));
        }
        let each = |scheme: &str, path: &str| -> Vec<String> {
            hosts
                .iter()
                .map(|host| format!("{scheme}://{userinfo}{host}/{path}"))
                .collect()
        };
        let single = |target: fn(String) -> Target| {
            if hosts.len() > 1 {
                return Err(invalid(format!(
                    "`{scheme}://` names one server; for several, use \
                     `{scheme}+cluster://`, `{scheme}+sentinel://` or `{scheme}+redlock://`"
                )));
            }
            Ok(target(url.to_owned()))
        };
        match (base, deployment) {
            ("redis" | "rediss", "") => single(Target::Redis),
            ("redis" | "rediss", "cluster") => Ok(Target::Cluster(each(base, path))),
            ("redis" | "rediss", "redlock") => Ok(Target::Redlock(each(base, path))),
            ("redis" | "rediss", "sentinel") => {
                let (master, db) = path.split_once('/').unwrap_or((path, ""));
                if master.is_empty() {
                    return Err(invalid(
                        "no master name; write it as the path: \
                         `redis+sentinel://host:port,host:port/mymaster[/db]`"
                            .into(),
                    ));
                }
                Ok(Target::Sentinel {
                    master: format!("{base}://{userinfo}{master}/{db}"),
                    sentinels: hosts
                        .iter()
                        .map(|host| format!("{base}://{host}"))
                        .collect(),
                })
            }
            ("etcd", "") if userinfo.is_empty() && path.is_empty() => Ok(Target::Etcd(
                hosts.iter().map(|host| format!("http://{host}")).collect(),
            )),
            ("etcd", "") => Err(invalid(
                "an etcd URL is `etcd://host:port[,host:port…]`, with no credentials or path"
                    .into(),
            )),
            ("postgres" | "postgresql", "") => single(Target::Postgres),
            _ => Err(invalid(format!(
                "unknown scheme `{scheme}://`; use one of {SCHEMES}"
            ))),
        }
    }
}

impl Locker {
    /// A locker on whatever `url` names, by its scheme:
    ///
    /// | URL | backend | as |
    /// |---|---|---|
    /// | `redis://[user:password@]host:port[/db]`, `rediss://…` (TLS) | one Redis server | [`Locker::connect`] |
    /// | `redis+cluster://[user:password@]host:port[,host:port…]` | Redis Cluster, through these seeds (feature `cluster`) | `Locker::cluster` |
    /// | `redis+sentinel://host:port[,host:port…]/master[/db]` | the master the sentinels name `master`; credentials before the hosts are the master's | [`Locker::sentinel`] |
    /// | `redis+redlock://[user:password@]host:port,host:port,host:port[/db]` | independent masters, by majority | [`Locker::redlock`] |
    /// | `etcd://host:port[,host:port…]` | an etcd cluster, over plain HTTP (feature `etcd`) | `Locker::etcd` |
    /// | `postgres://user:password@host:port/db`, `postgresql://…` | a PostgreSQL database (feature `postgres`) | `Locker::postgres` |
    ///
    /// Each `redis+…` form is also `rediss+…`, for TLS to every host. The
    /// credentials and database are given once and apply to each host.
    /// For settings a URL cannot carry (timeouts, certificates, etcd's TLS),
    /// build the backend with its `connect_with` and use [`Locker::new`].
    ///
    /// Fails with [`LockError::InvalidUrl`] for an unknown scheme, a URL
    /// that cannot be parsed, or a scheme whose feature this build lacks,
    /// and as the backend's constructor fails otherwise.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::Locker;
    ///
    /// let url = std::env::var("LOCKMACRO_URL").unwrap_or("redis://127.0.0.1:6379/".into());
    /// let locker = Locker::from_url(&url).await?;
    /// # let _ = locker; Ok(()) }
    /// ```
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use lockmacro_runtime::{LockError, Locker};
    ///
    /// let refused = Locker::from_url("mysql://db/app").await.unwrap_err();
    /// assert!(matches!(refused, LockError::InvalidUrl { .. }));
    /// # }
    /// ```
    pub async fn from_url(url: &str) -> Result<Self, LockError> {
        open(url, Target::parse(url)?).await
    }

    /// Like [`from_url`](Self::from_url), but creates nothing on the
    /// backend to open it: `Ok(None)` when `url` names a PostgreSQL
    /// database without lockmacro's tables, where nothing can be held,
    /// instead of creating them there (as with
    /// `PostgresConfig::create_schema(false)`, a schema older than this
    /// version's is an error naming the migration). For tools that look at the locks of an application,
    /// such as the `lockmacro` command line, and must leave a database
    /// named by mistake as they found it. The other backends create
    /// nothing when they connect: their lockers are the ones `from_url`
    /// opens.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lockmacro_runtime::LockError> {
    /// use lockmacro_runtime::Locker;
    ///
    /// match Locker::from_url_if_set_up("postgres://ops@10.0.0.5/app").await? {
    ///     Some(locker) => println!("{} keys held", locker.list("").await?.len()),
    ///     None => println!("no lockmacro tables in this database"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn from_url_if_set_up(url: &str) -> Result<Option<Self>, LockError> {
        match Target::parse(url)? {
            Target::Postgres(url) => postgres_if_set_up(&url).await,
            target => open(url, target).await.map(Some),
        }
    }
}

/// A locker on `target`, which `url` names.
async fn open(url: &str, target: Target) -> Result<Locker, LockError> {
    match target {
        Target::Redis(url) => redis(&url).await,
        Target::Cluster(seeds) => cluster(url, seeds).await,
        Target::Sentinel { master, sentinels } => sentinel(url, &master, sentinels).await,
        Target::Redlock(urls) => redlock(url, urls).await,
        Target::Etcd(endpoints) => etcd(url, endpoints).await,
        Target::Postgres(url) => postgres(&url).await,
    }
}

/// The error of a URL whose backend this build was compiled without.
#[cfg_attr(
    all(
        feature = "redis",
        feature = "cluster",
        feature = "sentinel",
        feature = "etcd",
        feature = "postgres"
    ),
    allow(dead_code)
)]
fn missing(url: &str, feature: &str) -> LockError {
    LockError::InvalidUrl {
        url: redact(url),
        reason: format!(
            "this build has no `{feature}` backend; enable the `{feature}` feature of \
             lockmacro-runtime"
        ),
    }
}

#[cfg(feature = "redis")]
async fn redis(url: &str) -> Result<Locker, LockError> {
    Locker::connect(url).await
}

#[cfg(not(feature = "redis"))]
async fn redis(url: &str) -> Result<Locker, LockError> {
    Err(missing(url, "redis"))
}

#[cfg(feature = "redis")]
async fn redlock(_: &str, urls: Vec<String>) -> Result<Locker, LockError> {
    Locker::redlock(urls).await
}

#[cfg(not(feature = "redis"))]
async fn redlock(url: &str, _: Vec<String>) -> Result<Locker, LockError> {
    Err(missing(url, "redis"))
}

#[cfg(feature = "cluster")]
async fn cluster(_: &str, seeds: Vec<String>) -> Result<Locker, LockError> {
    Locker::cluster(seeds).await
}

#[cfg(not(feature = "cluster"))]
async fn cluster(url: &str, _: Vec<String>) -> Result<Locker, LockError> {
    Err(missing(url, "cluster"))
}

#[cfg(feature = "sentinel")]
async fn sentinel(_: &str, master: &str, sentinels: Vec<String>) -> Result<Locker, LockError> {
    Locker::sentinel(master, sentinels).await
}

#[cfg(not(feature = "sentinel"))]
async fn sentinel(url: &str, _: &str, _: Vec<String>) -> Result<Locker, LockError> {
    Err(missing(url, "sentinel"))
}

#[cfg(feature = "etcd")]
async fn etcd(_: &str, endpoints: Vec<String>) -> Result<Locker, LockError> {
    Locker::etcd(endpoints).await
}

#[cfg(not(feature = "etcd"))]
async fn etcd(url: &str, _: Vec<String>) -> Result<Locker, LockError> {
    Err(missing(url, "etcd"))
}

#[cfg(feature = "postgres")]
async fn postgres(url: &str) -> Result<Locker, LockError> {
    Locker::postgres(url).await
}

#[cfg(not(feature = "postgres"))]
async fn postgres(url: &str) -> Result<Locker, LockError> {
    Err(missing(url, "postgres"))
}

#[cfg(feature = "postgres")]
async fn postgres_if_set_up(url: &str) -> Result<Option<Locker>, LockError> {
    let backend = crate::PostgresBackend::connect_if_set_up(url).await?;
    Ok(backend.map(Locker::new))
}

#[cfg(not(feature = "postgres"))]
async fn postgres_if_set_up(url: &str) -> Result<Option<Locker>, LockError> {
    Err(missing(url, "postgres"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(url: &str) -> Target {
        Target::parse(url).unwrap_or_else(|err| panic!("{url}: {err}"))
    }

    fn refused(url: &str) -> String {
        match Target::parse(url) {
            Err(LockError::InvalidUrl { url, reason }) => format!("{url}: {reason}"),
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn one_server_urls_pass_as_given() {
        for url in [
            "redis://127.0.0.1:6379/",
            "rediss://u:p@h:6380/2",
            "REDIS://h",
        ] {
            assert_eq!(parsed(url), Target::Redis(url.to_owned()));
        }
        let pg = "postgresql://app:secret@h:5432/app?sslmode=require";
        assert_eq!(parsed(pg), Target::Postgres(pg.to_owned()));
    }

    #[test]
    fn several_hosts_share_the_credentials_and_database() {
        assert_eq!(
            parsed("redis+cluster://u:p@a:7000,b:7001"),
            Target::Cluster(vec![
                "redis://u:p@a:7000/".into(),
                "redis://u:p@b:7001/".into()
            ])
        );
        assert_eq!(
            parsed("rediss+redlock://a:1,b:2,c:3/4"),
            Target::Redlock(vec![
                "rediss://a:1/4".into(),
                "rediss://b:2/4".into(),
                "rediss://c:3/4".into()
            ])
        );
        assert_eq!(
            parsed("etcd://a:2379,b:2379"),
            Target::Etcd(vec!["http://a:2379".into(), "http://b:2379".into()])
        );
    }

    #[test]
    fn sentinel_urls_name_the_master_in_the_path() {
        assert_eq!(
            parsed("redis+sentinel://app:pw@s1:26379,s2:26379/mymaster/2"),
            Target::Sentinel {
                master: "redis://app:pw@mymaster/2".into(),
                sentinels: vec!["redis://s1:26379".into(), "redis://s2:26379".into()],
            }
        );
        assert!(refused("redis+sentinel://s1:26379").contains("master name"));
    }

    #[test]
    fn refusals_say_what_to_write_and_hide_the_password() {
        let unknown = refused("mysql://root:hunter2@db/app");
        assert!(unknown.contains("unknown scheme `mysql://`"), "{unknown}");
        assert!(!unknown.contains("hunter2"), "{unknown}");
        assert!(refused("127.0.0.1:6379").contains("no scheme"));
        assert!(refused("redis://a:1,b:2").contains("redis+cluster://"));
        assert!(refused("redis+cluster://a:1,,b:2").contains("host is missing"));
        assert!(refused("etcd://u:p@a:2379").contains("no credentials"));
    }
}
