//! The arguments validated into a [`Plan`] that code generation cannot get
//! wrong: each value parsed alone (`values.rs`), then the arguments checked
//! against each other (`valid.rs`), every mistake reported at once.

use syn::{Expr, Ident, Path};

use crate::args::Args;
use crate::duration::Duration;
use crate::errors::Errors;
use crate::key::{Key, Params};
use crate::policy::{OnBusy, OnLost};
use crate::valid;
use crate::values::{Fence, Given, Mode, Values};

/// What the arguments ask for, validated: generating code from it cannot fail.
pub(crate) struct Plan {
    pub(crate) keys: Vec<Key>,
    pub(crate) ttl: Duration,
    pub(crate) on_busy: OnBusy,
    pub(crate) wait: Option<Duration>,
    pub(crate) fair: bool,
    pub(crate) refresh: Option<Duration>,
    pub(crate) on_lost: OnLost,
    pub(crate) fence: Fence,
    pub(crate) guard: Option<Ident>,
    pub(crate) locker: Option<Expr>,
    pub(crate) hold_at_least: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) lock_delay: Option<Duration>,
    /// `0` when not given.
    pub(crate) replicas: u32,
    /// `Some(n)`: one of `n` permits (a semaphore) instead of the whole key.
    pub(crate) permits: Option<u32>,
    /// A read or the write of a read-write lock instead of the whole key.
    pub(crate) mode: Option<Mode>,
    /// What a holder records; `None`: the runtime's default.
    pub(crate) metadata: Option<Key>,
    pub(crate) krate: Path,
}

impl Args {
    /// Checks every argument alone and against the others, reporting all
    /// the mistakes at once.
    pub(crate) fn plan(self, params: &Params) -> syn::Result<Plan> {
        let mut errors = Errors::default();
        let values = Values::parse(self, params, &mut errors);
        valid::check(&values, &mut errors);
        let plan = Plan::of(values);
        errors.finish()?;
        Ok(plan.expect("an argument failed validation without an error"))
    }
}

impl Plan {
    /// The plan, or `None` when an argument is missing, invalid or in
    /// conflict: its error is recorded.
    fn of(values: Values) -> Option<Self> {
        let keys = match (values.key, values.keys) {
            (Some(key), None) => vec![key.value?],
            (None, Some(keys)) => keys.value?,
            _ => return None,
        };
        Some(Plan {
            keys,
            ttl: values.ttl?.value?,
            on_busy: or(values.on_busy, OnBusy::Auto)?,
            wait: optional(values.wait)?,
            fair: or(values.fair, false)?,
            refresh: optional(values.refresh)?,
            on_lost: or(values.on_lost, OnLost::Abort)?,
            fence: or(values.fence, Fence::Off)?,
            guard: optional(values.guard)?,
            locker: values.locker,
            hold_at_least: optional(values.hold_at_least)?,
            max_hold: optional(values.max_hold)?,
            lock_delay: optional(values.lock_delay)?,
            replicas: or(values.replicas, 0)?,
            permits: optional(values.permits)?,
            mode: optional(values.mode)?,
            metadata: optional(values.metadata)?,
            krate: or(values.krate, syn::parse_quote!(::lockmacro_runtime))?,
        })
    }
}

/// The value given, or `default` when the argument is not; `None` when it
/// is invalid.
fn or<T>(given: Option<Given<T>>, default: T) -> Option<T> {
    match given {
        Some(given) => given.value,
        None => Some(default),
    }
}

/// `Some(None)` when the argument is not given, `None` when it is invalid.
fn optional<T>(given: Option<Given<T>>) -> Option<Option<T>> {
    match given {
        Some(given) => given.value.map(Some),
        None => Some(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proc_macro2::TokenStream;
    use quote::quote;
    use syn::{Signature, parse_quote};

    fn plan(args: TokenStream) -> syn::Result<Plan> {
        let sig: Signature = parse_quote!(async fn transfer(&self, from: u64, to: u64));
        syn::parse2::<Args>(args)?.plan(&Params::of(&sig))
    }

    /// Every message, in order.
    fn errors(args: TokenStream) -> Vec<String> {
        match plan(args) {
            Ok(_) => panic!("expected an error"),
            Err(err) => err.into_iter().map(|err| err.to_string()).collect(),
        }
    }

    fn error(args: TokenStream) -> String {
        let errors = errors(args);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        errors.into_iter().next().unwrap_or_default()
    }

    #[test]
    fn the_smallest_attribute() {
        let plan = plan(quote!(key = "user:{from}", ttl = "30s")).unwrap();
        assert_eq!(plan.keys.len(), 1);
        assert_eq!(plan.ttl.millis(), Some(30_000));
        assert!(matches!(plan.on_busy, OnBusy::Auto));
        assert!(plan.on_lost == OnLost::Abort);
        assert!(matches!(plan.fence, Fence::Off));
        assert!(plan.wait.is_none() && plan.refresh.is_none() && plan.hold_at_least.is_none());
        assert!(plan.guard.is_none() && plan.locker.is_none());
        let krate = &plan.krate;
        assert_eq!(
            quote!(#krate).to_string(),
            quote!(::lockmacro_runtime).to_string()
        );
    }

    #[test]
    fn every_argument() {
        let plan = plan(quote!(
            keys = ["a:{from}", "a:{to}"],
            ttl = "1m",
            on_busy = "skip",
            wait = "10s",
            fair = false,
            refresh = "20s",
            on_lost = "continue",
            fence = "f:{from}",
            guard = lock,
            locker = self.locker,
            hold_at_least = "5m",
            crate = "::app::locks",
        ))
        .unwrap();
        assert_eq!(plan.keys.len(), 2);
        assert!(matches!(plan.on_busy, OnBusy::Skip));
        assert_eq!(plan.wait.and_then(|wait| wait.millis()), Some(10_000));
        assert_eq!(
            plan.refresh.and_then(|refresh| refresh.millis()),
            Some(20_000)
        );
        assert!(plan.on_lost == OnLost::Continue);
        assert!(matches!(plan.fence, Fence::Key(_)));
        assert_eq!(
            plan.guard.map(|guard| guard.to_string()).as_deref(),
            Some("lock")
        );
        assert!(plan.locker.is_some());
        assert_eq!(
            plan.hold_at_least.and_then(|hold| hold.millis()),
            Some(300_000)
        );
        let krate = &plan.krate;
        assert_eq!(quote!(#krate).to_string(), quote!(::app::locks).to_string());
    }

    #[test]
    fn flags_and_trailing_comma() {
        let plan = plan(quote!(
            key = "k",
            ttl = "1s",
            fence,
            wait = "1s",
            fair = false,
        ))
        .unwrap();
        assert!(matches!(plan.fence, Fence::Derived));
    }

    #[test]
    fn unknown_argument_lists_the_valid_ones() {
        assert_eq!(
            error(quote!(key = "k", ttl = "1s", timeout = "5s")),
            "unknown argument `timeout`, expected one of: `key`, `keys`, `ttl`, `on_busy`, `wait`, `fair`, `refresh`, `on_lost`, `fence`, `guard`, `locker`, `hold_at_least`, `max_hold`, `lock_delay`, `replicas`, `permits`, `mode`, `metadata`, `crate`"
        );
        assert_eq!(
            error(quote!(key = "k", ttl = "1s", type = "x")),
            "unknown argument `type`, expected one of: `key`, `keys`, `ttl`, `on_busy`, `wait`, `fair`, `refresh`, `on_lost`, `fence`, `guard`, `locker`, `hold_at_least`, `max_hold`, `lock_delay`, `replicas`, `permits`, `mode`, `metadata`, `crate`"
        );
    }

    #[test]
    fn not_an_argument() {
        assert_eq!(
            error(quote!("k")),
            "expected one of: `key`, `keys`, `ttl`, `on_busy`, `wait`, `fair`, `refresh`, `on_lost`, `fence`, `guard`, `locker`, `hold_at_least`, `max_hold`, `lock_delay`, `replicas`, `permits`, `mode`, `metadata`, `crate`"
        );
        assert_eq!(error(quote!(key "k")), "expected `=`");
        assert_eq!(error(quote!(key = "k" ttl = "1s")), "expected `,`");
    }

    #[test]
    fn repeated_argument() {
        assert_eq!(
            error(quote!(key = "k", ttl = "1s", ttl = "2s")),
            "`ttl` is given more than once: remove this one"
        );
    }

    #[test]
    fn missing_arguments() {
        assert_eq!(
            errors(quote!()),
            [
                "missing `key`: add the name of the lock, as in `key = \"user:{u.id}\"`",
                "missing `ttl`: add how long the lock lives without a refresh, as in `ttl = \"30s\"`",
            ]
        );
    }

    #[test]
    fn key_and_keys() {
        assert_eq!(
            error(quote!(key = "k", keys = ["a"], ttl = "1s")),
            "`key` and `keys` cannot both be given: put every key in `keys = [\"…\", \"…\"]`"
        );
    }

    #[test]
    fn keys_must_be_a_list() {
        assert_eq!(
            error(quote!(keys = "a:{from}", ttl = "1s")),
            "`keys` takes a list, as in `keys = [\"account:{from}\", \"account:{to}\"]`; for one key write `key = \"…\"`"
        );
        assert_eq!(
            error(quote!(keys = [], ttl = "1s")),
            "`keys` is empty: list the keys to lock, as in `keys = [\"account:{from}\", \"account:{to}\"]`"
        );
        assert_eq!(
            errors(quote!(keys = ["", "a:{nope}"], ttl = "1s")),
            [
                "empty key: write the name of the lock, as in `\"user:{u.id}\"`",
                "`nope` in key is not a parameter of `transfer`: use one of `self`, `from`, `to`",
            ]
        );
    }

    #[test]
    fn refresh_must_be_shorter_than_ttl() {
        assert_eq!(
            error(quote!(key = "k", ttl = "30s", refresh = "30s")),
            "`refresh` must be shorter than `ttl` (30s), or the lease can expire before it is renewed: write a shorter period, such as `refresh = \"10s\"`, or remove `refresh` to renew every third of `ttl`"
        );
        assert!(plan(quote!(key = "k", ttl = "30s", refresh = "29s")).is_ok());
        assert!(plan(quote!(key = "k", ttl = self.ttl, refresh = "1h")).is_ok());
    }

    #[test]
    fn fair() {
        assert!(
            plan(quote!(key = "k", ttl = "1s", wait = "1s", fair = true))
                .is_ok_and(|plan| plan.fair)
        );
        assert!(plan(quote!(key = "k", ttl = "1s", wait = "1s", fair)).is_ok_and(|plan| plan.fair));
        assert!(plan(quote!(key = "k", ttl = "1s", fair = false)).is_ok_and(|plan| !plan.fair));
        assert_eq!(
            error(quote!(key = "k", ttl = "1s", fair = true)),
            "`fair = true` needs `wait = \"…\"`: fair waiters keep their place in the queue until then; add `wait`, as in `wait = \"10s\"`"
        );
        assert_eq!(
            error(quote!(
                keys = ["a", "b"],
                ttl = "1s",
                wait = "1s",
                fair = true
            )),
            "`fair = true` takes one `key`: waiters queue per key; remove `fair` to lock several keys"
        );
        assert_eq!(
            error(quote!(key = "k", ttl = "1s", wait = "1s", fair = "yes")),
            "`fair` is `true` or `false`: write `fair = true`"
        );
    }

    #[test]
    fn fence() {
        assert_eq!(
            error(quote!(key = "k", ttl = "1s", fence = true)),
            "`fence` takes no `true` or `false`: write `fence` alone, or `fence = \"key\"` to name the counter"
        );
        assert_eq!(
            error(quote!(key = "k", ttl = "1s", fence = "")),
            "empty key: write the name of the lock, as in `\"user:{u.id}\"`"
        );
    }

    #[test]
    fn guard() {
        assert_eq!(
            error(quote!(key = "k", ttl = "1s", guard = "lock")),
            "`guard` names the variable the guard is bound to: write `guard = lock`, without quotes"
        );
        assert_eq!(
            error(quote!(key = "k", ttl = "1s", guard = self.lock)),
            "`guard` names the variable the guard is bound to: write a variable name, as in `guard = lock`"
        );
    }

    #[test]
    fn crate_path() {
        assert_eq!(
            error(quote!(key = "k", ttl = "1s", crate = "not a path")),
            "`crate = \"not a path\"` is not a path: write the path to the runtime crate, as in `crate = \"::my_app::lockmacro_runtime\"`"
        );
        assert_eq!(
            error(quote!(key = "k", ttl = "1s", crate = ::rt)),
            "`crate` takes a path in a string, as in `crate = \"::my_app::lockmacro_runtime\"`"
        );
    }

    #[test]
    fn every_mistake_at_once() {
        assert_eq!(
            errors(quote!(
                key = "{nope}",
                ttl = "0s",
                on_busy = "maybe",
                tll = "1s",
                wait = 5
            )),
            [
                "unknown argument `tll`, expected one of: `key`, `keys`, `ttl`, `on_busy`, `wait`, `fair`, `refresh`, `on_lost`, `fence`, `guard`, `locker`, `hold_at_least`, `max_hold`, `lock_delay`, `replicas`, `permits`, `mode`, `metadata`, `crate`",
                "`nope` in key is not a parameter of `transfer`: use one of `self`, `from`, `to`",
                "`ttl` cannot be zero: write a positive duration, as in `ttl = \"30s\"`",
                "unknown `on_busy` value \"maybe\": write `on_busy = \"error\"` or `on_busy = \"skip\"`",
                "a number alone has no unit: write `wait = \"5s\"` or `wait = \"5ms\"`",
            ]
        );
    }

    #[test]
    fn replicas_takes_a_whole_number() {
        assert_eq!(plan(quote!(key = "k", ttl = "30s")).unwrap().replicas, 0);
        let plan_of = |args| plan(args).unwrap().replicas;
        assert_eq!(plan_of(quote!(key = "k", ttl = "30s", replicas = 2)), 2);
        assert_eq!(
            error(quote!(key = "k", ttl = "30s", replicas = -1)),
            "`replicas` cannot be negative: write how many replicas must acknowledge the lock, as in `replicas = 1`, or remove `replicas` to wait for none"
        );
        assert_eq!(
            error(quote!(key = "k", ttl = "30s", replicas = "1")),
            "`replicas` takes a number, not a string: write `replicas = 1`"
        );
        assert_eq!(
            error(quote!(key = "k", ttl = "30s", replicas = 1.5)),
            "`replicas` takes a whole number: write how many replicas must acknowledge the lock, as in `replicas = 1`"
        );
        assert_eq!(
            error(quote!(
                key = "k",
                ttl = "30s",
                wait = "5s",
                fair,
                replicas = 1
            )),
            "`replicas` cannot be combined with `fair = true`: a fair waiter is handed the key by a release, which nothing waits for the replicas to receive; remove one of them"
        );
    }

    #[test]
    fn combinations_are_reported_after_the_values_in_the_order_of_the_rules() {
        assert_eq!(
            errors(quote!(
                key = "k",
                ttl = "30s",
                wait = "5s",
                fair,
                replicas = 1,
                mode = "write",
                guard = "lock",
            )),
            [
                "`guard` names the variable the guard is bound to: write `guard = lock`, without quotes",
                "`replicas` cannot be combined with `fair = true`: a fair waiter is handed the key by a release, which nothing waits for the replicas to receive; remove one of them",
                "`mode` cannot be combined with `fair = true`: readers and writers are woken by releases but not queued; remove `fair`",
                "`mode` cannot be combined with `replicas`: remove one of them",
            ]
        );
    }

    #[test]
    fn an_argument_whose_value_is_invalid_asks_for_nothing() {
        assert_eq!(
            error(quote!(key = "k", ttl = "30s", fair = "yes", replicas = 1)),
            "`fair` is `true` or `false`: write `fair = true`"
        );
        assert!(plan(quote!(key = "k", ttl = "30s", fair = false, replicas = 1)).is_ok());
    }
}
