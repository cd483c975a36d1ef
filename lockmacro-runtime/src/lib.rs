//! Distributed locks for async Rust, on Redis, as one attribute.
//!
//! ```no_run
//! use lockmacro_runtime::{distributed_lock, LockError};
//! # struct User { id: u64 }
//! # struct Receipt;
//! # #[derive(Debug)] enum BillingError { Lock(LockError) }
//! # impl From<LockError> for BillingError { fn from(e: LockError) -> Self { BillingError::Lock(e) } }
//!
//! #[distributed_lock(key = "user:{u.id}", ttl = "30s")]
//! async fn bill(u: &User) -> Result<Receipt, BillingError> {
//!     // Runs on at most one instance at a time for this user. The lease is
//!     // refreshed while this runs and released when it returns, panics or is
//!     // cancelled.
//!     # Ok(Receipt)
//! }
//! ```
//!
//! # Guide
//!
//! ## Connect once, at start-up
//!
//! A [`Locker`] takes locks on one backend. Make one at start-up and either
//! install it as the global locker, which `#[distributed_lock]` uses by
//! default, or keep it in your application state and name it with
//! `locker = …`:
//!
//! ```no_run
//! # async fn start() -> Result<(), lockmacro_runtime::LockError> {
//! use lockmacro_runtime::{set_global, Locker};
//!
//! let locker = Locker::connect("redis://127.0.0.1:6379/").await?.with_namespace("billing");
//! set_global(locker);
//! # Ok(()) }
//! ```
//!
//! [`Locker::memory`] gives an in-process backend with the same semantics,
//! for single-process programs and for your own unit tests:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
//! use std::time::Duration;
//! use lockmacro_runtime::{Locker, ObtainOptions};
//!
//! let locker = Locker::memory();
//! let lock = locker.obtain("nightly-report", Duration::from_secs(60), ObtainOptions::default()).await?;
//! let second = locker.obtain("nightly-report", Duration::from_secs(60), ObtainOptions::default()).await;
//! assert!(second.unwrap_err().is_not_obtained());
//! lock.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## The attribute
//!
//! [`macro@distributed_lock`] wraps an `async fn` so that its body runs only
//! while the lock is held: the key is rendered from the arguments, the lock
//! is taken (waiting up to `wait`), the watchdog keeps the lease alive while
//! the body runs, and the lock is released when the body returns, fails,
//! panics or is cancelled. What the function returns when the lock cannot be
//! held depends on `on_busy` and the return type; see the attribute's own
//! documentation for every argument and outcome.
//!
//! ```
//! use lockmacro_runtime::{distributed_lock, LockError, Locker};
//!
//! struct Jobs {
//!     locker: Locker,
//! }
//!
//! impl Jobs {
//!     #[distributed_lock(key = "report:{day}", ttl = "5m", locker = self.locker, on_busy = "skip")]
//!     async fn nightly_report(&self, day: &str) -> Option<String> {
//!         Some(format!("report for {day}"))
//!     }
//!
//!     #[distributed_lock(key = "invoice:{id}", ttl = "30s", locker = self.locker, fence, guard = lock)]
//!     async fn write_invoice(&self, id: u64) -> Result<u64, LockError> {
//!         // `lock` is a `&LockGuard`: key, token, fence token, deadline, is_lost().
//!         Ok(lock.fence_token().expect("fencing was asked for"))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), LockError> {
//! let jobs = Jobs { locker: Locker::memory() };
//! assert_eq!(jobs.nightly_report("2026-11-22").await.as_deref(), Some("report for 2026-11-22"));
//! let first = jobs.write_invoice(9).await?;
//! assert_eq!(jobs.write_invoice(9).await?, first + 1);
//! # Ok(()) }
//! ```
//!
//! A nested call in the same task that locks a key the task already holds
//! re-enters it at once, like a reentrant mutex; other tasks still wait.
//!
//! ## Features
//!
//! | feature | what it adds | default |
//! |---|---|---|
//! | `tls-rustls` | `rediss://` URLs, and `https://` etcd members with `etcd` (rustls with *ring*, no OpenSSL); without it a `rediss://` or `https://` URL is refused with an error that names the feature | on |
//! | `cluster` | Redis Cluster: `Locker::cluster`, `ClusterBackend` | off |
//! | `sentinel` | Redis Sentinel: `Locker::sentinel`, `SentinelBackend` | off |
//! | `metrics` | counters, histograms and a gauge through the `metrics` facade (see [Metrics](#metrics)) | off |
//! | `etcd` | an etcd backend: `Locker::etcd`, `EtcdBackend`, `EtcdConfig` with etcd users and, with `tls-rustls`, TLS roots and client certificates (its build needs `protoc`) | off |
//! | `postgres` | a PostgreSQL backend on sqlx: `Locker::postgres`, `Locker::postgres_pool`, `PostgresBackend` | off |
//! | `tower` | `LockLayer`: a lock per request in a tower stack (axum, tonic; see [A lock per request](#a-lock-per-request)) | off |
//!
//! ## Backends
//!
//! - [`Locker::connect`]: one Redis server ([`RedisBackend`]).
//! - `Locker::sentinel`: the master of a Redis Sentinel deployment
//!   (`SentinelBackend`), with the `sentinel` feature, followed through
//!   failovers; see its documentation for what a failover can lose and how
//!   to narrow it.
//! - `Locker::cluster`: Redis Cluster (`ClusterBackend`), with the `cluster`
//!   feature. Keys locked
//!   together, and a lock with its fence counter, must share a hash slot; the
//!   locker refuses other combinations before sending anything and says which
//!   `{tag}` to add.
//! - [`Locker::redlock`]: several independent masters granting by majority
//!   ([`RedlockBackend`]), for locks that must survive the loss of a
//!   minority of servers.
//! - `Locker::etcd`: an etcd cluster (`EtcdBackend`), with the `etcd`
//!   feature: keys attached to etcd leases, fencing tokens from etcd's
//!   revisions, which never go backwards, through leader elections too. For
//!   resources where a stale holder acting must be impossible: see "Fencing
//!   tokens" below. Leases are whole seconds on etcd (a shorter ttl is
//!   rounded up on the server, and still trusted locally only for the ttl
//!   asked for). Semaphores and read-write locks too, fair permits among
//!   them. Its build needs `protoc`. Production members: `https://` URLs
//!   with `EtcdConfig::tls_root_certificate` and
//!   `EtcdConfig::tls_client_certificate` (or their `_file` forms), and etcd
//!   users, in the URL (`http://user:password@host:port`) or with
//!   `EtcdConfig::user`; an expired token is replaced by a new one without
//!   the caller seeing it.
//! - `Locker::postgres(url)` and `Locker::postgres_pool(pool)` (the
//!   service's own sqlx `PgPool`): a PostgreSQL database
//!   (`PostgresBackend`), with the `postgres` feature. A lock is a row whose
//!   expiry the server sets from its own clock, so a restart keeps it and
//!   nothing depends on holding a session: it works through PgBouncer in
//!   transaction mode. Fencing tokens come from one sequence for every
//!   key, advanced with the lock, and never go backwards on one server; a
//!   lock can also be taken inside your own transaction (see "Locks inside
//!   a PostgreSQL transaction" below). A failover to a streaming replica
//!   keeps what the replica had received: a lease taken just before it may
//!   be gone (its holder is told at its next refresh) and its token handed
//!   out again, unless the replica is synchronous
//!   (`synchronous_standby_names`); see `PostgresBackend`. Waiters are woken by
//!   `LISTEN`/`NOTIFY`; fair waiters are served in arrival order.
//!   Semaphores (fair permits among them) and read-write locks too, each
//!   share a row with its own lease and a token from the same sequence,
//!   and `Locker::inspect` and `Locker::force_release`. The backend creates
//!   its tables when they are missing, and brings those of an earlier
//!   version up to date; a user who may not create tables runs the migration
//!   `lockmacro-runtime/migrations/postgres/0001_lockmacro.sql` (also
//!   `POSTGRES_MIGRATION`) first, as the error says.
//! - [`Locker::memory`]: in-process ([`MemoryBackend`]).
//! - [`Locker::new`]: any [`Backend`](backend::Backend) of your own.
//!
//! ```toml
//! lockmacro-runtime = { version = "0.1", features = ["etcd"] }
//! ```
//!
//! ## Your own connection
//!
//! A service that already talks to Redis can hand its connection to the
//! locker instead of letting it open its own:
//! [`RedisBackend::from_client`] (a `redis::Client`),
//! [`Locker::from_manager`] and [`RedisBackend::from_manager`] (a
//! `ConnectionManager`, whose multiplexed connection then carries the lock
//! calls too),
//! [`ClusterBackend::from_client`] and [`ClusterBackend::from_connection`]
//! (a `ClusterClient` and its connection). Two things still get connections
//! of their own, opened from the client only when first needed: waiters'
//! pub/sub (a subscribing connection delivers messages as pushes to whoever
//! made it, and under RESP2 can run nothing else), and acquires that wait for
//! replicas (`WAIT` blocks the connection it is sent on). On a shared
//! connection, each lock call is bounded by that connection's response
//! timeout (500 ms for `ConnectionManager::new`), not by
//! [`RedisConfig::response_timeout`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use lockmacro_runtime::Locker;
//!
//! let client = redis::Client::open("redis://127.0.0.1:6379/")?;
//! let manager = redis::aio::ConnectionManager::new(client.clone()).await?;
//! // The service goes on using `manager`; the locks ride on it too.
//! let locker = Locker::from_manager(manager.clone(), client).await;
//! # let _ = locker; Ok(()) }
//! ```
//!
//! ## Locks by hand
//!
//! [`Locker::obtain`] returns a [`Lock`]: a lease of `ttl` on the key, owned
//! through a random 128-bit token. [`Lock::refresh`] extends it,
//! [`Lock::release`] gives it back; both fail with [`LockError::NotHeld`],
//! changing nothing, once the lock is no longer ours. [`Lock::keep_alive`]
//! hands it to the locker's watchdog, which refreshes it until it is released
//! and tells you when it is lost ([`LockGuard::lost`]). One watchdog task per
//! locker serves all its leases: the refreshes that fall due together are
//! sent together ([`Backend::refresh_many`](backend::Backend::refresh_many): one script call per 500 leases
//! on one Redis server), so a locker can keep 100,000 leases alive.
//!
//! [`ObtainOptions`] choose how to wait ([`RetryStrategy`]: none, linear,
//! exponential with full jitter; an attempt cap; a deadline), what metadata
//! to store with the lock, and whether to mint a fencing token.
//! [`Locker::obtain_many`] takes several keys all or nothing.
//!
//! **`wait` or a retry strategy.** The attribute's `wait = "10s"`
//! ([`HoldOptions::wait`]) and a [`RetryStrategy`] with a deadline
//! ([`ObtainOptions::retry`], [`HoldOptions::retry`]) both give up after
//! their deadline, and both are woken early by a release the backend can
//! hear (Redis pub/sub, etcd watches, the memory backend). They differ in
//! what a waiter does meanwhile. Under `wait`, a waiter the backend can wake
//! sends nothing until it is woken or the holder's lease runs out: one
//! attempt when the key is freed, whatever the number of waiters. Under a
//! retry strategy, a waiter also tries again at each of the strategy's
//! pauses, woken or not, and gives up after its attempt cap if it has one:
//! choose it to bound the attempts, or to keep trying on a schedule you
//! set. Where the backend cannot wake waiters (a Redis user without
//! `+subscribe`), `wait` falls back to an exponential backoff of 2 ms to
//! 200 ms.
//!
//! [`ObtainOptions::replicas`] makes an obtain on a server with replicas
//! (a cluster, or one server with replicas) return only once that many
//! replicas have the lock, and fail with [`LockError::NotReplicated`], the
//! lock given back, when they do not acknowledge it in time; it narrows, but
//! does not close, the window in which a failover loses a lock.
//!
//! ## When the service stops
//!
//! A lock dropped without `release` is given back by a task spawned on the
//! runtime; a runtime that ends right after (a `Lock`, a guard or a
//! [`Leadership`] dropped as `main` returns) never runs it, and the key stays
//! held until its ttl runs out: in a rolling deploy, each restarted instance
//! makes the next leader or job wait that long. Call [`Locker::shutdown`]
//! last: it gives back every lease held through the locker and its clones
//! (locks, guards, permits, shares, leaderships, the places of fair waiters),
//! stops the watchdog, waits (ten seconds at most, or
//! [`Locker::shutdown_within`]) for the releases that drops left running,
//! and refuses later obtains with [`LockError::ShutDown`]. Holders see their
//! lease end: [`LockGuard::lost`] completes, bodies under the attribute are
//! dropped and return `ShutDown`. In a service, after the server's own
//! graceful shutdown (axum's `with_graceful_shutdown`; see
//! `examples/axum.rs`):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! # let locker = lockmacro_runtime::Locker::memory();
//! # let serving = async {};
//! // axum::serve(listener, router).with_graceful_shutdown(ctrl_c())
//! serving.await;
//! let report = locker.shutdown().await;
//! if !report.is_complete() {
//!     eprintln!("{} lock(s) left to expire with their ttl", report.left_to_expire);
//! }
//! # }
//! ```
//!
//! Tasks that work under a lease can stop when it ends, whoever holds the
//! guard: [`LockGuard::cancellation_token`] is cancelled when the lease is
//! lost, given back, or taken by the shutdown.
//!
//! ## Fair hand-off
//!
//!
//! By default, waiters race: a release wakes them, and whoever's retry
//! arrives first takes the key, often the releasing process itself. With
//! [`ObtainOptions::fair`] (the attribute's `fair = true`), a waiter that
//! finds the key held joins a queue kept next to the key (`{K}:queue`, in the
//! lock's cluster slot), once however often it retries. A release hands the
//! key to the first waiter still queued in the same script that deletes it:
//! it sets the key to that waiter's value for a short grant lease (a second
//! by default, [`RedisConfig::grant_lease`]), mints its fencing token, and
//! tells it so on the release channel. Nobody else can take the key then.
//! The waiter knows the key was handed over after its last attempt was sent,
//! so it goes on at once, its lease counted from that attempt for the grant
//! lease, and confirms in the background, which extends the key to its ttl
//! and moves the lease's deadline. A waiter sends nothing while it waits in
//! line.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
//! use std::time::Duration;
//! use lockmacro_runtime::{Locker, ObtainOptions, RetryStrategy};
//!
//! let locker = Locker::memory();
//! let ttl = Duration::from_secs(30);
//! let held = locker.obtain("printer", ttl, ObtainOptions::new()).await?;
//! let wait = RetryStrategy::linear(Duration::from_secs(1)).deadline(Duration::from_secs(10));
//! let waiter = tokio::spawn({
//!     let locker = locker.clone();
//!     async move { locker.obtain("printer", ttl, ObtainOptions::new().fair().retry(wait)).await }
//! });
//! # tokio::task::yield_now().await;
//! held.release().await?; // hands "printer" to the waiter
//! waiter.await.unwrap()?.release().await?;
//! # Ok(()) }
//! ```
//!
//! - **Who is served.** Waiters in the order their first attempt reached the
//!   server. Ordinary (non-fair) obtains do not join the queue, but they
//!   cannot overtake it either: while someone is queued, every release hands
//!   the key on rather than freeing it. The one gap is a holder whose lease
//!   runs out without a release: the key is then free until the first waiter
//!   (woken by the end of that lease) takes it, and an ordinary obtain that
//!   arrives first gets it.
//! - **Leaving the queue.** A fair obtain needs a retry
//!   [deadline](RetryStrategy::deadline): the waiter's entry lapses then,
//!   and releases skip lapsed entries. A waiter that gives up, fails, or whose
//!   future is dropped also removes its entry at once. A waiting process
//!   that dies without doing so (killed, crashed, cut off) costs the queue
//!   nothing if its entry lapses before its turn, and its grant lease if the
//!   key is handed to it first: it never confirms, and the waiters behind it,
//!   which heard the hand-off on the channel they listen to, try again when
//!   the lease is over and no confirmation came. That attempt hands the key
//!   to the next in line (or takes it), so each dead waiter delays the live
//!   one behind it by one grant lease (`faults::dead_waiter`). The key is held
//!   by the grantee until the lease ends, so the retry cannot let anyone in
//!   early, and every waiter has a timer on that end, so none sleeps past it.
//!   A waiter that cannot confirm within its grant lease (paused longer than
//!   that) loses its turn and queues again. A dead waiter costs each waiter
//!   queued behind it one attempt; a live one costs them nothing but the two
//!   messages they hear.
//! - **The lease of a handed-over lock** is counted from when the confirming
//!   attempt was *sent* (minus the backend's drift), as for any attempt.
//! - **Backends.** [`RedisBackend`], [`ClusterBackend`] and [`MemoryBackend`]
//!   wake the waiter with the hand-off (on a cluster, through the one seed
//!   node its locker subscribes on). [`RedlockBackend`] cannot keep one queue across
//!   independent masters and refuses fair obtains. On etcd (the `etcd`
//!   feature), waiters queue under `<key>/queue/<token>` in the order of
//!   their entries' create revisions; the release only deletes the key, and
//!   the first waiter, woken by its watch, takes it with one more round
//!   trip. On PostgreSQL (the `postgres` feature) the same: waiters queue in
//!   the table `lockmacro_queue` in arrival order, a release notifies them,
//!   and the first in line takes the key. A waiter's entry lapses at the end
//!   of its wait: one whose process dies while first in line keeps the key
//!   from everyone (ordinary obtains too) until then, so keep fair waits
//!   short there. A fair obtain takes one key.
//!
//! ## Semaphores
//!
//! [`ObtainOptions::permits`] (the attribute's `permits = 5`) takes one of
//! that many permits on the key instead of the whole key: at most that many
//! holders at once, across every process. A permit is a [`Lock`] like any
//! other: its own token and lease, renewed by [`Lock::keep_alive`], lost on
//! its local deadline, released by [`Lock::release`] or when dropped. A
//! holder that dies gives its permit back after its ttl, never sooner.
//! Waiters are woken by a release, and [`ObtainOptions::fence`] mints a token
//! per permit, increasing per key.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
//! use std::time::Duration;
//! use lockmacro_runtime::{Locker, ObtainOptions};
//!
//! let locker = Locker::memory();
//! let ttl = Duration::from_secs(30);
//! let first = locker.obtain("exports", ttl, ObtainOptions::new().permits(2)).await?;
//! let second = locker.obtain("exports", ttl, ObtainOptions::new().permits(2)).await?;
//! let third = locker.obtain("exports", ttl, ObtainOptions::new().permits(2)).await;
//! assert!(third.unwrap_err().is_not_obtained());
//! first.release().await?;
//! locker.obtain("exports", ttl, ObtainOptions::new().permits(2)).await?.release().await?;
//! # second.release().await?; Ok(()) }
//! ```
//!
//! On Redis a semaphore is a sorted set of the holders' tokens, each scored
//! with when its permit expires; expired permits are dropped before the
//! holders are counted. On etcd each permit is a key of its own under the
//! lock key's `/shares/` prefix, attached to its holder's lease, and an
//! attempt counts them and takes its own in one transaction; its fencing
//! token is the revision it was taken at, as for a lock. On PostgreSQL each
//! permit is a row of `lockmacro_shares` whose expiry the server sets from
//! its own clock, taken in one statement that counts the live ones; its
//! fencing token comes from the key's counter, as for a lock. One server, a
//! cluster, Sentinel, etcd, PostgreSQL and memory keep permits; Redlock
//! refuses them, as it refuses `fair` and `replicas`, before anything is
//! sent.
//!
//! ## Read-write locks
//!
//! [`ObtainOptions::read`] and [`ObtainOptions::write`] (the attribute's
//! `mode = "read"` / `"write"`) share a key among any number of readers, or
//! give it to one writer alone. A writer waiting for readers holds back the
//! readers that come after it (writer preference), so a stream of readers
//! cannot starve it. Each read is a lease of its own, as a permit is, on the
//! same backends. Inside [`Locker::hold`] (and the attribute), a task that
//! holds the write may read the same key, which re-enters; a task that holds
//! a read and asks for the write is refused with
//! [`LockError::UpgradeRefused`], as two readers upgrading would wait for
//! each other for ever. The write can go the other way, atomically:
//! [`Lock::downgrade`] turns it into a read, and the readers waiting behind
//! it enter while writers still wait.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
//! use std::time::Duration;
//! use lockmacro_runtime::{HoldOptions, Locker};
//!
//! let locker = Locker::memory();
//! let ttl = Duration::from_secs(30);
//! let rebuilt = locker
//!     .hold(["catalog"], HoldOptions::new(ttl).write(), |_| async {
//!         // Readers wait while the writer rebuilds; a read inside re-enters.
//!         locker.hold(["catalog"], HoldOptions::new(ttl).read(), |_| async { "rebuilt" }).await
//!     })
//!     .await??;
//! assert_eq!(rebuilt, "rebuilt");
//! # Ok(()) }
//! ```
//!
//! ## One kind per key
//!
//! While it is held, a key is one [`KeyKind`]: a lock, a semaphore of N
//! permits, or a read-write lock. The backend keeps the kind (and the
//! permit count) with the key and checks it in the same step as every
//! acquire: an obtain of another kind, or with another count than the
//! holders', is refused with [`LockError::WrongKind`] before anything is
//! written. Once the last holder is gone, the key is free for any kind.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
//! use std::time::Duration;
//! use lockmacro_runtime::{KeyKind, LockError, Locker, ObtainOptions};
//!
//! let locker = Locker::memory();
//! let ttl = Duration::from_secs(30);
//! let _held = locker.obtain("jobs", ttl, ObtainOptions::new().permits(2)).await?;
//! let err = locker.obtain("jobs", ttl, ObtainOptions::new().permits(5)).await.unwrap_err();
//! assert!(matches!(err, LockError::WrongKind { held: KeyKind::Semaphore { permits: 2 }, .. }));
//! # Ok(()) }
//! ```
//!
//! ## Seeing and clearing locks
//!
//! [`Locker::inspect`] tells an operator what holds a key: its kind, each
//! holder's metadata and remaining lease, the fair waiters in line and the
//! last fencing token. The metadata is what the holder gave
//! ([`ObtainOptions::metadata`], the attribute's `metadata = "…"`); the
//! attribute records the host name and process id when given none. On
//! Redis, a lock's holder shows its metadata; a permit's or a read's shows
//! none (shares keep only their token). On etcd, PostgreSQL and memory,
//! every holder shows its own.
//!
//! [`Locker::force_release`] clears a stuck key: every lease on it is
//! deleted and its waiters are woken. Each former holder learns it at its
//! next refresh, which is refused: a lease kept by the watchdog is then
//! lost (its [`LockGuard::lost`] completes, and the attribute's body is
//! aborted under `on_lost = "abort"`). Until then the holder may still be
//! running, so use it on holders that are stuck, not on live ones.
//!
//! A refusal says what the backend knows of the holder:
//! [`LockError::NotObtained`] carries its metadata and remaining lease, and
//! [`LockError::retry_after`] gives the latter for an HTTP `Retry-After`.
//!
//! ## Locks inside a PostgreSQL transaction
//!
//! With the `postgres` feature, `Locker::obtain_in` takes a key inside
//! your own `sqlx::Transaction`: the lock check and the writes it protects
//! commit (or roll back) together, and the lock ends with the transaction,
//! never before; `TransactionLock` has no `release`. A holder that stalls
//! (a pause, a lost process) past the ttl has its transaction ended by the
//! server, so its late writes can never commit: the database refuses them
//! itself, with no fence column to remember. It excludes the leases of
//! [`Locker::obtain`] on the same database and namespace (locks, permits
//! and read-write shares alike: each answers the other busy), and other
//! transactions; waiters are woken by the commit. A key held as permits or
//! read-write is busy for `obtain_in`, not [`LockError::WrongKind`], as an
//! error would abort your transaction. [`Locker::inspect`] shows such a
//! lock as held, with no metadata and no time left, and
//! [`Locker::force_release`] cannot end it. The transaction must be
//! `READ COMMITTED` (PostgreSQL's default). It works through PgBouncer in
//! transaction mode.
//!
//! ```no_run
//! # async fn demo(locker: lockmacro_runtime::Locker, pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use lockmacro_runtime::ObtainOptions;
//!
//! let mut tx = pool.begin().await?;
//! let lock = locker.obtain_in(&mut tx, "stock:42", Duration::from_secs(10), ObtainOptions::new().fence()).await?;
//! sqlx::query("UPDATE stock SET count = count - 1 WHERE id = 42").execute(&mut *tx).await?;
//! tx.commit().await?; // the write, and the end of the lock
//! # let _ = lock; Ok(()) }
//! ```
//!
//! The attribute does not take a transaction: its lock is held while the
//! function runs and released when it returns, while a transaction-scoped
//! lock lasts until the caller commits, after the function has returned.
//! Call `obtain_in` first thing in the function that receives the
//! transaction instead:
//!
//! ```no_run
//! # use lockmacro_runtime::{LockError, Locker, ObtainOptions};
//! # use std::time::Duration;
//! async fn reserve(locker: &Locker, tx: &mut sqlx::PgTransaction<'_>, item: u64) -> Result<(), LockError> {
//!     locker.obtain_in(tx, &format!("stock:{item}"), Duration::from_secs(10), ObtainOptions::new()).await?;
//!     // … writes through `&mut **tx`, committed by the caller with the lock …
//!     Ok(())
//! }
//! ```
//!
//! ## Fencing tokens
//!
//! A lease is not a mutex: a holder paused longer than its ttl (a GC pause, a
//! stopped VM, a slow disk) can wake up and act after another holder got the
//! lock. Fencing makes this safe where the protected resource can check a
//! number: with fencing on, every acquisition also increments a counter next
//! to the key and returns it ([`Lock::fence_token`]). Tokens strictly increase
//! per key, across releases, expiries and lockers. Pass the token with each
//! write and have the resource refuse a token older than the newest it has
//! applied (for SQL: `UPDATE … SET fence = $1 WHERE id = $2 AND fence < $1`).
//!
//! On Redis the counter is only as durable as Redis: a failover that loses
//! the last writes can hand out a token again. On etcd (the `etcd` feature)
//! the token is the revision at which the lock's keys were created, assigned
//! through Raft: it strictly increases across every key, and through leader
//! elections and member restarts (Kleppmann, "How to do distributed
//! locking", 2016; Jepsen, "etcd 3.4.3", 2020). On PostgreSQL (the
//! `postgres` feature) every token comes from one sequence, advanced in the
//! transaction that takes the lock: tokens strictly increase across every
//! key of the database and through restarts (a sequence may skip, never go
//! back).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
//! use std::time::Duration;
//! use lockmacro_runtime::{Locker, ObtainOptions};
//!
//! let locker = Locker::memory();
//! let ttl = Duration::from_secs(5);
//! let first = locker.obtain("invoice:9", ttl, ObtainOptions::new().fence()).await?;
//! let t1 = first.fence_token().unwrap();
//! first.release().await?;
//! let second = locker.obtain("invoice:9", ttl, ObtainOptions::new().fence()).await?;
//! assert!(second.fence_token().unwrap() > t1);
//! # Ok(()) }
//! ```
//!
//! The counter lives at `{K}:fence` for a lock key `K` (or `K:fence` when `K`
//! already has a `{hashtag}`), so that it lands in the same Redis Cluster
//! slot. One kind of key defeats this: a key with a `}` but no hashtag
//! (`a}b`, `{}x`), whose derived counter gets a tag of its own. A cluster
//! refuses such a fenced lock with [`LockError::InvalidKey`] naming both keys;
//! give the key a `{tag}` or name the counter with
//! [`ObtainOptions::fence_key`].
//!
//! The counter is a key of its own: a fence key that is one of the keys
//! locked, or that holds anything but a counter (another lock's key), and a
//! lock named after another key's counter (`{K}:fence`) are refused with
//! [`LockError::InvalidKey`], before anything is written, so a failed
//! acquire leaves no key behind.
//!
//! Counters expire a day after the last token minted from them
//! ([`DEFAULT_FENCE_EXPIRY`](backend::DEFAULT_FENCE_EXPIRY); [`RedisConfig::fence_expiry`],
//! [`MemoryBackend::fence_expiry`]), so that the counters of keys no longer
//! used do not pile up. A counter made again afterwards starts at the clock
//! (below), which has moved on by at least that day since the last token.
//!
//! Tokens are not small numbers: a counter that does not exist yet starts at
//! the server's clock (`TIME`) in microseconds, then counts up by one per
//! acquisition. That is what keeps tokens increasing when the counter is
//! lost, as it is when a Redis server without persistence restarts, or a
//! key is evicted: the new counter starts at the clock, above every token
//! minted before. This rests on two assumptions:
//!
//! - the server's clock does not step back across the loss (a restart on
//!   another machine whose clock is behind, a manual clock change);
//! - a key is, on average, not acquired more than once per microsecond
//!   between the counter's start and its loss. Each acquisition is a round
//!   trip to the server, so this holds in practice.
//!
//! An expiry needs neither: Redis expires keys by the same clock that seeds
//! the new counter, so the new seed is read at least the expiry after the
//! last token's acquisition, whose token was below the clock then.
//!
//! [`MemoryBackend`] seeds its counters from the system clock the same way.
//! Under [`RedlockBackend`] each master seeds its own counter from its own
//! clock, so the masters' clocks must also roughly agree. A server that
//! keeps its data (`appendonly yes`) never needs the clock.
//!
//! The check belongs to the resource, where it can be made in the same step
//! as the write. For a resource in Redis (or in this process), a
//! [`FencedStore`] does it: [`FencedStore::set`] writes a value only if its
//! token is not older than the newest token applied to that key, atomically
//! (a Lua script on Redis), and returns whether it did. A holder paused past
//! its ttl finds its write refused once a newer holder has written:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
//! use std::time::Duration;
//! use lockmacro_runtime::{FencedStore, Locker, ObtainOptions};
//!
//! let locker = Locker::memory();
//! let store = FencedStore::memory(); // or FencedStore::connect("redis://…").await?
//! let ttl = Duration::from_millis(50);
//! let old = locker.obtain("report", ttl, ObtainOptions::new().fence()).await?;
//! tokio::time::sleep(2 * ttl).await; // a pause: the lease expires unrefreshed
//! let new = locker.obtain("report", ttl, ObtainOptions::new().fence()).await?;
//! assert!(store.set("report", "new", new.fence_token().unwrap()).await?);
//! assert!(!store.set("report", "stale", old.fence_token().unwrap()).await?);
//! # Ok(()) }
//! ```
//!
//! `examples/fencing.rs` runs this story with the attribute, on both stores.
//!
//! ## A lock per request
//!
//! With the `tower` feature, `LockLayer` locks whole requests in an axum
//! router or a tonic server, rather than one handler: a closure computes the
//! key from the request (`None`: no lock), the layer's [`HoldOptions`] say
//! how it is taken, and the watchdog keeps the lease while the inner
//! service's future runs. The key is given back once the response is
//! produced, or when the client goes away and the future is dropped. By
//! default (`HttpResponses`) a busy key answers `409 Conflict` with
//! `Retry-After` (the holder's remaining lease, rounded up to whole
//! seconds), a lost lease or an unavailable lock store
//! `503 Service Unavailable`; `LockLayer::responses` takes a closure for
//! other answers, a gRPC `Status` among them.
//!
//! ```text
//! let app = Router::new()
//!     .route("/invoices/{id}/send", post(send_invoice))
//!     .layer(LockLayer::new(locker, HoldOptions::new(Duration::from_secs(30)), |request: &Request| {
//!         let id = request.uri().path().strip_prefix("/invoices/")?.strip_suffix("/send")?;
//!         Some(format!("invoice:{id}"))
//!     }));
//! ```
//!
//! ## Scheduled jobs
//!
//! Where every instance runs the same schedule, lock each fire, not the
//! job: a key per fire time (`"report:{fire_time}"`, the schedule's tick,
//! which every instance names alike), held at least for the fire interval
//! ([`HoldOptions::hold_at_least`], the attribute's `hold_at_least`). The
//! first instance to fire runs the job; the key outlives it, so an instance
//! whose clock is behind by less than the interval finds it held and skips
//! the fire rather than run it again. `examples/scheduled.rs` does this with
//! `tokio-cron-scheduler`.
//!
//! ## Leader election
//!
//! [`Locker::election`] makes a lock key a role that instances take turns
//! holding: one leader at a time, for as long as it keeps its lease, with
//! a new term each time the role changes hands. It is the mutex underneath:
//! the role is a lock key, a term is the fencing token minted when it is
//! taken, holding it is the watchdog's lease, and candidates wait for it
//! like any waiter, woken by the leader's release.
//!
//! - [`Election::campaign`] waits, with no deadline, until this instance
//!   holds the role, and returns a [`Leadership`]: [`term`](Leadership::term),
//!   [`deadline`](Leadership::deadline), [`is_lost`](Leadership::is_lost),
//!   [`lost`](Leadership::lost), [`resign`](Leadership::resign); dropped, it
//!   resigns in the background.
//! - [`Election::run`] is the leader loop: it runs a future while this
//!   instance leads (the future gets the [`Term`] it runs in) and drops it
//!   when the lease is lost. The future returns a `Result`: an `Err` (a
//!   store write that failed with `?`, a job that failed) ends the term, not
//!   the campaign: the error is logged with the role and the term, the role
//!   given back, and the instance campaigns again after a jittered backoff
//!   ([`Election::backoff`]). An `Ok` ends the campaign: `run` resigns and
//!   returns it. [`Election::run_until`] also stops when a future completes
//!   (a shutdown signal, a `CancellationToken`'s `cancelled()`): the common
//!   "lead until the service stops" is that one call.
//! - [`Election::leader`] says who leads now ([`LeaderInfo`]: term,
//!   metadata, remaining lease), and [`Election::observe`] streams every
//!   change of leader, woken by releases and reading again when the
//!   leader's lease would run out, so that a crashed leader is seen too.
//!
//! Terms strictly increase per role. A leader learns that it lost the role
//! on its own clock, before another can be elected (the lease's local
//! deadline comes before the key's expiry on the server); but it can be
//! paused between a check and a write like any lock holder, so the writes it
//! makes as leader carry the term, and the resource refuses older terms than
//! the newest it has seen:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
//! use std::time::Duration;
//! use lockmacro_runtime::{FencedStore, Locker};
//!
//! let locker = Locker::memory();
//! let store = FencedStore::memory();
//! let election = locker.election("scheduler", Duration::from_secs(10)).metadata("instance-1");
//! let job = election
//!     .run(|term| {
//!         let store = store.clone();
//!         async move {
//!             // Only while this instance leads; a later term's writes win.
//!             store.set("nightly", "done", term.number()).await?;
//!             Ok::<_, lockmacro_runtime::LockError>(term.number())
//!         }
//!     })
//!     .await?;
//! assert_eq!(store.get("nightly").await?.map(|applied| applied.token), Some(job));
//! # Ok(()) }
//! ```
//!
//! Followers send nothing while they wait, but for one attempt each time the
//! leader's lease would have run out without its refreshes (on backends that
//! cannot announce releases, Redlock among them, they retry after a backoff
//! of up to 200 ms). Backend failures during a campaign are logged and
//! retried; see [`Election`] for the details and [`Election::fair`] for
//! serving candidates in the order they came. `examples/scheduler.rs` kills
//! leaders and shows the next one take over within the ttl.
//!
//! ## On the wire
//!
//! With [`RedisBackend`], a lock is a plain string key (after the namespace
//! prefix, `billing:user:42`) whose value is the owner's 32-character token
//! followed by the metadata, with a `PX` expiry. It is taken with `SET … NX PX`
//! semantics, so other clients that use the same convention (redis-py's
//! `Lock`, bsm/redislock) exclude this library and are excluded by it.
//! Refresh and release are compare-then-act Lua scripts: they act only while
//! the value still starts with the token.
//!
//! On etcd, the lock key holds the same value, attached to a lease of its
//! own; see `EtcdBackend` for the layout. On PostgreSQL, it is a row of the
//! table `lockmacro_locks`; see `PostgresBackend`.
//!
//! ## TLS and Redis users
//!
//! `rediss://` URLs connect with TLS (rustls), trusting the system's roots or,
//! with [`RedisConfig::tls_root_certificate`], only the CA you give; a server
//! that checks clients gets the certificate given with
//! [`RedisConfig::tls_client_certificate`]. A Redis
//! user restricted by ACLs needs the scripts (`+evalsha +script|load`), the
//! commands they call, the lock and fence keys and, for wake-ups, the release
//! channels; "Permissions a Redis user needs" in the repository's `docs/security.md` has the exact
//! `ACL SETUSER` line. A missing permission fails with
//! [`BackendErrorKind::Permission`], naming what to grant; a failed handshake
//! with [`BackendErrorKind::Tls`].
//!
//! ## Errors
//!
//! Every failure is a [`LockError`]: the key is busy, the lock is no longer
//! held, the lease was lost, no locker is configured, bad input, or a backend
//! failure ([`BackendError`], with a [`BackendErrorKind`] that tells an
//! unreachable server from a timeout, refused credentials or a missing ACL
//! permission). Messages name the key, never the token.
//!
//! ## Logs
//!
//! Spans and events go to [`tracing`] under the target `lockmacro`: obtain
//! (span), busy, retry, refresh, release and lost, with the key as a field.
//!
//! ## Metrics
//!
//! With the `metrics` feature, the runtime records through the
//! [`metrics`](https://docs.rs/metrics) facade, so any exporter installed by
//! the application receives:
//!
//! | metric | kind | what |
//! |---|---|---|
//! | `lockmacro_obtained_total` | counter | locks obtained |
//! | `lockmacro_busy_total` | counter | obtains that gave up: held by someone else |
//! | `lockmacro_released_total` | counter | locks given back by their owner |
//! | `lockmacro_lost_total` | counter | leases lost (refused refresh, local deadline, `max_hold`) |
//! | `lockmacro_refresh_failures_total` | counter | watchdog refreshes that could not be sent or answered |
//! | `lockmacro_backend_errors_total` | counter | obtains, refreshes and releases that failed with a backend error; also labelled `op` (`obtain`, `refresh`, `release`) and `kind` ([`BackendErrorKind::as_str`]): what an outage shows as |
//! | `lockmacro_wait_seconds` | histogram | time an obtain took, obtained or busy |
//! | `lockmacro_hold_seconds` | histogram | time from taking a lock to its release, loss or drop |
//! | `lockmacro_leases_held` | gauge | leases held now: obtained, and not yet given back, lost or dropped |
//!
//! Each is recorded before the call that caused it returns: read right
//! after `obtain`, `release` or `lost().await`, the figures include it.
//! Each has a unit and a description (Prometheus's `# HELP`), given to the
//! recorder installed when a [`Locker`] is made: install the exporter first.
//!
//! Every metric has (at least) two labels: `backend` (`redis`, `sentinel`, `cluster`,
//! `redlock`, `etcd`, `memory`, or a custom backend's
//! [`Backend::name`](backend::Backend::name)) and `namespace` (the
//! locker's, empty without one). Both are fixed in code, never taken from
//! keys, so the number of series stays small. For Prometheus, with the
//! `metrics-exporter-prometheus` crate:
//!
//! ```text
//! metrics_exporter_prometheus::PrometheusBuilder::new()
//!     .with_http_listener(([0, 0, 0, 0], 9000))
//!     .install()
//!     .expect("the Prometheus exporter");
//! // then /metrics on port 9000 lists lockmacro_obtained_total{backend="redis",namespace="billing"} …
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]
#![forbid(unsafe_code)]

pub mod backend;
mod claim;
#[cfg(doctest)]
mod doc_examples;
mod downgrade;
mod election;
mod error;
mod fenced;
mod global;
mod guard;
mod hold;
mod inspect;
mod kind;
mod lease;
mod lock;
mod locker;
mod metrics;
mod options;
mod reentry;
mod registry;
mod retry;
mod rules;
mod shutdown;
#[cfg(feature = "tower")]
mod tower;
#[cfg(feature = "postgres")]
mod transaction;
mod wait;
mod watchdog;

#[doc(hidden)]
pub mod __private;
#[doc(hidden)]
pub mod missing_feature;

#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use crate::backend::ClusterBackend;
#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub use crate::backend::SentinelBackend;
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use crate::backend::{EtcdBackend, EtcdConfig};
pub use crate::backend::{
    HeldAs, Holder, Inspection, MemoryBackend, RedisBackend, RedisConfig, RedlockBackend,
};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use crate::backend::{POSTGRES_MIGRATION, PostgresBackend, PostgresConfig};
pub use crate::election::{Election, LeaderInfo, Leadership, Term};
pub use crate::error::{BackendError, BackendErrorKind, LockError};
pub use crate::fenced::{FencedStore, FencedValue};
pub use crate::global::{global, set_global};
pub use crate::guard::LockGuard;
pub use crate::hold::{HoldOptions, OnLost};
pub use crate::kind::KeyKind;
pub use crate::lease::MAX_TTL;
pub use crate::lock::Lock;
pub use crate::locker::Locker;
pub use crate::options::{Fencing, ObtainOptions};
pub use crate::registry::ShutdownReport;
pub use crate::retry::RetryStrategy;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use crate::tower::{HttpResponses, LockLayer, LockResponses, LockService};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use crate::transaction::TransactionLock;
#[doc(inline)]
pub use lockmacro::distributed_lock;
