use std::time::Duration;

/// How [`Locker::obtain`](crate::Locker::obtain) waits when the key is held.
///
/// The default tries once. Every strategy can be capped by a number of
/// attempts and by an overall deadline; waiting never outlives the deadline:
/// the last attempt is made at the deadline at the latest. A wait is also never
/// longer than the holder's remaining lease, so an expired holder is noticed at
/// once.
///
/// ```
/// use std::time::Duration;
/// use lockmacro_runtime::RetryStrategy;
///
/// // Retry with exponential backoff (full jitter) between 10 ms and 1 s,
/// // giving up after 30 s.
/// let retry = RetryStrategy::exponential(Duration::from_millis(10), Duration::from_secs(1))
///     .deadline(Duration::from_secs(30));
/// # let _ = retry;
/// ```
#[derive(Debug, Clone, Default)]
pub struct RetryStrategy {
    backoff: Backoff,
    max_attempts: Option<u32>,
    deadline: Option<Duration>,
}

#[derive(Debug, Clone, Copy, Default)]
enum Backoff {
    #[default]
    None,
    Linear(Duration),
    Exponential {
        base: Duration,
        max: Duration,
    },
}

impl RetryStrategy {
    /// Try once, never wait. The default.
    pub fn none() -> Self {
        RetryStrategy::default()
    }

    /// Retry every `interval` until the deadline or the attempt cap.
    pub fn linear(interval: Duration) -> Self {
        RetryStrategy {
            backoff: Backoff::Linear(interval),
            ..RetryStrategy::default()
        }
    }

    /// Retry after a random delay in `0..=min(max, base × 2ⁿ)` before the
    /// n-th retry ("full jitter"), so that many waiters spread out instead of
    /// retrying in step.
    pub fn exponential(base: Duration, max: Duration) -> Self {
        RetryStrategy {
            backoff: Backoff::Exponential {
                base,
                max: max.max(base),
            },
            ..RetryStrategy::default()
        }
    }

    /// Give up after `attempts` attempts in all (the first one included).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts.max(1));
        self
    }

    /// Give up once `deadline` has passed since the first attempt.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The overall deadline, if any.
    pub fn get_deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// True when this strategy never retries.
    pub fn is_none(&self) -> bool {
        matches!(self.backoff, Backoff::None) || self.max_attempts == Some(1)
    }

    /// The pause before the next attempt, after `attempts` attempts failed;
    /// `None` to give up. The deadline is applied by the caller.
    pub(crate) fn delay_after(&self, attempts: u32) -> Option<Duration> {
        if self.max_attempts.is_some_and(|max| attempts >= max) {
            return None;
        }
        match self.backoff {
            Backoff::None => None,
            Backoff::Linear(interval) => Some(interval),
            Backoff::Exponential { base, max } => {
                let shift = attempts.saturating_sub(1).min(31);
                let cap = base.saturating_mul(1 << shift).min(max);
                let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
                Some(Duration::from_nanos(rand::random_range(0..=nanos)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_never_retries() {
        assert_eq!(RetryStrategy::none().delay_after(1), None);
    }

    #[test]
    fn linear_retries_at_its_interval_until_the_attempt_cap() {
        let retry = RetryStrategy::linear(Duration::from_millis(5)).max_attempts(3);
        assert_eq!(retry.delay_after(1), Some(Duration::from_millis(5)));
        assert_eq!(retry.delay_after(2), Some(Duration::from_millis(5)));
        assert_eq!(retry.delay_after(3), None);
    }

    #[test]
    fn exponential_delays_stay_under_the_doubling_cap() {
        let retry = RetryStrategy::exponential(Duration::from_millis(1), Duration::from_millis(8));
        for attempts in 1..40 {
            let cap = Duration::from_millis(1 << (attempts - 1).min(3));
            for _ in 0..50 {
                assert!(retry.delay_after(attempts).unwrap() <= cap);
            }
        }
    }

    #[test]
    fn exponential_jitter_spreads_the_delays() {
        let retry = RetryStrategy::exponential(Duration::from_millis(100), Duration::from_secs(1));
        let delays: std::collections::HashSet<_> =
            (0..20).map(|_| retry.delay_after(4).unwrap()).collect();
        assert!(delays.len() > 10, "full jitter gave {delays:?}");
    }
}
