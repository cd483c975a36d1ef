//! The runtime's connections dialled into the simulated server over
//! in-memory streams (`RedisConfig::dial`), on tokio's paused clock: no
//! socket, no machine time. What is asserted about time is simulated time,
//! the same on every run.

use std::pin::pin;
use std::time::Duration;

use futures_util::poll;
use lockmacro_runtime::backend::{Dial, DialedStream, Dialing};
use lockmacro_runtime::{Locker, ObtainOptions, RedisBackend, RedisConfig, RetryStrategy, Scripts};
use lockmacro_sim::{Server, TokioClock};
use tokio::time::Instant;

/// Every dial is a new in-memory connection served by `server`.
struct InMemory(Server);

impl Dial for InMemory {
    fn dial(&self, _address: &str) -> Dialing {
        let server = self.0.clone();
        Box::pin(async move {
            let (client, end) = tokio::io::duplex(64 * 1024);
            tokio::spawn(async move { server.serve(end).await });
            Ok(Box::new(client) as Box<dyn DialedStream>)
        })
    }
}

async fn locker(server: &Server, scripts: Scripts) -> Locker {
    let config = RedisConfig::default()
        .scripts(scripts)
        .dial(InMemory(server.clone()));
    // The host does not resolve: every connection goes through the dial.
    Locker::new(
        RedisBackend::connect_with("redis://simulated.invalid:6379/", config)
            .await
            .expect("connect through the dial"),
    )
}

/// A holder that never releases; its lease ends on the server at the ttl,
/// in simulated time, and the waiter (told by the busy reply when the lease
/// ends) has the key just after it: 5.001 s on every run.
#[tokio::test(start_paused = true)]
async fn a_lease_ends_at_its_ttl_in_simulated_time() {
    for scripts in [Scripts::Auto, Scripts::Never] {
        let server = Server::new(TokioClock::starting_at(1_700_000_000_000));
        let (a, b) = (
            locker(&server, scripts).await,
            locker(&server, scripts).await,
        );
        let start = Instant::now();
        let held = a
            .obtain("job", Duration::from_secs(5), ObtainOptions::new())
            .await
            .expect("obtain");
        let polling = ObtainOptions::new()
            .retry(RetryStrategy::linear(Duration::from_secs(1)).deadline(Duration::from_secs(60)));
        let lock = b
            .obtain("job", Duration::from_secs(5), polling)
            .await
            .expect("obtain after the ttl");
        let waited = start.elapsed();
        assert!(
            waited > Duration::from_secs(5) && waited <= Duration::from_secs(6),
            "{scripts:?}: obtained after {waited:?} of simulated time"
        );
        drop((held, lock));
    }
}

/// A waiter woken by the release at once, in simulated time: its own
/// retry is a minute away.
#[tokio::test(start_paused = true)]
async fn a_release_wakes_the_waiter_with_no_simulated_time_passing() {
    let server = Server::new(TokioClock::starting_at(1_700_000_000_000));
    let (a, b) = (
        locker(&server, Scripts::Auto).await,
        locker(&server, Scripts::Auto).await,
    );
    let held = a
        .obtain("job", Duration::from_secs(30), ObtainOptions::new().fair())
        .await
        .expect("obtain");
    let patient = ObtainOptions::new()
        .fair()
        .retry(RetryStrategy::linear(Duration::from_secs(60)).deadline(Duration::from_secs(50)));
    let waiter =
        tokio::spawn(async move { b.obtain("job", Duration::from_secs(30), patient).await });
    tokio::time::timeout(Duration::from_secs(10), server.until_subscriptions(1))
        .await
        .expect("the waiter listens");
    let released = Instant::now();
    held.release().await.expect("release");
    let lock = waiter.await.expect("task").expect("the waiter obtains");
    assert!(
        released.elapsed() < Duration::from_secs(1),
        "woken after {:?}",
        released.elapsed()
    );
    lock.release().await.expect("release");
}

/// Two refreshes of one lease in flight at once, a longer one and a
/// shorter one, run by the server in that order (the key then expires at
/// the shorter ttl), and their replies read in the other order: the longer
/// one's confirmation must not set the deadline past the shorter one's
/// expiry. On tokio's paused clock both are sent at the same instant, as
/// two tasks can send them within one tick of a coarse clock, and the
/// order in which the replies are read is chosen by the test, as a
/// scheduler may choose it.
#[tokio::test(start_paused = true)]
async fn a_longer_refresh_read_after_a_shorter_one_beside_it_keeps_the_shorter_deadline() {
    let server = Server::new(TokioClock::starting_at(1_700_000_000_000));
    let locker = locker(&server, Scripts::Auto).await;
    let long = Duration::from_secs(30);
    let short = Duration::from_millis(200);
    let lock = locker
        .obtain("job", long, ObtainOptions::new())
        .await
        .expect("obtain");
    let sent = Instant::now();
    let mut longer = pin!(lock.refresh(long));
    let mut shorter = pin!(lock.refresh(short));
    assert!(
        poll!(longer.as_mut()).is_pending(),
        "the longer refresh is sent"
    );
    assert!(
        poll!(shorter.as_mut()).is_pending(),
        "the shorter refresh is sent"
    );
    shorter.await.expect("the shorter refresh, read first");
    longer.await.expect("the longer refresh, read second");
    assert_eq!(Instant::now(), sent, "no simulated time passed");
    let pttl = format!("{:?}", server.call(&["PTTL", "job"]));
    assert!(
        lock.deadline() <= sent + short,
        "the deadline is {:?} away while the server expires the key in {pttl}",
        lock.deadline() - sent
    );
}
