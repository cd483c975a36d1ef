//! Two refreshes of one lease in flight at once, a longer one and a
//! shorter one, run by the server in that order (the key then expires at
//! the shorter ttl), and their replies read in the other order: the longer
//! one's confirmation must not set the deadline past the shorter one's
//! expiry. On tokio's paused clock both are sent at the same instant, as
//! two tasks can send them within one tick of a coarse clock, and the
//! order in which the replies are read is chosen by the test, as a
//! scheduler may choose it.

use std::pin::pin;
use std::time::Duration;

use futures_util::poll;
use lockmacro_runtime::backend::{Dial, DialedStream, Dialing};
use lockmacro_runtime::{Locker, ObtainOptions, RedisBackend, RedisConfig};
use lockmacro_sim::{Server, TokioClock};
use tokio::time::Instant;

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

#[tokio::test(start_paused = true)]
async fn a_longer_refresh_read_after_a_shorter_one_beside_it_keeps_the_shorter_deadline() {
    let server = Server::new(TokioClock::starting_at(1_700_000_000_000));
    let config = RedisConfig::default().dial(InMemory(server.clone()));
    let locker = Locker::new(
        RedisBackend::connect_with("redis://simulated.invalid:6379/", config)
            .await
            .expect("connect through the dial"),
    );
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
