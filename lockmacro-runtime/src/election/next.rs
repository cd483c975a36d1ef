//! What a leader's body returns: [`Next`], how its term ends and whether
//! the campaign goes on, and [`IntoNext`], which reads a `Result` as one.

use std::fmt::Display;

#[cfg(doc)]
use super::Election;

/// How a term of [`Election::run`] or [`Election::run_until`] ends, said
/// plainly: the body returns `Next::Stop` to end the campaign, or
/// `Next::Retry` to end only this term and campaign again.
///
/// A body may return a `Result` instead, so that `?` works in it: `Ok` is
/// read as `Stop`, `Err` as `Retry` ([`IntoNext`]). `Next` says the same
/// where a reader would take `Err` for the end of the campaign.
///
/// The campaign ends with a value, never with the body's error: to end it
/// on an error, stop with a `Result`, as `Next::Stop(Err(error))`, and
/// `run` returns `Ok(Err(error))`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), lockmacro_runtime::LockError> {
/// use std::time::Duration;
/// use lockmacro_runtime::{Locker, Next};
///
/// #[derive(Debug)]
/// enum JobError {
///     /// The store was out of reach: another term may do better.
///     Unreachable,
///     /// The job's input is wrong: no term will do better.
///     BadInput(String),
/// }
///
/// async fn job(_term: u64) -> Result<u32, JobError> {
///     Err(JobError::BadInput("no such report".into()))
/// }
///
/// let locker = Locker::memory();
/// let election = locker.election("reports", Duration::from_secs(10));
/// let outcome = election
///     .run(|term| async move {
///         match job(term.number()).await {
///             Ok(rows) => Next::Stop(Ok(rows)),
///             Err(JobError::Unreachable) => Next::Retry("the store is out of reach"),
///             Err(fatal) => Next::Stop(Err(fatal)),
///         }
///     })
///     .await?;
/// assert!(matches!(outcome, Err(JobError::BadInput(_))));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "a leader's body returns it to say whether the campaign goes on"]
#[non_exhaustive]
pub enum Next<T, E> {
    /// Ends the campaign: the role is given back, and `run` returns
    /// `Ok(value)` (`run_until` returns `Ok(Some(value))`).
    Stop(T),
    /// Ends this term only: the error is logged as a warning with the role
    /// and the term and counted in `lockmacro_election_terms_failed_total`
    /// (`reason="body_error"`), the role is given back, and the instance
    /// campaigns again after a backoff ([`Election::backoff`]), calling the
    /// body anew in its next term.
    Retry(E),
}

/// What the body of [`Election::run`] and [`Election::run_until`] may
/// return: a [`Next`], or a `Result`, read as `Ok(value)` ↦
/// `Next::Stop(value)` and `Err(error)` ↦ `Next::Retry(error)`.
///
/// ```
/// use lockmacro_runtime::{IntoNext, Next};
///
/// assert_eq!(Ok::<u64, String>(7).into_next(), Next::Stop(7));
/// assert_eq!(Err::<u64, _>("unreachable").into_next(), Next::Retry("unreachable"));
/// ```
pub trait IntoNext {
    /// What the campaign ends with.
    type Value;
    /// Why a term failed, for the warning that logs it.
    type Error: Display;

    /// How the term ends.
    fn into_next(self) -> Next<Self::Value, Self::Error>;
}

impl<T, E: Display> IntoNext for Next<T, E> {
    type Value = T;
    type Error = E;

    fn into_next(self) -> Next<T, E> {
        self
    }
}

impl<T, E: Display> IntoNext for Result<T, E> {
    type Value = T;
    type Error = E;

    fn into_next(self) -> Next<T, E> {
        match self {
            Ok(value) => Next::Stop(value),
            Err(error) => Next::Retry(error),
        }
    }
}
