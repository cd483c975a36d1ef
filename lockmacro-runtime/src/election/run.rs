//! The leader loop: campaign, run the body while leading, and after a term
//! that ended in an error or a lost lease, back off and campaign again.

use std::convert::Infallible;
use std::future::Future;

use tokio::time::Instant;

use super::{Election, IntoNext, Leadership, Next, Term};
use crate::LockError;
use crate::metrics;

/// Why a term ended without ending the campaign: the `reason` label of
/// `lockmacro_election_terms_failed_total`.
#[derive(Debug, Clone, Copy)]
enum Failed {
    /// The body returned an error.
    Body,
    /// The lease was lost: a refresh refused, or the backend out of reach
    /// past the lease's local deadline.
    Lost,
}

impl Failed {
    fn label(self) -> &'static str {
        match self {
            Failed::Body => "body_error",
            Failed::Lost => "lease_lost",
        }
    }
}

impl Election {
    /// Leads for as long as the service runs: campaigns, runs the future
    /// `body` returns while this instance leads, and when that term fails,
    /// resigns, backs off and campaigns again, until the body says to stop.
    ///
    /// `body` is called once per term with that [`Term`] (its number is the
    /// fencing token to write with). Its future returns how the term ends:
    /// a [`Next`], or a `Result` read as one, so that `?` works in the body
    /// ([`IntoNext`]).
    ///
    /// # What ends the campaign
    ///
    /// | the body returns, or what happens | the role | `run` returns |
    /// |---|---|---|
    /// | `Ok(value)` or `Next::Stop(value)` | given back | `Ok(value)` |
    /// | `Next::Stop(Err(error))` (or `Ok(Err(error))`): a failure no other term will cure | given back | `Ok(Err(error))` |
    /// | the locker's [`shutdown`](crate::Locker::shutdown) | taken by the shutdown | `Err(`[`LockError::ShutDown`]`)` |
    /// | an error campaigning again cannot cure (see [`campaign`](Self::campaign)): a role, ttl or period it cannot use, a backend that refuses this client | not held | `Err(error)` |
    /// | the future returned by `run` is dropped | given back in the background | nothing |
    ///
    /// [`run_until`](Self::run_until) stops on a signal too, and waits for
    /// the role to be given back.
    ///
    /// # What ends only the term
    ///
    /// The campaign goes on after each of these: the role is given back so
    /// that another instance can lead, and this one campaigns again after a
    /// backoff ([`backoff`](Self::backoff)), calling `body` anew in its next
    /// term. Each is logged as a warning with the role and the term, and
    /// counted (with the `metrics` feature) in
    /// `lockmacro_election_terms_failed_total`.
    ///
    /// - **`Err(error)` or `Next::Retry(error)`** (`reason="body_error"`): a
    ///   store write that failed on a network blip, a job that failed.
    /// - **A lost lease** (`reason="lease_lost"`): the future is dropped on
    ///   the lease's local deadline, as [`OnLost::Abort`](crate::OnLost::Abort)
    ///   does under [`Locker::hold`](crate::Locker::hold): it is never polled
    ///   once the deadline has passed, and the output of one that completes
    ///   after it is dropped, as if it had not completed. What remains is the
    ///   code between two awaits, and a write already handed to a
    ///   connection: pass the term to the resource so that it refuses those.
    ///
    /// A backend out of reach while campaigning ends nothing either: the
    /// attempt is retried after the backoff, for as long as the outage
    /// lasts. A **panic** in the body resigns the role, then resumes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{FencedStore, LockError, Locker};
    ///
    /// let locker = Locker::memory();
    /// let store = FencedStore::memory(); // or FencedStore::connect("redis://…").await?
    /// let election = locker.election("scheduler", Duration::from_secs(10));
    /// let term = election
    ///     .run(|term| {
    ///         let store = store.clone();
    ///         async move {
    ///             // Runs while this instance leads, and no longer. A failed
    ///             // write ends this term: `run` campaigns again.
    ///             store.set("last-job", "nightly report", term.number()).await?;
    ///             // Done: `run` gives the role back and returns the term.
    ///             Ok::<_, LockError>(term.number())
    ///         }
    ///     })
    ///     .await?;
    /// assert_eq!(store.get("last-job").await?.map(|applied| applied.token), Some(term));
    /// # Ok(()) }
    /// ```
    ///
    /// [`Next`] says the same without a `Result`, and ends the campaign on
    /// an error when no other term would do better:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{Locker, Next};
    ///
    /// let election = Locker::memory().election("migrations", Duration::from_secs(10));
    /// let mut attempts = 0;
    /// let outcome = election
    ///     .run(|term| {
    ///         attempts += 1;
    ///         let attempt = attempts;
    ///         async move {
    ///             match attempt {
    ///                 // Campaigns again, and calls this body in a later term.
    ///                 1 => Next::Retry(format!("the database was busy in term {}", term.number())),
    ///                 // Ends the campaign, with the error for the caller.
    ///                 _ => Next::Stop(Err::<(), _>("migration 7 does not apply")),
    ///             }
    ///         }
    ///     })
    ///     .await?;
    /// assert_eq!(outcome, Err("migration 7 does not apply"));
    /// assert_eq!(attempts, 2);
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T>(&self, body: F) -> Result<T, LockError>
    where
        F: FnMut(Term) -> Fut,
        Fut: Future,
        Fut::Output: IntoNext<Value = T>,
    {
        match self
            .lead(std::future::pending::<Infallible>(), body)
            .await?
        {
            Ok(value) => Ok(value),
            Err(never) => match never {},
        }
    }

    /// [`run`](Self::run), until `stop` completes: then the body's future
    /// (if this instance leads) is dropped, the role given back, and `run_until`
    /// returns `Ok(None)` once the backend has it. `Ok(Some(value))` when a
    /// body returned `Ok(value)` or `Next::Stop(value)` first; every other way
    /// to stop is [`run`](Self::run)'s.
    ///
    /// `stop` is any future: a `CancellationToken`'s `cancelled()`, a
    /// shutdown signal, a channel. It is polled first, so that a stop that
    /// is due wins over a body that is ready. The common case, a leader loop
    /// that runs until the service stops, is one call, with a body that
    /// returns only on errors:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
    /// use std::time::Duration;
    /// use lockmacro_runtime::{FencedStore, LockError, Locker, Term};
    /// use tokio::sync::watch;
    ///
    /// /// The leader's work: every tick, a write with the term. An error
    /// /// ends the term; `run_until` campaigns again.
    /// async fn lead(term: Term, store: FencedStore) -> Result<(), LockError> {
    ///     let mut ticks = tokio::time::interval(Duration::from_millis(10));
    ///     loop {
    ///         ticks.tick().await;
    ///         store.set("heartbeat", "scheduler", term.number()).await?;
    ///     }
    /// }
    ///
    /// let locker = Locker::memory();
    /// let store = FencedStore::memory();
    /// let (shutdown, mut stopping) = watch::channel(false);
    /// let election = locker.election("scheduler", Duration::from_secs(10));
    /// let service = tokio::spawn({
    ///     let store = store.clone();
    ///     async move {
    ///         election
    ///             .run_until(stopping.wait_for(|stop| *stop), |term| lead(term, store.clone()))
    ///             .await
    ///     }
    /// });
    /// # while store.get("heartbeat").await?.is_none() { tokio::time::sleep(Duration::from_millis(5)).await; }
    /// shutdown.send_replace(true); // the service stops: the role is given back
    /// assert_eq!(service.await.unwrap()?, None);
    /// # Ok(()) }
    /// ```
    pub async fn run_until<S, F, Fut, T>(&self, stop: S, body: F) -> Result<Option<T>, LockError>
    where
        S: Future,
        F: FnMut(Term) -> Fut,
        Fut: Future,
        Fut::Output: IntoNext<Value = T>,
    {
        // `stop`'s output is not kept: it may borrow (a watch's `Ref`), and
        // would have to live across the resignation.
        let stop = async move {
            stop.await;
        };
        Ok(self.lead(stop, body).await?.ok())
    }

    /// The loop of [`run_until`](Self::run_until): `Err` with `stop`'s
    /// output when it stopped the campaign.
    async fn lead<S, F, Fut, T>(
        &self,
        stop: S,
        mut body: F,
    ) -> Result<Result<T, S::Output>, LockError>
    where
        S: Future,
        F: FnMut(Term) -> Fut,
        Fut: Future,
        Fut::Output: IntoNext<Value = T>,
    {
        let mut stop = std::pin::pin!(stop);
        let (backoff, max_backoff) = self.retry_after_failures();
        let mut failures = 0;
        loop {
            let leadership = tokio::select! {
                biased;
                stopped = stop.as_mut() => return Ok(Err(stopped)),
                elected = self.campaign() => elected?,
            };
            let elected_at = Instant::now();
            let body = crate::hold::supervise(leadership.guard(), body(leadership.term_handle()));
            let outcome = tokio::select! {
                biased;
                stopped = stop.as_mut() => {
                    resign(leadership, "on stop").await;
                    return Ok(Err(stopped));
                }
                outcome = body => outcome,
            };
            let term = leadership.term();
            let failed = match outcome.map(|finished| finished.map(IntoNext::into_next)) {
                Some(Ok(Next::Stop(value))) => {
                    resign(leadership, "after the body").await;
                    return Ok(Ok(value));
                }
                Some(Ok(Next::Retry(error))) => {
                    tracing::warn!(target: "lockmacro", role = %self.role, term, %error, "the leader's body failed: resigning, to campaign again");
                    resign(leadership, "after the body's error").await;
                    Failed::Body
                }
                Some(Err(panic)) => {
                    resign(leadership, "after the body's panic").await;
                    std::panic::resume_unwind(panic);
                }
                None if leadership.guard().lease().is_revoked() => {
                    // The locker is shutting down: so is the campaign.
                    return Err(crate::registry::shut_down(&self.role));
                }
                None => {
                    tracing::warn!(target: "lockmacro", role = %self.role, term, "lost the role: campaigning again");
                    // Gives back in the background whatever the backend
                    // still holds, as the loss may be this side's alone.
                    drop(leadership);
                    Failed::Lost
                }
            };
            metrics::term_failed(self.labels(), failed.label());
            if elected_at.elapsed() >= self.ttl {
                failures = 0;
            }
            failures += 1;
            let delay = backoff.delay_after(failures).unwrap_or(max_backoff);
            tracing::debug!(target: "lockmacro", role = %self.role, term, failures, ?delay, "backing off before campaigning again");
            tokio::select! {
                biased;
                stopped = stop.as_mut() => return Ok(Err(stopped)),
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    fn labels(&self) -> metrics::Labels<'_> {
        metrics::Labels {
            backend: self.locker.backend().name(),
            namespace: self.locker.namespace(),
        }
    }
}

/// Gives the role back and waits for the backend's answer; a failure is
/// only logged, as the lease then runs out on its own.
async fn resign(leadership: Leadership, when: &str) {
    let (role, term) = (leadership.role().to_owned(), leadership.term());
    if let Err(error) = leadership.resign().await {
        tracing::debug!(target: "lockmacro", %role, term, %error, "resign {when}");
    }
}
