//! A PostgreSQL primary killed (SIGKILL) and its streaming replica promoted,
//! with the lockers' connections moved to it by a proxy, as a virtual IP or
//! a DNS name follows a failover. Replication is asynchronous, as it is
//! unless `synchronous_standby_names` names the replica: what the replica
//! had received before the kill is kept, the rest is gone.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use lockmacro_runtime::{
    BackendErrorKind, LockError, Locker, ObtainOptions, PostgresBackend, PostgresConfig,
};
use lockmacro_testkit::Fixture;
use lockmacro_testkit::pgdb::PostgresDb;
use lockmacro_testkit::pgreplica::REPLICA_NAME;
use lockmacro_testkit::postgres::{PASSWORD, PostgresServer};
use lockmacro_testkit::proxy::Proxy;

/// The hang limit of every wait below.
const HANG: Duration = Duration::from_secs(30);

/// A primary (the fixture's server), its replica, and the proxy the
/// lockers reach the primary through.
struct Pair {
    fx: Fixture,
    replica: Arc<PostgresServer>,
    front: Proxy,
    /// Between the replica and the primary, when the test cuts replication.
    wal: Option<Proxy>,
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

impl Pair {
    /// `through_proxy`: the replica streams through a proxy that
    /// [`cut_replication`](Self::cut_replication) can black-hole.
    async fn start(through_proxy: bool) -> Pair {
        let fx = Fixture::own_postgres().await;
        let primary = local(
            fx.postgres_db()
                .expect("a PostgreSQL fixture")
                .server()
                .port(),
        );
        let wal = through_proxy.then(|| Proxy::start(primary));
        let upstream = wal.as_ref().map_or(primary, Proxy::addr);
        let replica = tokio::task::block_in_place(|| {
            fx.postgres_db().unwrap().server().start_replica(upstream)
        });
        Pair {
            front: Proxy::start(primary),
            replica: Arc::new(replica),
            wal,
            fx,
        }
    }

    fn db(&self) -> &PostgresDb {
        self.fx.postgres_db().unwrap()
    }

    /// A locker of its own that reaches the database through the proxy.
    async fn locker(&self) -> Locker {
        let url = format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{}/{}",
            self.front.addr().port(),
            self.db().name()
        );
        let config = PostgresConfig::default()
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_secs(2));
        Locker::new(
            self.fx
                .check(PostgresBackend::connect_with(&url, config).await, "connect"),
        )
    }

    /// Returns once the replica has replayed everything the primary wrote.
    async fn replicated(&self) {
        let lsn = self.db().server().written_lsn().await;
        let caught_up = tokio::time::timeout(HANG, async {
            while !self.replica.has_wal_up_to(&lsn).await.1 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        if caught_up.is_err() {
            self.replica
                .fail(format_args!("did not replay up to {lsn}"));
        }
    }

    /// Makes the replica synchronous: a commit on the primary returns once
    /// the replica has written it.
    async fn synchronous(&self) {
        let server = self.db().server();
        server
            .execute(
                "postgres",
                &format!("ALTER SYSTEM SET synchronous_standby_names = '{REPLICA_NAME}'"),
            )
            .await;
        server.execute("postgres", "SELECT pg_reload_conf()").await;
        let sync = "SELECT sync_state::text FROM pg_stat_replication WHERE sync_state = 'sync'";
        let in_effect = tokio::time::timeout(HANG, async {
            while self.db().column(sync).await.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        if in_effect.is_err() {
            server.fail("the replica did not become synchronous");
        }
    }

    /// Holds back, from now on, whatever the primary sends the replica.
    fn cut_replication(&self) {
        self.wal
            .as_ref()
            .expect("started with replication through a proxy")
            .black_hole();
    }

    /// Kills the primary, promotes the replica and moves the proxy to it.
    async fn fail_over(&mut self) {
        self.db().server().kill();
        // Closed with what it held back: the replica never gets it.
        self.wal = None;
        self.replica.promote().await;
        self.front.retarget(local(self.replica.port()));
    }

    /// The test's database on the promoted replica.
    fn on_replica(&self) -> PostgresDb {
        PostgresDb::existing(self.replica.clone(), self.db().name())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_the_replica_had_is_kept_after_the_failover_and_fence_tokens_go_on_from_it() {
    let mut pair = Pair::start(false).await;
    let (holder, contender) = (pair.locker().await, pair.locker().await);
    for _ in 0..2 {
        let lock = holder
            .obtain("job", Duration::from_secs(5), ObtainOptions::new().fence())
            .await;
        pair.fx
            .check(pair.fx.check(lock, "obtain").release().await, "release");
    }
    let guard = pair
        .fx
        .check(
            holder
                .obtain("job", Duration::from_secs(10), ObtainOptions::new().fence())
                .await,
            "obtain",
        )
        .keep_alive_every(Duration::from_millis(300))
        .unwrap();
    let held = guard.fence_token().unwrap();
    pair.replicated().await;
    pair.fail_over().await;

    let replica = pair.on_replica();
    let before = replica
        .lease_left("job")
        .await
        .expect("the promoted replica does not have the lease");
    // The watchdog reconnects through the proxy and refreshes there.
    let refreshed = tokio::time::timeout(HANG, async {
        while replica
            .lease_left("job")
            .await
            .is_none_or(|left| left <= before)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(refreshed.is_ok(), "no refresh landed on the new primary");
    assert!(!guard.is_lost(), "the holder lost a lease the replica had");
    let refused = contender
        .obtain("job", Duration::from_secs(1), ObtainOptions::new())
        .await;
    assert!(
        refused.is_err_and(|err| err.is_not_obtained()),
        "the key was free on the new primary while its holder kept it"
    );
    pair.fx
        .check(guard.release().await, "release on the new primary");
    let lock = pair.fx.check(
        contender
            .obtain("job", Duration::from_secs(5), ObtainOptions::new().fence())
            .await,
        "obtain after the release",
    );
    let next = lock.fence_token().unwrap();
    assert!(
        next > held,
        "token {next} after the failover, {held} before"
    );
    pair.fx.check(lock.release().await, "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_the_replica_never_received_is_lost_at_the_next_refresh_and_its_token_is_handed_out_again()
 {
    let mut pair = Pair::start(true).await;
    let (holder, contender) = (pair.locker().await, pair.locker().await);
    let lock = holder
        .obtain("job", Duration::from_secs(5), ObtainOptions::new().fence())
        .await;
    let first = pair.fx.check(lock, "obtain");
    let replicated_token = first.fence_token().unwrap();
    pair.fx.check(first.release().await, "release");
    pair.replicated().await;

    pair.cut_replication();
    // Committed on the primary alone: nothing waits for the replica. A
    // sequence is written to the WAL 32 values ahead of what it hands out,
    // so the replica's copy is behind only once the primary has minted
    // more than that since the cut.
    for _ in 0..40 {
        let other = holder
            .obtain(
                "other",
                Duration::from_secs(5),
                ObtainOptions::new().fence(),
            )
            .await;
        let other = pair
            .fx
            .check(other, "obtain another key with replication cut");
        pair.fx.check(other.release().await, "release");
    }
    let guard = pair
        .fx
        .check(
            holder
                .obtain("job", Duration::from_secs(60), ObtainOptions::new().fence())
                .await,
            "obtain with replication cut",
        )
        .keep_alive_every(Duration::from_millis(200))
        .unwrap();
    let held = guard.fence_token().unwrap();
    assert!(
        held > replicated_token + 40,
        "token {held} after {replicated_token}"
    );
    let lsn = pair.db().server().written_lsn().await;
    assert!(
        !pair.replica.has_wal_up_to(&lsn).await.0,
        "the replica received the lease through the cut"
    );
    pair.fail_over().await;

    // The lease's 60 s are far from over: only a refresh refused by the new
    // primary, which never had the row, can end it within the hang limit.
    let lost = tokio::time::timeout(HANG, guard.lost()).await;
    assert!(lost.is_ok(), "the holder was not told its lease was gone");
    assert!(
        !pair.on_replica().is_held("job").await,
        "the promoted replica holds the key"
    );
    let lock = pair.fx.check(
        contender
            .obtain("job", Duration::from_secs(5), ObtainOptions::new().fence())
            .await,
        "the contender on the new primary",
    );
    // The sequence's last steps went with the lease: the token the lost
    // holder had, or one below it, is minted again, for another holder.
    let again = lock.fence_token().unwrap();
    assert!(
        again <= held,
        "token {again} on the new primary, {held} held on the old one"
    );
    pair.fx.check(lock.release().await, "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_synchronous_replica_an_obtain_it_never_confirmed_fails_and_no_token_repeats() {
    let mut pair = Pair::start(true).await;
    pair.synchronous().await;
    let (holder, contender) = (pair.locker().await, pair.locker().await);
    let lock = holder
        .obtain("job", Duration::from_secs(5), ObtainOptions::new().fence())
        .await;
    let first = pair.fx.check(lock, "obtain with the replica in sync");
    let given = first.fence_token().unwrap();
    pair.fx.check(first.release().await, "release");

    pair.cut_replication();
    // Its commit waits for the replica: the obtain fails at its response
    // timeout, and its caller never holds a token.
    let cut_off = tokio::time::timeout(
        HANG,
        holder.obtain("job", Duration::from_secs(60), ObtainOptions::new().fence()),
    )
    .await
    .expect("the obtain hung");
    match cut_off {
        Err(LockError::Backend(err)) => assert_eq!(err.kind(), BackendErrorKind::Timeout, "{err}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    pair.fail_over().await;

    let lock = pair.fx.check(
        contender
            .obtain("job", Duration::from_secs(5), ObtainOptions::new().fence())
            .await,
        "the contender on the new primary",
    );
    let next = lock.fence_token().unwrap();
    assert!(
        next > given,
        "token {next} after the failover, {given} before"
    );
    pair.fx.check(lock.release().await, "release");
}
