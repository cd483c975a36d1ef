//! Leader election (`Locker::election`), on every backend: terms strictly
//! increase through resignations, drops and lost leases; a follower waits
//! while a leader holds the role and is elected as soon as it is given up;
//! `run` stops its body when the lease is lost and campaigns again; a
//! campaign given up midway leaves nothing behind. The Redis cases at the
//! end show that a waiting follower sends nothing, and the fair order.
//!
//! Bounds of 5 s (`PROMPTLY`) are limits for a hang, not measurements: the
//! ttl is 30 s wherever a prompt election shows that the follower did not
//! wait for the leader's lease to run out.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lockmacro_runtime::{LeaderInfo, Leadership, LockError, Locker, Next};
use lockmacro_testkit::Fixture;
use lockmacro_testkit::RedisServer;

use crate::wakeup::{calls, commands, listeners};

const ROLE: &str = "scheduler";
const TTL: Duration = Duration::from_secs(30);
const PROMPTLY: Duration = Duration::from_secs(5);
/// How long a follower is watched waiting while someone else leads.
const WAITING: Duration = Duration::from_millis(200);

/// Waits up to [`PROMPTLY`] for `campaign` to elect its candidate.
async fn elected(
    fx: &Fixture,
    campaign: impl Future<Output = Result<Leadership, LockError>>,
    what: &str,
) -> Leadership {
    let result = tokio::time::timeout(PROMPTLY, campaign)
        .await
        .unwrap_or_else(|_| panic!("{what}: not elected within {PROMPTLY:?}"));
    fx.check(result, what)
}

/// Polls `campaign` for [`WAITING`] and asserts that it is still waiting.
async fn still_waiting(
    campaign: &mut (impl Future<Output = Result<Leadership, LockError>> + Unpin),
    what: &str,
) {
    if let Ok(result) = tokio::time::timeout(WAITING, campaign).await {
        panic!("{what}: a campaign ended while another instance leads: {result:?}");
    }
}

/// Two instances take turns: each term is won by the one that waited, once
/// the other resigns or drops its leadership, and has a larger number.
pub async fn terms_increase_across_resignations_and_drops(fx: &Fixture) {
    let instances = [fx.locker().await, fx.locker().await];
    let mut leader = elected(fx, instances[0].election(ROLE, TTL).campaign(), "first").await;
    assert_eq!(leader.role(), ROLE);
    assert!(!leader.is_lost());
    let mut last = leader.term();
    for round in 1..=4 {
        let election = instances[round % 2].election(ROLE, TTL);
        let mut campaign = Box::pin(election.campaign());
        still_waiting(&mut campaign, &format!("round {round}")).await;
        if round % 2 == 0 {
            fx.check(leader.resign().await, "resign");
        } else {
            // Resigns in the background.
            drop(leader);
        }
        leader = elected(fx, campaign, &format!("round {round}: the follower")).await;
        assert!(
            leader.term() > last,
            "round {round}: term {} after term {last}",
            leader.term()
        );
        last = leader.term();
    }
    fx.check(leader.resign().await, "last resign");
}

/// `run` whose body is paused past its lease: the body's future is dropped
/// (it never acts after the pause), and `run` campaigns again and calls the
/// body in a later term, whose output it returns after resigning.
///
/// The test's runtime has one thread, which the pause blocks: the
/// watchdog cannot refresh the lease meanwhile, as in a stopped process.
pub async fn run_campaigns_again_after_losing_the_role(fx: &Fixture) {
    let ttl = Duration::from_secs(1);
    let locker = fx.locker().await;
    let election = locker.election(ROLE, ttl);
    let acted_after_the_pause = Arc::new(AtomicBool::new(false));
    let mut terms = Vec::new();
    let run = election.run(|term| {
        terms.push(term.number());
        let first = terms.len() == 1;
        let acted = acted_after_the_pause.clone();
        async move {
            if first {
                assert!(!term.is_lost());
                // Well past the lease: the key expires on the server, or is
                // given back by `run` once it sees the loss.
                std::thread::sleep(ttl * 5 / 2);
                tokio::task::yield_now().await;
                acted.store(true, Ordering::SeqCst);
                std::future::pending::<()>().await;
            }
            Ok::<_, Infallible>(term.number())
        }
    });
    let returned = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("run did not end within 20 s");
    let returned = fx.check(returned, "run");
    assert!(
        !acted_after_the_pause.load(Ordering::SeqCst),
        "the body was polled after its lease was lost"
    );
    assert_eq!(terms.len(), 2, "the body was called in terms {terms:?}");
    assert_eq!(returned, terms[1], "run returned another term's output");
    assert!(
        terms[1] > terms[0],
        "term {} after term {}",
        terms[1],
        terms[0]
    );
    // `run` resigned before it returned.
    let next = elected(fx, locker.election(ROLE, TTL).campaign(), "after run").await;
    assert!(next.term() > terms[1]);
}

/// A body whose first term fails (as a store write with `?` does on a
/// network blip) ends that term, not the campaign: `run` resigns, backs off,
/// is elected again in a later term and returns that term's output.
pub async fn run_leads_again_in_a_later_term_after_the_body_fails(fx: &Fixture) {
    let locker = fx.locker().await;
    let election = locker.election(ROLE, TTL);
    let mut terms = Vec::new();
    let run = election.run(|term| {
        terms.push(term.number());
        let first = terms.len() == 1;
        async move {
            if first {
                return Err("the store could not be reached");
            }
            Ok(term.number())
        }
    });
    let returned = tokio::time::timeout(PROMPTLY, run)
        .await
        .expect("not elected again after the body failed");
    let returned = fx.check(returned, "run");
    assert_eq!(terms.len(), 2, "the body was called in terms {terms:?}");
    assert!(terms[1] > terms[0], "term {} after {}", terms[1], terms[0]);
    assert_eq!(returned, terms[1]);
    // Both terms were given back: the role is free at once.
    let next = elected(fx, locker.election(ROLE, TTL).campaign(), "after run").await;
    assert!(next.term() > terms[1]);
    fx.check(next.resign().await, "resign");
}

/// The ways a body says how its term ends: `Next::Retry` ends the first
/// term only (`run` resigns and is elected again in a later term), and
/// `Next::Stop` with an error ends the campaign with that error, which
/// `run` returns after giving the role back. The body is not called again.
pub async fn next_retry_ends_the_term_and_next_stop_ends_the_campaign_with_its_error(fx: &Fixture) {
    let locker = fx.locker().await;
    let election = locker.election(ROLE, TTL);
    let mut terms = Vec::new();
    let run = election.run(|term| {
        terms.push(term.number());
        let first = terms.len() == 1;
        async move {
            if first {
                Next::Retry(format!("the store was busy in term {}", term.number()))
            } else {
                Next::Stop(Err::<u64, _>("the job's input is wrong"))
            }
        }
    });
    let returned = tokio::time::timeout(PROMPTLY, run)
        .await
        .expect("not elected again after `Next::Retry`");
    assert_eq!(fx.check(returned, "run"), Err("the job's input is wrong"));
    assert_eq!(terms.len(), 2, "the body was called in terms {terms:?}");
    assert!(terms[1] > terms[0], "term {} after {}", terms[1], terms[0]);
    // The stopping term was given back: the role is free at once.
    let next = elected(fx, locker.election(ROLE, TTL).campaign(), "after run").await;
    assert!(next.term() > terms[1]);
    fx.check(next.resign().await, "resign");
}

/// Two instances run a leader loop until told to stop; the first three
/// terms, whoever leads them, end in the body's error. Each failing leader
/// gives the role back and campaigns again, so a fourth term is led, and
/// neither loop ends before the stop: no instance stops campaigning.
pub async fn after_a_leaders_body_fails_an_instance_leads_again(fx: &Fixture) {
    const FAILING: usize = 3;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (led_tx, mut led) = tokio::sync::mpsc::unbounded_channel();
    let failures = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut loops = Vec::new();
    for instance in 0..2 {
        let election = fx.locker().await.election(ROLE, TTL);
        let (mut stopped, led, failures) = (stopped.clone(), led_tx.clone(), failures.clone());
        loops.push(tokio::spawn(async move {
            election
                .run_until(stopped.wait_for(|stop| *stop), |term| {
                    let (led, failures) = (led.clone(), failures.clone());
                    async move {
                        let _ = led.send((instance, term.number()));
                        if failures.fetch_add(1, Ordering::SeqCst) < FAILING {
                            return Err(format!("job failed in term {}", term.number()));
                        }
                        std::future::pending::<Result<(), String>>().await
                    }
                })
                .await
        }));
    }
    let mut terms: Vec<(usize, u64)> = Vec::new();
    while terms.len() <= FAILING {
        let next = tokio::time::timeout(PROMPTLY, led.recv())
            .await
            .unwrap_or_else(|_| panic!("no term led after {terms:?}"))
            .expect("both loops ended");
        terms.push(next);
    }
    for pair in terms.windows(2) {
        assert!(pair[1].1 > pair[0].1, "terms went back: {terms:?}");
    }
    for (instance, run) in loops.iter().enumerate() {
        assert!(
            !run.is_finished(),
            "instance {instance} stopped campaigning: {terms:?}"
        );
    }
    stop.send_replace(true);
    for run in loops {
        let ended = tokio::time::timeout(PROMPTLY, run)
            .await
            .expect("a loop did not end on stop")
            .unwrap();
        assert_eq!(fx.check(ended, "run_until"), None);
    }
    // The leader gave the role back when it stopped.
    let next = elected(
        fx,
        fx.locker().await.election(ROLE, TTL).campaign(),
        "after stop",
    )
    .await;
    assert!(next.term() > terms[FAILING].1);
    fx.check(next.resign().await, "resign");
}

/// `leader()` answers `None` while nobody leads, and the leader's term and
/// metadata while one does (the term its `Leadership` was told), and `None`
/// again once it resigned.
pub async fn leader_is_none_when_nobody_leads_and_the_leaders_metadata_when_one_does(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let watcher = b.election(ROLE, TTL);
    assert_eq!(fx.check(watcher.leader().await, "leader"), None);
    let leadership = elected(
        fx,
        a.election(ROLE, TTL).metadata("instance-a").campaign(),
        "campaign",
    )
    .await;
    let leader = fx
        .check(watcher.leader().await, "leader")
        .expect("nobody leads, says leader(), while instance-a does");
    assert_eq!(leader.role, ROLE);
    assert_eq!(leader.term, leadership.term());
    assert_eq!(leader.metadata, "instance-a");
    let remaining = leader.remaining.expect("no remaining lease");
    assert!(remaining <= TTL, "{remaining:?} left of a {TTL:?} lease");
    fx.check(leadership.resign().await, "resign");
    assert_eq!(fx.check(watcher.leader().await, "leader"), None);
}

/// Waits for the observer's next item.
async fn next_change(
    fx: &Fixture,
    changes: &mut (impl futures::Stream<Item = Result<Option<LeaderInfo>, LockError>> + Unpin),
    what: &str,
) -> Option<LeaderInfo> {
    let item = tokio::time::timeout(PROMPTLY, futures::StreamExt::next(changes))
        .await
        .unwrap_or_else(|_| panic!("{what}: no change seen within {PROMPTLY:?}"))
        .unwrap_or_else(|| panic!("{what}: the observer's stream ended"));
    fx.check(item, what)
}

/// Waits until the observer reports a leader, past `None`s.
async fn next_leader(
    fx: &Fixture,
    changes: &mut (impl futures::Stream<Item = Result<Option<LeaderInfo>, LockError>> + Unpin),
    what: &str,
) -> LeaderInfo {
    loop {
        if let Some(leader) = next_change(fx, changes, what).await {
            return leader;
        }
    }
}

/// An observer sees nobody, then each leader in turn, through a resignation
/// and a leadership dropped, each with a follower waiting: each leader with
/// the term it was told, terms increasing.
pub async fn observer_sees_each_leader_in_turn(fx: &Fixture) {
    let lockers = [fx.locker().await, fx.locker().await, fx.locker().await];
    let mut changes = lockers[2].election(ROLE, TTL).observe();
    assert_eq!(next_change(fx, &mut changes, "at first").await, None);
    let first = elected(
        fx,
        lockers[0].election(ROLE, TTL).metadata("a").campaign(),
        "a",
    )
    .await;
    let seen = next_leader(fx, &mut changes, "a elected").await;
    assert_eq!((seen.term, seen.metadata.as_str()), (first.term(), "a"));

    let election = lockers[1].election(ROLE, TTL).metadata("b");
    let mut follower = Box::pin(election.campaign());
    still_waiting(&mut follower, "b").await;
    let first_term = first.term();
    fx.check(first.resign().await, "a resigns");
    let second = elected(fx, follower, "b").await;
    let seen = next_leader(fx, &mut changes, "b elected").await;
    assert_eq!((seen.term, seen.metadata.as_str()), (second.term(), "b"));
    assert!(seen.term > first_term);

    // A candidate waits, as a dropped leadership's release is announced to
    // waiters (on Redis, only to them).
    let election = lockers[0].election(ROLE, TTL).metadata("a");
    let mut follower = Box::pin(election.campaign());
    still_waiting(&mut follower, "a again").await;
    drop(second);
    let third = elected(fx, follower, "a again").await;
    let seen = next_leader(fx, &mut changes, "a elected again").await;
    assert_eq!((seen.term, seen.metadata.as_str()), (third.term(), "a"));
    fx.check(third.resign().await, "resign");
}

/// The cancellation token of a `Term` and of a `Leadership` is cancelled
/// when that term ends (the body's error, its `Ok`, a resignation), and
/// not before: the body sees its own term's token still on.
pub async fn a_terms_cancellation_token_is_cancelled_when_the_term_ends(fx: &Fixture) {
    let locker = fx.locker().await;
    let election = locker.election(ROLE, TTL);
    let mut tokens = Vec::new();
    let run = election.run(|term| {
        let token = term.cancellation_token();
        tokens.push(token.clone());
        let first = tokens.len() == 1;
        async move {
            let on = !token.is_cancelled();
            if first {
                Err("the first term fails")
            } else {
                Ok(on)
            }
        }
    });
    let on = tokio::time::timeout(PROMPTLY, run)
        .await
        .expect("run did not end");
    assert!(
        fx.check(on, "run"),
        "a term's token was cancelled while it ran"
    );
    assert_eq!(tokens.len(), 2);
    for (n, token) in tokens.iter().enumerate() {
        assert!(
            token.is_cancelled(),
            "term {n}'s token is still on after it ended"
        );
    }
    let leadership = elected(fx, election.campaign(), "campaign").await;
    let token = leadership.cancellation_token();
    assert!(
        !token.is_cancelled(),
        "a leadership's token is cancelled while it leads"
    );
    fx.check(leadership.resign().await, "resign");
    tokio::time::timeout(PROMPTLY, token.cancelled())
        .await
        .expect("the token is not cancelled after the resignation");
}

/// Campaigns cancelled at every stage (before, during and after their
/// attempts) leave the role free: with a ttl of 30 s, anything they left held
/// would keep the next candidate waiting far longer than [`PROMPTLY`].
pub async fn cancelled_campaigns_leave_nothing_behind(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    for i in 0..30u64 {
        let election = a.election(ROLE, TTL);
        let cancel_after = Duration::from_micros(i * 300);
        // One that completes is a leadership dropped at once: given back in
        // the background, like a cancelled attempt.
        let _ = tokio::time::timeout(cancel_after, election.campaign()).await;
    }
    let leader = elected(fx, b.election(ROLE, TTL).campaign(), "after cancellations").await;
    fx.check(leader.resign().await, "resign");
}

/// Campaigns dropped while they wait for the leader, fair ones among them
/// (queued), leave the role free for the next candidate once the leader
/// resigns.
pub async fn dropped_waiting_campaigns_leave_nothing_behind(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let leader = elected(fx, b.election(ROLE, TTL).campaign(), "the leader").await;
    for fair in [false, true] {
        let mut election = a.election(ROLE, TTL);
        if fair {
            election = election.fair();
        }
        let mut campaign = Box::pin(election.campaign());
        still_waiting(&mut campaign, "a follower").await;
        drop(campaign);
    }
    fx.check(leader.resign().await, "resign");
    let next = elected(
        fx,
        b.election(ROLE, TTL).campaign(),
        "after the dropped waiters",
    )
    .await;
    fx.check(next.resign().await, "resign");
}

lockmacro_testkit::for_each_backend! {
    runtime: (flavor = "multi_thread", worker_threads = 2),
    cases: [crate::election],
    { needs: [], servers: shared } => [
        terms_increase_across_resignations_and_drops,
        // One thread, so that the body's pause stops the watchdog.
        run_campaigns_again_after_losing_the_role(flavor = "current_thread"),
        run_leads_again_in_a_later_term_after_the_body_fails,
        next_retry_ends_the_term_and_next_stop_ends_the_campaign_with_its_error,
        after_a_leaders_body_fails_an_instance_leads_again,
        a_terms_cancellation_token_is_cancelled_when_the_term_ends,
        cancelled_campaigns_leave_nothing_behind,
        dropped_waiting_campaigns_leave_nothing_behind,
    ],
    { needs: [Inspect], servers: shared } => [
        leader_is_none_when_nobody_leads_and_the_leaders_metadata_when_one_does,
        observer_sees_each_leader_in_turn,
    ],
    // The Redis server shows its queue; the memory backend queues a
    // candidate at its first attempt, made at once.
    { needs: [FairQueue], only: [Redis, Valkey, Memory], servers: own } => [
        fair_election_hands_the_role_to_the_waiting_candidate,
    ],
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_refuses_what_it_cannot_keep_before_sending_anything() {
    let locker = Locker::memory();
    let err = locker
        .election(ROLE, TTL)
        .refresh(TTL)
        .campaign()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidDuration { key, what: "refresh period", .. } if key == ROLE),
        "{err:?}"
    );
    let err = locker
        .election(ROLE, Duration::ZERO)
        .campaign()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidDuration { what: "ttl", .. }),
        "{err:?}"
    );
    let err = locker.election("", TTL).campaign().await.unwrap_err();
    assert!(matches!(&err, LockError::InvalidKey { .. }), "{err:?}");
    // Nothing was taken.
    let leader = locker.election(ROLE, TTL).campaign().await.unwrap();
    leader.resign().await.unwrap();
}

/// A `Term` the body hands out lives on after `run` resigned: it says the
/// term is over, at once, and keeps nothing (the next candidate is elected
/// long before the 30 s lease could run out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn term_kept_after_run_is_over_and_holds_nothing() {
    let locker = Locker::memory();
    let election = locker.election(ROLE, TTL);
    let kept = election
        .run(|term| async move { Ok::<_, Infallible>(term) })
        .await
        .unwrap();
    assert!(kept.is_lost(), "the term is not over after run returned");
    tokio::time::timeout(PROMPTLY, kept.lost())
        .await
        .expect("`lost` did not complete for a term that is over");
    let next = tokio::time::timeout(PROMPTLY, locker.election(ROLE, TTL).campaign())
        .await
        .expect("the role is still held")
        .unwrap();
    assert!(next.term() > kept.number());
}

/// `run_until` ends with `Some` of the value a body stops with, before any
/// stop: `Next::Stop` and `Ok` are the same way to end the campaign.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_until_returns_the_value_a_body_stops_with() {
    let locker = Locker::memory();
    let election = locker.election(ROLE, TTL);
    let never = std::future::pending::<()>;
    let stopped = election
        .run_until(never(), |term| async move {
            Next::<_, Infallible>::Stop(term.number())
        })
        .await
        .unwrap();
    let returned = election
        .run_until(
            never(),
            |term| async move { Ok::<_, Infallible>(term.number()) },
        )
        .await
        .unwrap();
    let (Some(stopped), Some(returned)) = (stopped, returned) else {
        panic!("run_until ended without the body's value: {stopped:?}, {returned:?}");
    };
    assert!(returned > stopped, "term {returned} after term {stopped}");
}

/// A follower sends no command while it waits for the leader, whose lease
/// is 30 s and which refreshes it every 25 s: none falls in the test. It is
/// elected as soon as the leader resigns, which only a release it hears
/// can do in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_follower_sends_nothing_while_it_waits_and_is_elected_on_resign() {
    let server = RedisServer::start();
    let leader_locker = server.locker().await;
    let follower_locker = server.locker().await;
    let leader = server.expect_ok(
        leader_locker
            .election(ROLE, TTL)
            .refresh(Duration::from_secs(25))
            .campaign()
            .await,
        "the leader's campaign",
    );
    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    let election = follower_locker.election(ROLE, TTL);
    let follower = tokio::spawn(async move { election.campaign().await });
    // The follower tries, listens for releases, then tries once more (so
    // that a release before it listened is not missed): it waits after
    // that second attempt.
    for _ in 0..500 {
        if listeners(&server, ROLE) == 1 && calls(&server, "evalsha") >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(listeners(&server, ROLE), 1, "the follower does not listen");
    assert!(
        calls(&server, "evalsha") >= 2,
        "the follower did not make its two attempts: {:?}",
        commands(&server)
    );

    let () = server.cmd(&["CONFIG", "RESETSTAT"]);
    // A stretch of time in which nothing may happen, not a synchronisation.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent = commands(&server);
    assert!(
        sent.is_empty(),
        "a waiting follower sent commands: {sent:?}"
    );

    let first = leader.term();
    server.expect_ok(leader.resign().await, "resign");
    let next = tokio::time::timeout(PROMPTLY, follower)
        .await
        .expect("the follower was not woken by the resignation")
        .unwrap();
    let next = server.expect_ok(next, "the follower's campaign");
    assert!(next.term() > first, "term {} after {first}", next.term());
    server.expect_ok(next.resign().await, "resign");
}

/// With `fair`, a leader that resigns and campaigns again at once cannot
/// win the role back from a candidate that was already waiting.
async fn fair_election_hands_the_role_to_the_waiting_candidate(fx: &Fixture) {
    let (a, b) = (fx.locker().await, fx.locker().await);
    let leader = fx.check(a.election(ROLE, TTL).fair().campaign().await, "campaign");
    let election = b.election(ROLE, TTL).fair();
    let mut follower = tokio::spawn(async move { election.campaign().await });
    match fx.master() {
        Some(server) => {
            for _ in 0..500 {
                let queued: i64 = server.cmd(&["LLEN", &format!("{{{ROLE}}}:queue")]);
                if queued == 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let queued: i64 = server.cmd(&["LLEN", &format!("{{{ROLE}}}:queue")]);
            assert_eq!(queued, 1, "the follower did not queue");
        }
        // Queued at its first attempt, made at once on this backend.
        None => assert!(
            tokio::time::timeout(WAITING, &mut follower).await.is_err(),
            "the follower was elected while another instance leads"
        ),
    }
    fair_hand_over(leader, &a, follower).await;
}

/// `leader` resigns and campaigns again on `locker` while `follower` waits
/// in line: the follower is elected, and the old leader only after it.
async fn fair_hand_over(
    leader: Leadership,
    locker: &Locker,
    follower: tokio::task::JoinHandle<Result<Leadership, LockError>>,
) {
    let first = leader.term();
    leader.resign().await.expect("resign");
    let election = locker.election(ROLE, TTL).fair();
    let mut again = Box::pin(election.campaign());
    let next = tokio::time::timeout(PROMPTLY, follower)
        .await
        .expect("the waiting candidate was not elected")
        .unwrap()
        .expect("the follower's campaign");
    assert!(next.term() > first);
    if let Ok(result) = tokio::time::timeout(WAITING, &mut again).await {
        panic!("the old leader won the role back from the waiting candidate: {result:?}");
    }
    let second = next.term();
    next.resign().await.expect("resign");
    let back = tokio::time::timeout(PROMPTLY, again)
        .await
        .expect("the old leader was not elected after the follower")
        .expect("campaign");
    assert!(back.term() > second);
}

/// A leader loop ends when the locker shuts down: the shutdown takes the
/// role, the body is dropped, and `run_until` returns `ShutDown` instead of
/// campaigning again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_ends_with_shut_down_when_the_locker_shuts_down() {
    let locker = Locker::memory();
    let election = locker.election(ROLE, TTL);
    let (entered_tx, entered) = tokio::sync::oneshot::channel();
    let mut entered_tx = Some(entered_tx);
    let run = tokio::spawn(async move {
        election
            .run(|_term| {
                if let Some(entered) = entered_tx.take() {
                    let _ = entered.send(());
                }
                std::future::pending::<Result<(), Infallible>>()
            })
            .await
    });
    entered.await.expect("the body was not entered");
    let report = locker.shutdown().await;
    println!("{report:?}");
    let ended = tokio::time::timeout(PROMPTLY, run)
        .await
        .expect("run went on after the shutdown")
        .unwrap();
    assert!(
        matches!(&ended, Err(LockError::ShutDown { key }) if key == ROLE),
        "{ended:?}"
    );
}
