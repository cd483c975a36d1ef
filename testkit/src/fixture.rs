//! A backend under test, the same for every suite that runs its cases on each
//! backend: lockers on it, and a look at its state that does not go through
//! the library (the witness must not trust the lock).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockmacro_runtime::backend::Backend;
use lockmacro_runtime::{LockError, Locker, MemoryBackend, ObtainOptions};

use crate::RedisServer;
use crate::cluster::RedisCluster;
use crate::kind::Kind;
use crate::sentinel::RedisSentinel;
use crate::shared::Shared;

/// Independent masters behind the Redlock fixture: the smallest count with a
/// majority that is not everyone.
const REDLOCK_MASTERS: usize = 3;
const REDLOCK_QUORUM: usize = REDLOCK_MASTERS / 2 + 1;

/// How long a killed node may take to close its connections.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);

/// A backend under test: hands out independent lockers on it (each with its
/// own connections, for Redis), as separate processes would have.
///
/// A fixture has its servers to itself, or shares them with the other tests
/// of the binary (the cluster, Sentinel and etcd fixtures, which take seconds
/// to start): then every locker it hands out keeps its keys under a namespace
/// of the test's own, so that no test sees another's locks, and the fixture
/// refuses to stop or freeze the servers.
pub struct Fixture {
    kind: Kind,
    backend: Under,
    /// Empty on servers of the test's own; on shared servers the test's
    /// namespace (`t7`), which [`Fixture::locker`] puts the lockers in and
    /// the look behind the library's back puts before every key.
    namespace: String,
}

enum Under {
    Redis(RedisServer),
    Cluster(Arc<RedisCluster>),
    Redlock(Vec<RedisServer>),
    /// A backend in this process: the crate's own, or one written outside it.
    Memory(Arc<dyn Backend>),
    #[cfg(feature = "etcd")]
    Etcd(Arc<crate::etcd::EtcdCluster>),
    Sentinel(Arc<RedisSentinel>),
    #[cfg(feature = "postgres")]
    Postgres(crate::pgdb::PostgresDb),
}

/// A namespace no other test of the binary has.
fn namespace_of_its_own() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    format!("t{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Runs `start` on a blocking thread, passing on its panic.
async fn blocking<T: Send + 'static>(start: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(start)
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()))
}

impl Fixture {
    fn own(kind: Kind, backend: Under) -> Self {
        Fixture {
            kind,
            backend,
            namespace: String::new(),
        }
    }

    fn shared(kind: Kind, backend: Under) -> Self {
        Fixture {
            kind,
            backend,
            namespace: namespace_of_its_own(),
        }
    }

    /// A fixture on `kind`, on the servers the binary shares for it (the
    /// cluster, Sentinel and etcd ones), or on servers of its own for the
    /// kinds that start in milliseconds.
    pub async fn on(kind: Kind) -> Self {
        match kind {
            Kind::Redis => Fixture::redis().await,
            Kind::Valkey => Fixture::valkey().await,
            Kind::Cluster => Fixture::cluster().await,
            Kind::Redlock => Fixture::redlock().await,
            Kind::Sentinel => Fixture::sentinel().await,
            Kind::Memory => Fixture::memory(),
            Kind::Outside => Fixture::outside(),
            #[cfg(feature = "etcd")]
            Kind::Etcd => Fixture::etcd().await,
            #[cfg(not(feature = "etcd"))]
            Kind::Etcd => panic!("the etcd fixture needs the `etcd` feature"),
            #[cfg(feature = "postgres")]
            Kind::Postgres => Fixture::postgres().await,
            #[cfg(not(feature = "postgres"))]
            Kind::Postgres => panic!("the PostgreSQL fixture needs the `postgres` feature"),
        }
    }

    /// A fixture on `kind` with servers of the test's own: for a test that
    /// stops or freezes them, counts their commands, or reads their keys
    /// without a namespace.
    pub async fn own_servers(kind: Kind) -> Self {
        match kind {
            Kind::Cluster => Fixture::own_cluster().await,
            Kind::Sentinel => Fixture::own_sentinel().await,
            #[cfg(feature = "etcd")]
            Kind::Etcd => Fixture::own_etcd().await,
            #[cfg(feature = "postgres")]
            Kind::Postgres => Fixture::own_postgres().await,
            other => Fixture::on(other).await,
        }
    }

    /// Which backend this is, and so what it can do.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// A server of the test's own: one starts in milliseconds.
    pub async fn redis() -> Self {
        Fixture::own(Kind::Redis, Under::Redis(RedisServer::start()))
    }

    /// A `valkey-server` of the test's own, behind the Redis backend.
    pub async fn valkey() -> Self {
        Fixture::own(Kind::Valkey, Under::Redis(RedisServer::valkey()))
    }

    /// The binary's cluster of three masters with a replica each, shared
    /// with the other tests under a namespace of the test's own.
    pub async fn cluster() -> Self {
        static CLUSTER: Shared<RedisCluster> = Shared::new();
        let cluster = blocking(|| CLUSTER.get(RedisCluster::start_steady)).await;
        Fixture::shared(Kind::Cluster, Under::Cluster(cluster))
    }

    /// A cluster of the test's own: for a test that stops or freezes it, or
    /// that checks names as the cluster stores them, without a namespace.
    pub async fn own_cluster() -> Self {
        let cluster = blocking(RedisCluster::start).await;
        Fixture::own(Kind::Cluster, Under::Cluster(Arc::new(cluster)))
    }

    /// Masters of the test's own: they start in milliseconds.
    pub async fn redlock() -> Self {
        Fixture::own(
            Kind::Redlock,
            Under::Redlock(RedisServer::start_many(REDLOCK_MASTERS)),
        )
    }

    /// The binary's Sentinel deployment (one master, two replicas, three
    /// sentinels), shared with the other tests under a namespace of the
    /// test's own; the tests read and write its master.
    pub async fn sentinel() -> Self {
        static DEPLOYMENT: Shared<RedisSentinel> = Shared::new();
        let deployment = blocking(|| DEPLOYMENT.get(RedisSentinel::start_steady)).await;
        Fixture::shared(Kind::Sentinel, Under::Sentinel(deployment))
    }

    /// A Sentinel deployment of the test's own, for a test that stops or
    /// freezes its servers.
    pub async fn own_sentinel() -> Self {
        let deployment = blocking(RedisSentinel::start_quick).await;
        Fixture::own(Kind::Sentinel, Under::Sentinel(Arc::new(deployment)))
    }

    pub fn memory() -> Self {
        Fixture::own(Kind::Memory, Under::Memory(Arc::new(MemoryBackend::new())))
    }

    /// A backend written outside the crate (`support/outside.rs`).
    pub fn outside() -> Self {
        Fixture::own(
            Kind::Outside,
            Under::Memory(Arc::new(crate::outside::MapBackend::default())),
        )
    }

    /// The binary's etcd member, shared with the other tests under a
    /// namespace of the test's own.
    #[cfg(feature = "etcd")]
    pub async fn etcd() -> Self {
        use crate::etcd::EtcdCluster;
        static MEMBER: Shared<EtcdCluster> = Shared::new();
        let cluster = blocking(|| MEMBER.get(EtcdCluster::single)).await;
        Fixture::shared(Kind::Etcd, Under::Etcd(cluster))
    }

    /// An etcd member of the test's own, for a test that stops or freezes
    /// it.
    #[cfg(feature = "etcd")]
    pub async fn own_etcd() -> Self {
        let cluster = blocking(crate::etcd::EtcdCluster::single).await;
        Fixture::own(Kind::Etcd, Under::Etcd(Arc::new(cluster)))
    }

    /// The binary's PostgreSQL server, shared with the other tests, in a
    /// database of the test's own (and under a namespace of its own).
    #[cfg(feature = "postgres")]
    pub async fn postgres() -> Self {
        use crate::postgres::PostgresServer;
        static SERVER: Shared<PostgresServer> = Shared::new();
        let server = blocking(|| SERVER.get(PostgresServer::start)).await;
        let db = crate::pgdb::PostgresDb::create(server).await;
        Fixture::shared(Kind::Postgres, Under::Postgres(db))
    }

    /// A PostgreSQL server of the test's own, for a test that stops,
    /// freezes or restarts it.
    #[cfg(feature = "postgres")]
    pub async fn own_postgres() -> Self {
        let server = blocking(crate::postgres::PostgresServer::start).await;
        let db = crate::pgdb::PostgresDb::create(Arc::new(server)).await;
        Fixture::own(Kind::Postgres, Under::Postgres(db))
    }

    /// The database behind a PostgreSQL fixture.
    #[cfg(feature = "postgres")]
    pub fn postgres_db(&self) -> Option<&crate::pgdb::PostgresDb> {
        match &self.backend {
            Under::Postgres(db) => Some(db),
            _ => None,
        }
    }

    /// The namespace of the fixture's lockers: empty on servers of the
    /// test's own.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `key` as the fixture's lockers store it: after the test's namespace,
    /// as [`Locker::wire_key`] writes it.
    pub fn wire_key(&self, key: &str) -> String {
        if self.namespace.is_empty() {
            key.to_owned()
        } else {
            format!("{}:{key}", self.namespace)
        }
    }

    /// A client that looks at the etcd store behind the library's back.
    #[cfg(feature = "etcd")]
    async fn etcd_client(&self) -> etcd_client::Client {
        let Under::Etcd(cluster) = &self.backend else {
            panic!("not an etcd fixture");
        };
        let endpoints = cluster.endpoints();
        self.check(
            etcd_client::Client::connect(&endpoints, None).await,
            "connecting to etcd",
        )
    }

    /// The key-value stored under `wire_key` in etcd.
    #[cfg(feature = "etcd")]
    async fn etcd_get(&self, wire_key: &str) -> Option<etcd_client::KeyValue> {
        let mut client = self.etcd_client().await;
        let mut found = self.check(client.get(wire_key, None).await, "etcd get");
        found.take_kvs().into_iter().next()
    }

    /// Whether any share of `wire_key` (a permit, a read, the write) is
    /// stored in etcd: each is a key under `<key>/shares/`.
    #[cfg(feature = "etcd")]
    async fn etcd_shared(&self, wire_key: &str) -> bool {
        let mut client = self.etcd_client().await;
        let prefix = format!("{wire_key}/shares/");
        let options = etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        let found = self.check(client.get(prefix, Some(options)).await, "etcd get");
        found.count() > 0
    }

    /// A new locker on the fixture's backend, in the test's namespace on
    /// shared servers.
    pub async fn locker(&self) -> Locker {
        self.locker_without_namespace()
            .await
            .with_namespace(&self.namespace)
    }

    /// `n` new lockers, each with its own connections, as `n` processes
    /// would have.
    pub async fn lockers(&self, n: usize) -> Vec<Locker> {
        let mut lockers = Vec::with_capacity(n);
        for _ in 0..n {
            lockers.push(self.locker().await);
        }
        lockers
    }

    /// The cluster behind a cluster fixture.
    pub fn redis_cluster(&self) -> Option<&RedisCluster> {
        match &self.backend {
            Under::Cluster(cluster) => Some(cluster),
            _ => None,
        }
    }

    /// The etcd members behind an etcd fixture.
    #[cfg(feature = "etcd")]
    pub fn etcd_cluster(&self) -> Option<&crate::etcd::EtcdCluster> {
        match &self.backend {
            Under::Etcd(cluster) => Some(cluster),
            _ => None,
        }
    }

    /// The Redis server that stores `wire_key` (a key as the store names
    /// it, namespace included): the server, the master of its slot, or the
    /// Sentinel deployment's master. `None` on Redlock (every master stores
    /// it, see [`Fixture::servers_for`]), etcd and the stores in this process.
    pub fn node_for(&self, wire_key: &str) -> Option<&RedisServer> {
        match &self.backend {
            Under::Cluster(cluster) => Some(cluster.node(cluster.master_for(wire_key))),
            _ => self.master(),
        }
    }

    /// The Redis servers that store `wire_key`: the server, every Redlock
    /// master, the master of its slot, or the Sentinel deployment's master;
    /// none on etcd and the stores in this process.
    pub fn servers_for(&self, wire_key: &str) -> Vec<&RedisServer> {
        match &self.backend {
            Under::Redlock(masters) => masters.iter().collect(),
            _ => self.node_for(wire_key).into_iter().collect(),
        }
    }

    async fn locker_without_namespace(&self) -> Locker {
        match &self.backend {
            Under::Redis(server) => server.locker().await,
            #[cfg(feature = "cluster")]
            Under::Cluster(cluster) => cluster.locker().await,
            #[cfg(not(feature = "cluster"))]
            Under::Cluster(_) => panic!("the cluster fixture needs the `cluster` feature"),
            Under::Redlock(masters) => RedisServer::redlock_locker(masters).await,
            Under::Memory(memory) => Locker::new(memory.clone()),
            #[cfg(feature = "etcd")]
            Under::Etcd(cluster) => cluster.locker().await,
            #[cfg(feature = "postgres")]
            Under::Postgres(db) => db.locker().await,
            #[cfg(feature = "sentinel")]
            Under::Sentinel(deployment) => {
                let backend = lockmacro_runtime::SentinelBackend::connect(
                    crate::sentinel::MASTER_NAME,
                    deployment.sentinel_urls(),
                )
                .await;
                Locker::new(self.check(backend, "connect"))
            }
            #[cfg(not(feature = "sentinel"))]
            Under::Sentinel(_) => panic!("the Sentinel fixture needs the `sentinel` feature"),
        }
    }

    /// The server that holds the keys, on backends with one such server.
    pub fn master(&self) -> Option<&RedisServer> {
        match &self.backend {
            Under::Redis(server) => Some(server),
            Under::Sentinel(deployment) => Some(deployment.server(deployment.master())),
            _ => None,
        }
    }

    /// The look behind the library's back, from here to `value`, takes keys
    /// as the fixture's lockers name them, and adds the test's namespace.
    ///
    /// Whether `key` is locked, as the store says: on Redis, the key exists on
    /// the server, or on the master that serves its slot; on Redlock, it
    /// exists on a majority of the masters. The in-memory store can only be
    /// asked through a locker: another one cannot obtain the key.
    pub async fn is_held(&self, key: &str) -> bool {
        let wire_key = self.wire_key(key);
        let key = wire_key.as_str();
        match &self.backend {
            Under::Redis(_) | Under::Sentinel(_) => self.held_on_master(key),
            Under::Cluster(cluster) => cluster.node(cluster.master_for(key)).cmd(&["EXISTS", key]),
            Under::Redlock(masters) => {
                let holding = masters
                    .iter()
                    .filter(|master| master.cmd::<bool>(&["EXISTS", key]))
                    .count();
                holding >= REDLOCK_QUORUM
            }
            Under::Memory(memory) => {
                let probe = Locker::new(memory.clone());
                match probe
                    .obtain(key, Duration::from_secs(5), ObtainOptions::new())
                    .await
                {
                    Ok(lock) => {
                        self.check(lock.release().await, "releasing the probe");
                        false
                    }
                    Err(LockError::NotObtained { .. } | LockError::WrongKind { .. }) => true,
                    Err(err) => panic!("probing {key}: {err:?}"),
                }
            }
            #[cfg(feature = "etcd")]
            Under::Etcd(_) => self.etcd_get(key).await.is_some() || self.etcd_shared(key).await,
            #[cfg(feature = "postgres")]
            Under::Postgres(db) => db.is_held(key).await,
        }
    }

    /// What is left of the lease on `key`, as the store says; `None` when the
    /// key is not there or never expires. On Redlock, the lease a majority still has: the
    /// `quorum`-th longest. The in-memory store does not tell anyone but the
    /// owner; cases that need this leave the memory backend out.
    pub async fn lease_left(&self, key: &str) -> Option<Duration> {
        let wire_key = self.wire_key(key);
        let key = wire_key.as_str();
        let pttl = |node: &RedisServer| {
            let millis: i64 = node.cmd(&["PTTL", key]);
            u64::try_from(millis).ok().map(Duration::from_millis)
        };
        match &self.backend {
            Under::Redis(_) | Under::Sentinel(_) => pttl(self.master().expect("one master")),
            Under::Cluster(cluster) => pttl(cluster.node(cluster.master_for(key))),
            Under::Redlock(masters) => {
                let mut left: Vec<Duration> = masters.iter().filter_map(pttl).collect();
                left.sort_unstable_by(|a, b| b.cmp(a));
                left.get(REDLOCK_QUORUM - 1).copied()
            }
            Under::Memory(_) => panic!("the memory backend does not show another owner's lease"),
            #[cfg(feature = "etcd")]
            Under::Etcd(_) => {
                let lease = self.etcd_get(key).await?.lease();
                if lease == 0 {
                    return None;
                }
                let mut client = self.etcd_client().await;
                let left = self.check(client.lease_time_to_live(lease, None).await, "lease ttl");
                u64::try_from(left.ttl()).ok().map(Duration::from_secs)
            }
            #[cfg(feature = "postgres")]
            Under::Postgres(db) => db.lease_left(key).await,
        }
    }

    /// Writes `value` under `key` for 30 s behind the library's back, as
    /// another owner that took the key over would: on every master, for
    /// Redlock. Not possible on the in-memory store.
    pub async fn overwrite(&self, key: &str, value: &str) {
        let wire_key = self.wire_key(key);
        let key = wire_key.as_str();
        let set = |node: &RedisServer| {
            let () = node.cmd(&["SET", key, value, "PX", "30000"]);
        };
        match &self.backend {
            Under::Redis(_) | Under::Sentinel(_) => set(self.master().expect("one master")),
            Under::Cluster(cluster) => set(cluster.node(cluster.master_for(key))),
            Under::Redlock(masters) => masters.iter().for_each(set),
            Under::Memory(_) => panic!("the memory backend cannot be written behind its back"),
            #[cfg(feature = "etcd")]
            Under::Etcd(_) => {
                let mut client = self.etcd_client().await;
                let lease = self.check(client.lease_grant(30, None).await, "lease grant");
                let options = etcd_client::PutOptions::new().with_lease(lease.id());
                self.check(client.put(key, value, Some(options)).await, "etcd put");
            }
            #[cfg(feature = "postgres")]
            Under::Postgres(db) => db.overwrite(key, value).await,
        }
    }

    /// Sets the fence counter `key` to `value` on every master, without expiry.
    /// Redlock's token is the largest counter among the masters that granted,
    /// and each master seeds a missing counter from its own clock: fresh
    /// counters differ by the microseconds between the masters' first use, so
    /// tokens may skip. Set equal, they count one by one, as a single counter
    /// does. Nothing to do on the in-memory store, whose counter is one.
    pub async fn set_fence_counter(&self, key: &str, value: u64) {
        let wire_key = self.wire_key(key);
        let key = wire_key.as_str();
        let value = value.to_string();
        let set = |node: &RedisServer| {
            let () = node.cmd(&["SET", key, &value]);
        };
        match &self.backend {
            Under::Redis(_) | Under::Sentinel(_) => set(self.master().expect("one master")),
            Under::Cluster(cluster) => set(cluster.node(cluster.master_for(key))),
            Under::Redlock(masters) => masters.iter().for_each(set),
            Under::Memory(_) => {}
            // Tokens are revisions on etcd, not counters: nothing to set.
            #[cfg(feature = "etcd")]
            Under::Etcd(_) => {}
            #[cfg(feature = "postgres")]
            Under::Postgres(db) => {
                db.set_fence_counter(key, value.parse().expect("a number"))
                    .await
            }
        }
    }

    /// The value under `key`: for Redlock, the value a majority of the masters
    /// agree on. Not possible on the in-memory store.
    pub async fn value(&self, key: &str) -> Option<String> {
        let wire_key = self.wire_key(key);
        let key = wire_key.as_str();
        let get = |node: &RedisServer| node.cmd::<Option<String>>(&["GET", key]);
        match &self.backend {
            Under::Redis(_) | Under::Sentinel(_) => get(self.master().expect("one master")),
            Under::Cluster(cluster) => get(cluster.node(cluster.master_for(key))),
            Under::Redlock(masters) => {
                let values: Vec<Option<String>> = masters.iter().map(get).collect();
                values
                    .iter()
                    .flatten()
                    .find(|value| {
                        values.iter().flatten().filter(|v| v == value).count() >= REDLOCK_QUORUM
                    })
                    .cloned()
            }
            Under::Memory(_) => panic!("the memory backend cannot be read behind its back"),
            #[cfg(feature = "etcd")]
            Under::Etcd(_) => self
                .etcd_get(key)
                .await
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
            #[cfg(feature = "postgres")]
            Under::Postgres(db) => db.value(key).await,
        }
    }

    /// The keys stored on the Redis servers behind the fixture whose names
    /// contain `key` as the fixture's lockers name it: the key itself and
    /// what the backend keeps beside it (`{K}:fence`, `{K}:holders`, …), on
    /// the servers that store the key ([`Fixture::servers_for`]), sorted,
    /// once each. Empty on etcd, PostgreSQL and the stores in this process,
    /// which keep nothing beside a key under a name of its own (ask
    /// [`Fixture::is_held`] there).
    pub fn keys_named_after(&self, key: &str) -> Vec<String> {
        let wire_key = self.wire_key(key);
        let mut pattern = String::from("*");
        for c in wire_key.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push('*');
        let mut keys: Vec<String> = self
            .servers_for(&wire_key)
            .into_iter()
            .flat_map(|server| server.cmd::<Vec<String>>(&["KEYS", &pattern]))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    fn held_on_master(&self, key: &str) -> bool {
        self.master().expect("one master").cmd(&["EXISTS", key])
    }

    /// Panics when the servers are shared: the test that would `what` them
    /// needs a fixture of its own (`Fixture::own_cluster` and the like).
    #[track_caller]
    fn refuse_on_shared_servers(&self, what: &str) {
        assert!(
            self.namespace.is_empty(),
            "cannot {what} servers that other tests share: give the test servers of its own"
        );
    }

    /// Kills every server behind the backend with SIGKILL, as a crash would,
    /// so that calls fail; the harness reaps them when the fixture drops. An
    /// in-memory store cannot become unreachable; cases that need this leave
    /// the memory backend out.
    #[track_caller]
    pub fn stop(&self) {
        self.refuse_on_shared_servers("stop");
        #[cfg(feature = "etcd")]
        if let Under::Etcd(cluster) = &self.backend {
            return cluster.kill_all();
        }
        #[cfg(feature = "postgres")]
        if let Under::Postgres(db) = &self.backend {
            return db.server().kill();
        }
        self.servers().for_each(kill);
    }

    /// Freezes every server behind the backend: connections stay open,
    /// nothing is answered. Not possible on the in-memory store.
    #[track_caller]
    pub fn pause(&self) {
        self.refuse_on_shared_servers("pause");
        #[cfg(feature = "etcd")]
        if let Under::Etcd(cluster) = &self.backend {
            return cluster.pause();
        }
        #[cfg(feature = "postgres")]
        if let Under::Postgres(db) = &self.backend {
            return db.server().pause();
        }
        self.servers().for_each(RedisServer::pause);
    }

    /// Undoes [`Fixture::pause`].
    pub fn resume(&self) {
        #[cfg(feature = "etcd")]
        if let Under::Etcd(cluster) = &self.backend {
            return cluster.resume();
        }
        #[cfg(feature = "postgres")]
        if let Under::Postgres(db) = &self.backend {
            return db.server().resume();
        }
        self.servers().for_each(RedisServer::resume);
    }

    /// The logs of every server, for a failure message.
    pub fn logs(&self) -> String {
        #[cfg(feature = "etcd")]
        if let Under::Etcd(cluster) = &self.backend {
            return cluster.logs();
        }
        #[cfg(feature = "postgres")]
        if let Under::Postgres(db) = &self.backend {
            return db.server().log();
        }
        self.servers()
            .map(|server| {
                format!(
                    "--- log of {} on port {} ---\n{}",
                    server.program().name(),
                    server.port(),
                    server.log().trim_end()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn servers(&self) -> Box<dyn Iterator<Item = &RedisServer> + '_> {
        match &self.backend {
            Under::Redis(server) => Box::new(std::iter::once(server)),
            Under::Cluster(cluster) => Box::new(cluster.nodes().iter()),
            Under::Redlock(masters) => Box::new(masters.iter()),
            Under::Memory(_) => panic!("the memory backend has no servers"),
            #[cfg(feature = "etcd")]
            Under::Etcd(_) => panic!("etcd members are not redis servers"),
            #[cfg(feature = "postgres")]
            Under::Postgres(_) => panic!("a PostgreSQL server is not a redis server"),
            // The master and its replicas; the sentinels stay up.
            Under::Sentinel(deployment) => Box::new(deployment.servers().iter()),
        }
    }

    /// Panics with `what`, plus the server logs when there are servers.
    #[track_caller]
    pub fn check<T, E: std::fmt::Debug>(&self, result: Result<T, E>, what: &str) -> T {
        match (&self.backend, result) {
            (_, Ok(value)) => value,
            (Under::Redis(server), Err(err)) => server.expect_ok(Err(err), what),
            (Under::Cluster(cluster), Err(err)) => {
                cluster.fail(format_args!("{what}: unexpected error: {err:?}"))
            }
            (Under::Redlock(masters), Err(err)) => {
                let logs: Vec<String> = masters
                    .iter()
                    .map(|master| {
                        format!(
                            "--- log of master on port {} ---\n{}",
                            master.port(),
                            master.log()
                        )
                    })
                    .collect();
                panic!("{what}: unexpected error: {err:?}\n{}", logs.join("\n"))
            }
            (Under::Memory(_), Err(err)) => panic!("{what}: {err:?}"),
            #[cfg(feature = "etcd")]
            (Under::Etcd(cluster), Err(err)) => {
                cluster.fail(format_args!("{what}: unexpected error: {err:?}"))
            }
            #[cfg(feature = "postgres")]
            (Under::Postgres(db), Err(err)) => db
                .server()
                .fail(format_args!("{what}: unexpected error: {err:?}")),
            (Under::Sentinel(deployment), Err(err)) => {
                deployment.fail(format_args!("{what}: unexpected error: {err:?}"))
            }
        }
    }
}

/// SIGKILL to `node`, then waits until it is a zombie: its sockets are closed
/// by then, so the next call finds it gone. By pid rather than with
/// [`RedisServer::stop`], which needs the server by `&mut`: the cluster
/// harness hands out its nodes by `&` only.
fn kill(node: &RedisServer) {
    let pid = node.pid();
    // SAFETY: `pid` is an unreaped child of this process, so it cannot have
    // been reused.
    if unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) } == -1 {
        node.fail(format_args!(
            "cannot kill redis-server: {}",
            std::io::Error::last_os_error()
        ));
    }
    let deadline = std::time::Instant::now() + EXIT_TIMEOUT;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if state == Some('Z') {
            return;
        }
        if std::time::Instant::now() > deadline {
            node.fail(format_args!(
                "redis-server did not exit within {EXIT_TIMEOUT:?} (state {state:?})"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
