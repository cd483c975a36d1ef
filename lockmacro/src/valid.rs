//! How the arguments go together, checked once each value is parsed: the
//! combinations of [`RULES`], and the relations that only the attribute
//! has (`key` or `keys`, a `refresh` within the `ttl`, …). Each error lands
//! on the argument to change.

use proc_macro2::Span;
use syn::Error;

use crate::duration::Duration;
use crate::errors::Errors;
use crate::rules::{RULES, Term};
use crate::values::{Given, Values};

/// Records every mistake in how the arguments combine.
pub(crate) fn check(values: &Values, errors: &mut Errors) {
    key_or_keys(values, errors);
    if let (Some(refresh), Some(ttl)) = (&values.refresh, valid(&values.ttl)) {
        refresh_within_ttl(refresh, ttl, errors);
    }
    if let (Some(max_hold), Some(hold_at_least)) = (&values.max_hold, valid(&values.hold_at_least))
    {
        max_hold_after_hold_at_least(max_hold, hold_at_least, errors);
    }
    fair_waits(values, errors);
    for rule in &RULES {
        if let Some(name) = given(values, rule.argument)
            && given(values, rule.with).is_some()
        {
            errors.push(Error::new(name, rule.message));
        }
    }
}

/// The value of an argument given with a valid one.
fn valid<T>(given: &Option<Given<T>>) -> Option<&T> {
    given.as_ref()?.value.as_ref()
}

/// Where `term` is written, when the arguments ask for it. An argument
/// whose value is invalid asks for nothing it could be read as; `permits`
/// and `mode` have no value that asks for nothing.
fn given(values: &Values, term: Term) -> Option<Span> {
    match term {
        Term::SeveralKeys => values
            .keys
            .as_ref()
            .filter(|keys| {
                values.key.is_none() && keys.value.as_ref().is_some_and(|keys| keys.len() > 1)
            })
            .map(|keys| keys.name),
        Term::Fair => values
            .fair
            .as_ref()
            .filter(|fair| fair.value == Some(true))
            .map(|fair| fair.name),
        Term::Replicas => values
            .replicas
            .as_ref()
            .filter(|replicas| replicas.value.is_some_and(|replicas| replicas > 0))
            .map(|replicas| replicas.name),
        Term::Permits => values.permits.as_ref().map(|permits| permits.name),
        Term::Mode => values.mode.as_ref().map(|mode| mode.name),
    }
}

/// One of `key` and `keys`, reported on the later one.
fn key_or_keys(values: &Values, errors: &mut Errors) {
    if let (Some(key), Some(keys)) = (&values.key, &values.keys) {
        let later = if key.position > keys.position {
            key.name
        } else {
            keys.name
        };
        errors.push(Error::new(
            later,
            "`key` and `keys` cannot both be given: put every key in `keys = [\"…\", \"…\"]`",
        ));
    }
}

fn refresh_within_ttl(refresh: &Given<Duration>, ttl: &Duration, errors: &mut Errors) {
    let Some(refresh_ms) = refresh.value.as_ref().and_then(Duration::millis) else {
        return;
    };
    match ttl.millis() {
        Some(ttl) if refresh_ms >= ttl => errors.push(Error::new(
            refresh.span,
            format!(
                "`refresh` must be shorter than `ttl` ({}), or the lease can expire before it is renewed: write a shorter period, such as `refresh = \"{}\"`, or remove `refresh` to renew every third of `ttl`",
                crate::duration::display(ttl.into()),
                crate::duration::display((ttl / 3).max(1).into()),
            ),
        )),
        _ => {}
    }
}

fn max_hold_after_hold_at_least(
    max_hold: &Given<Duration>,
    hold_at_least: &Duration,
    errors: &mut Errors,
) {
    let Some(max_hold_ms) = max_hold.value.as_ref().and_then(Duration::millis) else {
        return;
    };
    match hold_at_least.millis() {
        Some(hold) if max_hold_ms < hold => errors.push(Error::new(
            max_hold.span,
            format!(
                "`max_hold` cannot be shorter than `hold_at_least` ({}): the lease would be lost before the key may be let go; write `max_hold = \"{}\"` or longer, or remove one of them",
                crate::duration::display(hold.into()),
                crate::duration::display(hold.into()),
            ),
        )),
        _ => {}
    }
}

/// A fair waiter keeps its place in the queue until its wait ends: without
/// `wait` it tries once and never joins the queue, so `fair` would change
/// nothing (the runtime likewise wants a deadline on a fair wait).
fn fair_waits(values: &Values, errors: &mut Errors) {
    if let Some(name) = given(values, Term::Fair)
        && values.wait.is_none()
    {
        errors.push(Error::new(
            name,
            "`fair = true` needs `wait = \"…\"`: fair waiters keep their place in the queue until then; add `wait`, as in `wait = \"10s\"`",
        ));
    }
}
