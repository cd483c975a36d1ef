//! Durations such as `ttl = "30s"`: read at expansion time, so a typo is a
//! compile error and nothing is parsed at run time.

use proc_macro2::{Literal, TokenStream};
use quote::quote;
use syn::{Error, Expr, ExprLit, Lit, LitStr, Path};

/// The longest duration a lock accepts: ten years, as the runtime's `MAX_TTL`.
const LONGEST_MS: u128 = 10 * 365 * 24 * 3600 * 1000;

/// A duration argument.
pub(crate) enum Duration {
    /// A literal, in whole milliseconds (the unit the locks are timed in).
    Millis(u64),
    /// Any other expression, taken to be a `Duration`.
    Expr(Expr),
}

impl Duration {
    /// `name = "30s"` or `name = <Duration expression>`.
    pub(crate) fn parse(name: &str, value: Expr) -> syn::Result<Self> {
        match value {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => parse_literal(name, &lit).map(Duration::Millis),
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) => Err(Error::new(
                int.span(),
                format!(
                    "a number alone has no unit: write `{name} = \"{n}s\"` or `{name} = \"{n}ms\"`",
                    n = int.base10_digits()
                ),
            )),
            Expr::Lit(other) => Err(Error::new_spanned(
                other,
                format!(
                    "`{name}` takes a duration: write `{name} = \"30s\"`, or a `Duration` expression"
                ),
            )),
            other => Ok(Duration::Expr(other)),
        }
    }

    /// The length in milliseconds, when it is known at compile time.
    pub(crate) fn millis(&self) -> Option<u64> {
        match self {
            Duration::Millis(ms) => Some(*ms),
            Duration::Expr(_) => None,
        }
    }

    /// A `Duration` expression.
    pub(crate) fn to_tokens(&self, krate: &Path) -> TokenStream {
        match self {
            Duration::Millis(ms) => {
                let ms = Literal::u64_unsuffixed(*ms);
                quote!(#krate::__private::__Duration::from_millis(#ms))
            }
            Duration::Expr(expr) => quote!(#expr),
        }
    }
}

/// Whole milliseconds between 1ms and ten years.
fn parse_literal(name: &str, lit: &LitStr) -> syn::Result<u64> {
    let text = lit.value();
    let fail = |message: String| Err(Error::new(lit.span(), message));
    let duration = match humantime::parse_duration(&text) {
        Ok(duration) => duration,
        Err(humantime::DurationError::UnknownUnit { unit, value, .. }) if unit.is_empty() => {
            return fail(format!(
                "`{name} = {text:?}` has no unit: write `\"{value}s\"` or `\"{value}ms\"`"
            ));
        }
        Err(humantime::DurationError::UnknownUnit { unit, .. }) => {
            return fail(format!(
                "unknown unit `{unit}` in `{name} = {text:?}`: use `ms`, `s`, `m`, `h` or `d`, as in `\"30s\"` or `\"1m30s\"`"
            ));
        }
        Err(humantime::DurationError::Empty) => {
            return fail(format!(
                "`{name}` is empty: write a duration, as in `{name} = \"30s\"`"
            ));
        }
        Err(err) => {
            return fail(format!(
                "invalid duration `{name} = {text:?}` ({err}): write a number and a unit, as in `\"30s\"`, `\"500ms\"` or `\"1m30s\"`"
            ));
        }
    };
    let ms = duration.as_millis();
    if duration.is_zero() {
        let instead = if name == "wait" {
            "remove `wait` to try the lock once".to_owned()
        } else {
            format!("write a positive duration, as in `{name} = \"30s\"`")
        };
        fail(format!("`{name}` cannot be zero: {instead}"))
    } else if ms == 0 {
        fail(format!(
            "`{name} = {text:?}` is shorter than a millisecond, the step locks are timed in: write at least `\"1ms\"`"
        ))
    } else if duration.subsec_nanos() % 1_000_000 != 0 {
        fail(format!(
            "`{name} = {text:?}` is not a whole number of milliseconds, the step locks are timed in: write `\"{}\"` or `\"{}\"`",
            display(ms),
            display(ms + 1),
        ))
    } else if ms > LONGEST_MS {
        fail(format!(
            "`{name} = {text:?}` is longer than ten years, the longest a lock can last: write at most `\"3650days\"`"
        ))
    } else {
        // Ten years in milliseconds fits in a `u64`.
        Ok(u64::try_from(ms).expect("checked against LONGEST_MS"))
    }
}

/// Milliseconds as a duration literal, for messages that suggest one.
pub(crate) fn display(ms: u128) -> String {
    let secs = u64::try_from(ms / 1000).unwrap_or(u64::MAX);
    let nanos = u32::try_from(ms % 1000).expect("below 1000") * 1_000_000;
    humantime::format_duration(std::time::Duration::new(secs, nanos))
        .to_string()
        .replace(' ', "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn millis(name: &str, value: Expr) -> u64 {
        match Duration::parse(name, value) {
            Ok(Duration::Millis(ms)) => ms,
            Ok(Duration::Expr(_)) => panic!("expected a literal"),
            Err(err) => panic!("{err}"),
        }
    }

    fn error(name: &str, value: Expr) -> String {
        match Duration::parse(name, value) {
            Ok(_) => panic!("expected an error"),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn literals_become_milliseconds() {
        assert_eq!(millis("ttl", parse_quote!("30s")), 30_000);
        assert_eq!(millis("ttl", parse_quote!("500ms")), 500);
        assert_eq!(millis("ttl", parse_quote!("1m30s")), 90_000);
        assert_eq!(millis("ttl", parse_quote!("1m 30s")), 90_000);
        assert_eq!(millis("ttl", parse_quote!("2h")), 7_200_000);
        assert_eq!(millis("ttl", parse_quote!("1ms")), 1);
        assert_eq!(millis("ttl", parse_quote!("1000us")), 1);
        assert_eq!(millis("ttl", parse_quote!("3650days")), 315_360_000_000);
    }

    #[test]
    fn expressions_pass_through() {
        let value: Expr = parse_quote!(Duration::from_secs(30));
        assert!(matches!(
            Duration::parse("ttl", value),
            Ok(Duration::Expr(_))
        ));
    }

    #[test]
    fn unknown_unit() {
        assert_eq!(
            error("ttl", parse_quote!("30 parsecs")),
            "unknown unit `parsecs` in `ttl = \"30 parsecs\"`: use `ms`, `s`, `m`, `h` or `d`, as in `\"30s\"` or `\"1m30s\"`"
        );
    }

    #[test]
    fn missing_unit() {
        assert_eq!(
            error("ttl", parse_quote!("30")),
            "`ttl = \"30\"` has no unit: write `\"30s\"` or `\"30ms\"`"
        );
        assert_eq!(
            error("wait", parse_quote!(30)),
            "a number alone has no unit: write `wait = \"30s\"` or `wait = \"30ms\"`"
        );
    }

    #[test]
    fn not_a_duration() {
        assert_eq!(
            error("ttl", parse_quote!(true)),
            "`ttl` takes a duration: write `ttl = \"30s\"`, or a `Duration` expression"
        );
        assert_eq!(
            error("ttl", parse_quote!("")),
            "`ttl` is empty: write a duration, as in `ttl = \"30s\"`"
        );
        assert_eq!(
            error("ttl", parse_quote!("s30")),
            "invalid duration `ttl = \"s30\"` (expected number at 0): write a number and a unit, as in `\"30s\"`, `\"500ms\"` or `\"1m30s\"`"
        );
    }

    #[test]
    fn zero() {
        assert_eq!(
            error("ttl", parse_quote!("0s")),
            "`ttl` cannot be zero: write a positive duration, as in `ttl = \"30s\"`"
        );
        assert_eq!(
            error("wait", parse_quote!("0ms")),
            "`wait` cannot be zero: remove `wait` to try the lock once"
        );
    }

    #[test]
    fn sub_millisecond() {
        assert_eq!(
            error("ttl", parse_quote!("500us")),
            "`ttl = \"500us\"` is shorter than a millisecond, the step locks are timed in: write at least `\"1ms\"`"
        );
        assert_eq!(
            error("refresh", parse_quote!("1500us")),
            "`refresh = \"1500us\"` is not a whole number of milliseconds, the step locks are timed in: write `\"1ms\"` or `\"2ms\"`"
        );
    }

    #[test]
    fn longer_than_ten_years() {
        assert_eq!(
            error("ttl", parse_quote!("11y")),
            "`ttl = \"11y\"` is longer than ten years, the longest a lock can last: write at most `\"3650days\"`"
        );
    }

    #[test]
    fn display_round_trips() {
        assert_eq!(display(10_000), "10s");
        assert_eq!(display(3_333), "3s333ms");
        assert_eq!(display(90_000), "1m30s");
    }
}
