//! Each argument's value, parsed by itself: what the value alone must be.
//! Errors land on the value; how the arguments go together is
//! `valid.rs`'s.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Error, Expr, ExprLit, Ident, Lit, LitBool, LitStr, Path};

use crate::args::{Arg, Args};
use crate::duration::Duration;
use crate::errors::Errors;
use crate::key::{Key, Params};
use crate::policy::{OnBusy, OnLost};

/// One argument as given, its value parsed.
pub(crate) struct Given<T> {
    /// The argument's name: where errors about the argument as a whole go.
    pub(crate) name: Span,
    /// Its place in the list, so that a conflict is reported on the later one.
    pub(crate) position: usize,
    /// The value as written (the name, for a flag written alone).
    pub(crate) span: Span,
    /// `None` when the value is invalid: its error is recorded.
    pub(crate) value: Option<T>,
}

/// Every argument given (`None`: not given), each value parsed alone.
pub(crate) struct Values {
    pub(crate) key: Option<Given<Key>>,
    pub(crate) keys: Option<Given<Vec<Key>>>,
    pub(crate) ttl: Option<Given<Duration>>,
    pub(crate) on_busy: Option<Given<OnBusy>>,
    pub(crate) on_lost: Option<Given<OnLost>>,
    pub(crate) wait: Option<Given<Duration>>,
    pub(crate) refresh: Option<Given<Duration>>,
    pub(crate) hold_at_least: Option<Given<Duration>>,
    pub(crate) max_hold: Option<Given<Duration>>,
    pub(crate) lock_delay: Option<Given<Duration>>,
    pub(crate) fair: Option<Given<bool>>,
    pub(crate) fence: Option<Given<Fence>>,
    pub(crate) guard: Option<Given<Ident>>,
    pub(crate) replicas: Option<Given<u32>>,
    pub(crate) permits: Option<Given<u32>>,
    pub(crate) mode: Option<Given<Mode>>,
    pub(crate) metadata: Option<Given<Key>>,
    pub(crate) krate: Option<Given<Path>>,
    /// Any expression: the compiler checks it where it is used.
    pub(crate) locker: Option<Expr>,
}

/// `fence`, `fence = "key"`, or nothing.
pub(crate) enum Fence {
    Off,
    Derived,
    Key(Key),
}

impl Values {
    /// Parses every value given, recording each mistake in `errors`: first
    /// the repeated and unknown arguments, then each argument's in the
    /// order of [`Values`], a missing `key` or `ttl` at its place.
    pub(crate) fn parse(mut args: Args, params: &Params, errors: &mut Errors) -> Self {
        *errors = args.take_errors();
        let key = args
            .take_value("key")
            .map(|arg| given(arg, errors, |value| Key::parse(value, params)));
        let keys = args
            .take_value("keys")
            .map(|arg| given(arg, errors, |value| parse_keys(value, params)));
        if key.is_none() && keys.is_none() {
            errors.push(Error::new(
                Span::call_site(),
                "missing `key`: add the name of the lock, as in `key = \"user:{u.id}\"`",
            ));
        }
        let ttl = duration(&mut args, errors, "ttl");
        if ttl.is_none() {
            errors.push(Error::new(
                Span::call_site(),
                "missing `ttl`: add how long the lock lives without a refresh, as in `ttl = \"30s\"`",
            ));
        }
        Values {
            key,
            keys,
            ttl,
            on_busy: args
                .take_value("on_busy")
                .map(|arg| given(arg, errors, |value| OnBusy::parse(&value))),
            on_lost: args
                .take_value("on_lost")
                .map(|arg| given(arg, errors, |value| OnLost::parse(&value))),
            wait: duration(&mut args, errors, "wait"),
            refresh: duration(&mut args, errors, "refresh"),
            hold_at_least: duration(&mut args, errors, "hold_at_least"),
            max_hold: duration(&mut args, errors, "max_hold"),
            lock_delay: duration(&mut args, errors, "lock_delay"),
            fair: args.take("fair").map(|arg| flag(arg, errors, parse_fair)),
            fence: args.take("fence").map(|arg| {
                flag(arg, errors, |value| match value {
                    None => Ok(Fence::Derived),
                    Some(value) => parse_fence(value, params),
                })
            }),
            guard: args
                .take_value("guard")
                .map(|arg| given(arg, errors, parse_guard)),
            replicas: args
                .take_value("replicas")
                .map(|arg| given(arg, errors, parse_replicas)),
            permits: args
                .take_value("permits")
                .map(|arg| given(arg, errors, parse_permits)),
            mode: args
                .take_value("mode")
                .map(|arg| given(arg, errors, |value| parse_mode(&value))),
            metadata: args
                .take_value("metadata")
                .map(|arg| given(arg, errors, |value| parse_metadata(value, params))),
            krate: args
                .take_value("crate")
                .map(|arg| given(arg, errors, |value| parse_crate(&value))),
            locker: args.take_value("locker").map(|arg| arg.value),
        }
    }
}

/// `name = value`, its value parsed by `parse`.
fn given<T>(
    arg: Arg<Expr>,
    errors: &mut Errors,
    parse: impl FnOnce(Expr) -> syn::Result<T>,
) -> Given<T> {
    Given {
        name: arg.name,
        position: arg.position,
        span: arg.value.span(),
        value: errors.ok(parse(arg.value)),
    }
}

/// A flag, alone or with a value, parsed by `parse`.
fn flag<T>(
    arg: Arg<Option<Expr>>,
    errors: &mut Errors,
    parse: impl FnOnce(Option<Expr>) -> syn::Result<T>,
) -> Given<T> {
    Given {
        name: arg.name,
        position: arg.position,
        span: arg.value.as_ref().map_or(arg.name, Spanned::span),
        value: errors.ok(parse(arg.value)),
    }
}

/// The duration argument `name`, if given.
fn duration(args: &mut Args, errors: &mut Errors, name: &str) -> Option<Given<Duration>> {
    args.take_value(name)
        .map(|arg| given(arg, errors, |value| Duration::parse(name, value)))
}

fn parse_keys(value: Expr, params: &Params) -> syn::Result<Vec<Key>> {
    let Expr::Array(array) = value else {
        return Err(Error::new_spanned(
            value,
            "`keys` takes a list, as in `keys = [\"account:{from}\", \"account:{to}\"]`; for one key write `key = \"…\"`",
        ));
    };
    if array.elems.is_empty() {
        return Err(Error::new_spanned(
            array,
            "`keys` is empty: list the keys to lock, as in `keys = [\"account:{from}\", \"account:{to}\"]`",
        ));
    }
    let mut errors = Errors::default();
    let keys: Vec<Key> = array
        .elems
        .into_iter()
        .filter_map(|elem| errors.ok(Key::parse(elem, params)))
        .collect();
    errors.finish()?;
    Ok(keys)
}

fn parse_fair(value: Option<Expr>) -> syn::Result<bool> {
    match value {
        None => Ok(true),
        Some(Expr::Lit(ExprLit {
            lit: Lit::Bool(LitBool { value, .. }),
            ..
        })) => Ok(value),
        Some(other) => Err(Error::new_spanned(
            other,
            "`fair` is `true` or `false`: write `fair = true`",
        )),
    }
}

fn parse_fence(value: Expr, params: &Params) -> syn::Result<Fence> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Bool(_), ..
    }) = value
    {
        return Err(Error::new_spanned(
            value,
            "`fence` takes no `true` or `false`: write `fence` alone, or `fence = \"key\"` to name the counter",
        ));
    }
    Key::parse(value, params).map(Fence::Key)
}

/// A read or the write of a read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Read,
    Write,
}

fn parse_mode(value: &Expr) -> syn::Result<Mode> {
    const WRITE: &str =
        "write `mode = \"read\"` (many readers at once) or `mode = \"write\"` (one writer, alone)";
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => match lit.value().as_str() {
            "read" => Ok(Mode::Read),
            "write" => Ok(Mode::Write),
            other => Err(Error::new(
                lit.span(),
                format!("unknown `mode` \"{other}\": {WRITE}"),
            )),
        },
        Expr::Path(path) if path.path.is_ident("read") || path.path.is_ident("write") => {
            let word = if path.path.is_ident("read") {
                "read"
            } else {
                "write"
            };
            Err(Error::new_spanned(
                value,
                format!("`mode` takes a string: write `mode = \"{word}\"`"),
            ))
        }
        _ => Err(Error::new_spanned(
            value,
            format!("`mode` takes a string: {WRITE}"),
        )),
    }
}

fn parse_permits(value: Expr) -> syn::Result<u32> {
    const WRITE: &str = "write how many bodies may run at once per key, as in `permits = 5`";
    match &value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) if int.suffix().is_empty() => match int.base10_parse::<u32>() {
            Ok(0) => Err(Error::new(
                int.span(),
                format!("`permits = 0` could never be obtained: {WRITE}, at least 1"),
            )),
            Ok(permits) => Ok(permits),
            Err(_) => Err(Error::new(
                int.span(),
                format!(
                    "`permits = {int}` is too many: {WRITE}, at most {}",
                    u32::MAX
                ),
            )),
        },
        Expr::Unary(syn::ExprUnary {
            op: syn::UnOp::Neg(_),
            ..
        }) => Err(Error::new_spanned(
            value,
            format!("`permits` cannot be negative: {WRITE}"),
        )),
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) if lit.value().trim().parse::<u32>().is_ok() => Err(Error::new(
            lit.span(),
            format!(
                "`permits` takes a number, not a string: write `permits = {}`",
                lit.value().trim()
            ),
        )),
        _ => Err(Error::new_spanned(
            value,
            format!("`permits` takes a whole number: {WRITE}"),
        )),
    }
}

fn parse_replicas(value: Expr) -> syn::Result<u32> {
    const WRITE: &str = "write how many replicas must acknowledge the lock, as in `replicas = 1`";
    match &value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) if int.suffix().is_empty() => int.base10_parse::<u32>().map_err(|_| {
            Error::new(
                int.span(),
                format!("`replicas = {int}` is more replicas than any server has: {WRITE}"),
            )
        }),
        Expr::Unary(syn::ExprUnary {
            op: syn::UnOp::Neg(_),
            ..
        }) => Err(Error::new_spanned(
            value,
            format!(
                "`replicas` cannot be negative: {WRITE}, or remove `replicas` to wait for none"
            ),
        )),
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) if lit.value().trim().parse::<u32>().is_ok() => Err(Error::new(
            lit.span(),
            format!(
                "`replicas` takes a number, not a string: write `replicas = {}`",
                lit.value().trim()
            ),
        )),
        _ => Err(Error::new_spanned(
            value,
            format!("`replicas` takes a whole number: {WRITE}"),
        )),
    }
}

fn parse_guard(value: Expr) -> syn::Result<Ident> {
    if let Expr::Path(path) = &value
        && let Some(ident) = path.path.get_ident()
    {
        return Ok(ident.clone());
    }
    let instead = match &value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) if syn::parse_str::<Ident>(&lit.value()).is_ok() => {
            format!("write `guard = {}`, without quotes", lit.value())
        }
        _ => "write a variable name, as in `guard = lock`".to_owned(),
    };
    Err(Error::new_spanned(
        value,
        format!("`guard` names the variable the guard is bound to: {instead}"),
    ))
}

fn parse_crate(value: &Expr) -> syn::Result<Path> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => parse_crate_path(lit),
        other => Err(Error::new_spanned(
            other,
            "`crate` takes a path in a string, as in `crate = \"::my_app::lockmacro_runtime\"`",
        )),
    }
}

fn parse_crate_path(lit: &LitStr) -> syn::Result<Path> {
    lit.parse_with(Path::parse_mod_style).map_err(|_| {
        Error::new(
            lit.span(),
            format!(
                "`crate = {:?}` is not a path: write the path to the runtime crate, as in `crate = \"::my_app::lockmacro_runtime\"`",
                lit.value()
            ),
        )
    })
}

/// `metadata = "billing-{u.id}"`: a template as for a key, or any `Display`
/// expression.
fn parse_metadata(value: Expr, params: &Params) -> syn::Result<Key> {
    match &value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) if lit.value().is_empty() => Err(Error::new(
            lit.span(),
            "empty `metadata`: write what a holder records, as in `metadata = \"billing-{u.id}\"`, \
             or leave it out for the host name and process id",
        )),
        Expr::Lit(other) if !matches!(other.lit, Lit::Str(_)) => Err(Error::new_spanned(
            other,
            "`metadata` is text: write it as a string, as in `metadata = \"billing-{u.id}\"`",
        )),
        _ => Key::parse(value, params),
    }
}
