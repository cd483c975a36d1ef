//! Sending a call again: one loop for a single server's reconnect, a
//! cluster's failover and the switch to the master Sentinel names next. A
//! [`Policy`] says which failures are worth another try and what to do
//! before it, as tower's retry layer leaves that to its policy.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// The pause before another try after a failover's passing error: whoever
/// failed (the cluster client, the sentinels) has just waited on its own, so
/// this only keeps the loop from spinning.
pub(in crate::backend) const FOLLOW_PAUSE: Duration = Duration::from_millis(50);

/// What one call may send again, where, and what it reports when it stops.
pub(in crate::backend) trait Policy {
    /// Where an attempt is sent: a connection, a master's backend.
    type Target;
    /// What an attempt fails with.
    type Error;
    /// What the call fails with.
    type Failure;

    /// When the call stops trying; `None`: when [`retry`](Self::retry) says.
    fn deadline(&self) -> Option<Instant>;

    /// Where the next attempt goes.
    fn target(&self) -> Self::Target;

    /// True when another attempt may get past `err`.
    fn retry(&mut self, err: &Self::Error) -> bool;

    /// Readies the next attempt after an error [`retry`](Self::retry)
    /// accepted: `Ok(true)` to pause before it, `Err` when not ready yet
    /// (tried again after a pause, until the deadline).
    fn recover(&mut self) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// The call's failure for `err`, which is not worth another try; `last`
    /// is the error retried before it, if any.
    fn fail(&mut self, err: Self::Error, last: Option<Self::Error>) -> Self::Failure;

    /// The call's failure when the deadline passed: during an attempt
    /// (`cut`), or while recovering; `last` is the latest error met.
    fn spent(&mut self, last: Option<Self::Error>, cut: bool) -> Self::Failure;
}

/// Sends `attempt` to the policy's target until it succeeds, fails in a way
/// the policy does not retry, or the policy's deadline passes.
///
/// The first attempt is awaited here and the tries after a failure in
/// [`again`], boxed: their pauses and reconnection would otherwise make
/// every call's future several times the size of the attempt, and each
/// obtain and release copy that future into the backend's box.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn's future holds its arguments twice"
)]
pub(in crate::backend) fn follow<T, P, F, Fut>(
    mut policy: P,
    mut attempt: F,
) -> impl Future<Output = Result<T, P::Failure>>
where
    P: Policy,
    F: FnMut(P::Target) -> Fut,
    Fut: Future<Output = Result<T, P::Error>>,
{
    async move {
        let deadline = policy.deadline();
        let err = match within(deadline, attempt(policy.target())).await {
            Some(Ok(value)) => return Ok(value),
            Some(Err(err)) if policy.retry(&err) => err,
            Some(Err(err)) => return Err(policy.fail(err, None)),
            None => return Err(policy.spent(None, true)),
        };
        Box::pin(again(policy, attempt, deadline, err)).await
    }
}

/// [`follow`] after its first attempt failed with `err`, which the policy
/// retries.
async fn again<T, P, F, Fut>(
    mut policy: P,
    mut attempt: F,
    deadline: Option<Instant>,
    err: P::Error,
) -> Result<T, P::Failure>
where
    P: Policy,
    F: FnMut(P::Target) -> Fut,
    Fut: Future<Output = Result<T, P::Error>>,
{
    let mut last = Some(err);
    loop {
        loop {
            if deadline.is_some_and(|deadline| Instant::now() + FOLLOW_PAUSE >= deadline) {
                return Err(policy.spent(last, false));
            }
            match within(deadline, policy.recover()).await {
                Some(Ok(pause)) => {
                    if pause {
                        tokio::time::sleep(FOLLOW_PAUSE).await;
                    }
                    break;
                }
                Some(Err(err)) => {
                    last = Some(err);
                    tokio::time::sleep(FOLLOW_PAUSE).await;
                }
                None => return Err(policy.spent(last, false)),
            }
        }
        let outcome = within(deadline, attempt(policy.target())).await;
        let err = match outcome {
            Some(Ok(value)) => return Ok(value),
            Some(Err(err)) if policy.retry(&err) => err,
            Some(Err(err)) => return Err(policy.fail(err, last)),
            None => return Err(policy.spent(last, true)),
        };
        last = Some(err);
    }
}

/// `future`'s output, or `None` when `deadline` passed first.
fn within<F: Future>(deadline: Option<Instant>, future: F) -> Within<F> {
    Within {
        future,
        timer: deadline.map(|deadline| Box::pin(tokio::time::sleep_until(deadline))),
    }
}

pin_project_lite::pin_project! {
    /// A call and its deadline. The timer is boxed, and only made when
    /// there is a deadline: a single server's calls have none, and inline
    /// it would add its size to every call's future, which each obtain and
    /// release copy into the backend's box.
    struct Within<F> {
        #[pin]
        future: F,
        timer: Option<Pin<Box<Sleep>>>,
    }
}

impl<F: Future> Future for Within<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Some(output));
        }
        match this.timer {
            Some(timer) => timer.as_mut().poll(cx).map(|()| None),
            None => Poll::Pending,
        }
    }
}
