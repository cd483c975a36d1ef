//! Counters, histograms and a gauge through the [`metrics`] facade, with the
//! `metrics` feature; without it, every function here does nothing.
//!
//! Every metric is labelled with `backend` ([`Backend::name`]) and
//! `namespace` (the locker's namespace, empty without one): both are set in
//! code, so the number of series stays bounded whatever the keys are.
//!
//! [`Backend::name`]: crate::backend::Backend::name
//! [`metrics`]: https://docs.rs/metrics

use tokio::time::Instant;

use crate::LockError;

/// The labels of every metric of one lease or locker.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct Labels<'a> {
    pub(crate) backend: &'static str,
    pub(crate) namespace: &'a str,
}

#[cfg(feature = "metrics")]
impl Labels<'_> {
    fn pairs(self) -> [(&'static str, String); 2] {
        [
            ("backend", self.backend.to_owned()),
            ("namespace", self.namespace.to_owned()),
        ]
    }
}

/// A lock was obtained, waited for since `since`.
///
/// The functions here take the instant a duration runs from, not the
/// duration: reading the clock is a call the compiler cannot leave out, and
/// without the feature nobody needs its answer.
pub(crate) fn obtained(at: Labels<'_>, since: Instant) {
    #[cfg(feature = "metrics")]
    {
        let waited = since.elapsed();
        let labels = at.pairs();
        metrics::counter!("lockmacro_obtained_total", &labels).increment(1);
        metrics::histogram!("lockmacro_wait_seconds", &labels).record(waited.as_secs_f64());
        metrics::gauge!("lockmacro_leases_held", &labels).increment(1.0);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (at, since);
}

/// An obtain gave up, waited for since `since`: the key is held by someone
/// else.
pub(crate) fn busy(at: Labels<'_>, since: Instant) {
    #[cfg(feature = "metrics")]
    {
        let waited = since.elapsed();
        let labels = at.pairs();
        metrics::counter!("lockmacro_busy_total", &labels).increment(1);
        metrics::histogram!("lockmacro_wait_seconds", &labels).record(waited.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (at, since);
}

/// A lease was given back by its owner.
pub(crate) fn released(at: Labels<'_>) {
    #[cfg(feature = "metrics")]
    metrics::counter!("lockmacro_released_total", &at.pairs()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = at;
}

/// A lease was declared lost.
pub(crate) fn lost(at: Labels<'_>) {
    #[cfg(feature = "metrics")]
    metrics::counter!("lockmacro_lost_total", &at.pairs()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = at;
}

/// A lease's watchdog refresh could not be sent or answered: `err`.
pub(crate) fn refresh_failed(at: Labels<'_>, err: &LockError) {
    #[cfg(feature = "metrics")]
    metrics::counter!("lockmacro_refresh_failures_total", &at.pairs()).increment(1);
    failed(at, Op::Refresh, err);
}

/// The lock operations whose backend errors are counted.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Obtain,
    Refresh,
    Release,
}

/// `op` failed with `err`: counted when the backend failed (unreachable,
/// timed out, refused the credentials…), the outage that the other metrics
/// do not show, since a failed obtain is neither obtained nor busy.
pub(crate) fn failed(at: Labels<'_>, op: Op, err: &LockError) {
    #[cfg(feature = "metrics")]
    if let LockError::Backend(err) = err {
        let [backend, namespace] = at.pairs();
        let op = match op {
            Op::Obtain => "obtain",
            Op::Refresh => "refresh",
            Op::Release => "release",
        };
        let labels = [
            backend,
            namespace,
            ("op", op.to_owned()),
            ("kind", err.kind().as_str().to_owned()),
        ];
        metrics::counter!("lockmacro_backend_errors_total", &labels).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (at, op, err);
}

/// Gives every metric its unit and description, for exporters that show
/// them (Prometheus's `# HELP`). Called by each new locker: a recorder
/// installed before it hears them.
pub(crate) fn describe() {
    #[cfg(feature = "metrics")]
    {
        use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
        describe_counter!("lockmacro_obtained_total", Unit::Count, "Locks obtained.");
        describe_counter!(
            "lockmacro_busy_total",
            Unit::Count,
            "Obtains that gave up because someone else held the key."
        );
        describe_counter!(
            "lockmacro_released_total",
            Unit::Count,
            "Locks given back by their owner."
        );
        describe_counter!(
            "lockmacro_lost_total",
            Unit::Count,
            "Leases lost: a refresh refused, the local deadline passed, or max_hold reached."
        );
        describe_counter!(
            "lockmacro_refresh_failures_total",
            Unit::Count,
            "Watchdog refreshes that could not be sent or answered."
        );
        describe_counter!(
            "lockmacro_backend_errors_total",
            Unit::Count,
            "Obtains, refreshes and releases that failed with a backend error, by operation \
             (op: obtain, refresh, release) and error kind (kind: unreachable, timeout, \
             authentication, permission, tls, protocol, unsupported, other)."
        );
        describe_histogram!(
            "lockmacro_wait_seconds",
            Unit::Seconds,
            "Time an obtain took, whether it obtained the lock or gave up as busy."
        );
        describe_histogram!(
            "lockmacro_hold_seconds",
            Unit::Seconds,
            "Time from taking a lock to its release, loss or drop."
        );
        describe_gauge!(
            "lockmacro_leases_held",
            Unit::Count,
            "Leases held now: obtained, and not yet given back, lost or dropped."
        );
        describe_counter!(
            "lockmacro_election_terms_failed_total",
            Unit::Count,
            "Terms of an election's leader loop that ended without ending the campaign, by \
             reason (reason: body_error, lease_lost)."
        );
    }
}

/// A lease held since `since` is gone, however it ended.
pub(crate) fn ended(at: Labels<'_>, since: Instant) {
    #[cfg(feature = "metrics")]
    {
        let held = since.elapsed();
        let labels = at.pairs();
        metrics::histogram!("lockmacro_hold_seconds", &labels).record(held.as_secs_f64());
        metrics::gauge!("lockmacro_leases_held", &labels).decrement(1.0);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (at, since);
}

/// An election's term ended without ending the campaign, for `reason`.
pub(crate) fn term_failed(at: Labels<'_>, reason: &'static str) {
    #[cfg(feature = "metrics")]
    {
        let [backend, namespace] = at.pairs();
        metrics::counter!(
            "lockmacro_election_terms_failed_total",
            &[backend, namespace, ("reason", reason.to_owned())]
        )
        .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (at, reason);
}
