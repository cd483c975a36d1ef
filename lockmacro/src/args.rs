//! The attribute's arguments: parsed as written (with their spans), then
//! validated once into a [`Plan`] that code generation cannot get wrong.

use proc_macro2::{Span, TokenTree};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Error, Expr, ExprLit, Ident, Lit, LitBool, LitStr, Path, Token};

use crate::duration::Duration;
use crate::errors::Errors;
use crate::key::{Key, Params};
use crate::policy::{OnBusy, OnLost};

/// Every argument, in the order error messages list them; a flag may also
/// stand alone (`fence`, `fair`).
const ARGUMENTS: [(&str, Form); 17] = [
    ("key", Form::Value),
    ("keys", Form::Value),
    ("ttl", Form::Value),
    ("on_busy", Form::Value),
    ("wait", Form::Value),
    ("fair", Form::Flag),
    ("refresh", Form::Value),
    ("on_lost", Form::Value),
    ("fence", Form::Flag),
    ("guard", Form::Value),
    ("locker", Form::Value),
    ("hold_at_least", Form::Value),
    ("max_hold", Form::Value),
    ("replicas", Form::Value),
    ("permits", Form::Value),
    ("mode", Form::Value),
    ("crate", Form::Value),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `name = value`.
    Value,
    /// `name`, or `name = value`.
    Flag,
}

/// One argument as written.
struct Arg<T> {
    /// The argument's name: where errors about the argument as a whole go.
    name: Span,
    /// Its place in the list, so that a conflict is reported on the later one.
    position: usize,
    value: T,
}

/// The arguments as written, before validation.
#[derive(Default)]
pub(crate) struct Args {
    /// By the argument's index in [`ARGUMENTS`]; the value is there unless
    /// the argument is a flag written alone.
    given: [Option<Arg<Option<Expr>>>; ARGUMENTS.len()],
    /// Repeated and unknown arguments do not stop the parse, so that they
    /// are reported together with every other mistake.
    errors: Errors,
}

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
    /// `0` when not given.
    pub(crate) replicas: u32,
    /// `Some(n)`: one of `n` permits (a semaphore) instead of the whole key.
    pub(crate) permits: Option<u32>,
    /// A read or the write of a read-write lock instead of the whole key.
    pub(crate) mode: Option<Mode>,
    pub(crate) krate: Path,
}

/// `fence`, `fence = "key"`, or nothing.
pub(crate) enum Fence {
    Off,
    Derived,
    Key(Key),
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut args = Args::default();
        let mut position = 0;
        while !input.is_empty() {
            position += 1;
            // `parse_any` so that a keyword such as `crate` or `type` is an
            // argument name too.
            let Ok(ident) = input.fork().call(Ident::parse_any) else {
                return Err(input.error(expected_arguments()));
            };
            let name = ident.to_string();
            match ARGUMENTS.iter().position(|&(known, _)| known == name) {
                Some(index) => {
                    input.call(Ident::parse_any)?;
                    let (name, form) = ARGUMENTS[index];
                    let value = if form == Form::Flag && !input.peek(Token![=]) {
                        None
                    } else {
                        input.parse::<Token![=]>()?;
                        Some(input.parse()?)
                    };
                    let arg = Arg {
                        name: ident.span(),
                        position,
                        value,
                    };
                    set_once(&mut args.given[index], name, arg, &mut args.errors);
                }
                None => {
                    // The rest of the list is still checked, so that this
                    // mistake is reported with the others.
                    args.errors.push(Error::new(
                        ident.span(),
                        format!("unknown argument `{ident}`, {}", expected_arguments()),
                    ));
                    skip_argument(input)?;
                }
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(args)
    }
}

/// "expected one of: `key`, `keys`, …"
fn expected_arguments() -> String {
    let names: Vec<String> = ARGUMENTS
        .iter()
        .map(|(name, _)| format!("`{name}`"))
        .collect();
    format!("expected one of: {}", names.join(", "))
}

impl Args {
    /// Takes the argument `name` out, as written.
    fn take(&mut self, name: &str) -> Option<Arg<Option<Expr>>> {
        let index = ARGUMENTS
            .iter()
            .position(|&(known, _)| known == name)
            .expect("a name from ARGUMENTS");
        self.given[index].take()
    }

    /// Takes the argument `name = value` out.
    fn take_value(&mut self, name: &str) -> Option<Arg<Expr>> {
        self.take(name).map(|arg| Arg {
            name: arg.name,
            position: arg.position,
            value: arg
                .value
                .expect("`name = value` arguments are parsed with their value"),
        })
    }
}

/// The one place that fills an argument's slot, so that no argument can
/// check the wrong slot for a repeat.
fn set_once<T>(slot: &mut Option<Arg<T>>, name: &str, arg: Arg<T>, errors: &mut Errors) {
    if slot.is_some() {
        errors.push(Error::new(
            arg.name,
            format!("`{name}` is given more than once: remove this one"),
        ));
    } else {
        *slot = Some(arg);
    }
}

/// Moves past an argument up to the next top-level comma.
fn skip_argument(input: ParseStream) -> syn::Result<()> {
    input.step(|cursor| {
        let mut rest = *cursor;
        while let Some((token, next)) = rest.token_tree() {
            if matches!(&token, TokenTree::Punct(punct) if punct.as_char() == ',') {
                break;
            }
            rest = next;
        }
        Ok(((), rest))
    })
}

impl Args {
    /// Checks every argument against the others and against the function,
    /// reporting all the mistakes at once.
    pub(crate) fn plan(mut self, params: &Params) -> syn::Result<Plan> {
        let mut errors = std::mem::take(&mut self.errors);

        let keys = match (self.take_value("key"), self.take_value("keys")) {
            (Some(key), Some(keys)) => {
                let later = if key.position > keys.position {
                    key.name
                } else {
                    keys.name
                };
                errors.push(Error::new(
                    later,
                    "`key` and `keys` cannot both be given: put every key in `keys = [\"…\", \"…\"]`",
                ));
                None
            }
            (Some(key), None) => errors
                .ok(Key::parse(key.value, params))
                .map(|key| vec![key]),
            (None, Some(keys)) => errors.ok(parse_keys(keys, params)),
            (None, None) => {
                errors.push(Error::new(
                    Span::call_site(),
                    "missing `key`: add the name of the lock, as in `key = \"user:{u.id}\"`",
                ));
                None
            }
        };

        let ttl = match self.take_value("ttl") {
            Some(ttl) => errors.ok(Duration::parse("ttl", ttl.value)),
            None => {
                errors.push(Error::new(
                    Span::call_site(),
                    "missing `ttl`: add how long the lock lives without a refresh, as in `ttl = \"30s\"`",
                ));
                None
            }
        };

        let on_busy = match self.take_value("on_busy") {
            Some(arg) => errors.ok(OnBusy::parse(&arg.value)),
            None => Some(OnBusy::Auto),
        };
        let on_lost = match self.take_value("on_lost") {
            Some(arg) => errors.ok(OnLost::parse(&arg.value)),
            None => Some(OnLost::Abort),
        };

        let wait = self.take_value("wait");
        let wait_given = wait.is_some();
        let wait = optional_duration(&mut errors, "wait", wait);
        let refresh = match self.take_value("refresh") {
            Some(arg) => {
                let span = arg.value.span();
                let refresh = errors.ok(Duration::parse("refresh", arg.value));
                if let (Some(refresh), Some(ttl)) = (&refresh, &ttl) {
                    errors.check(check_refresh(refresh, ttl, span));
                }
                refresh.map(Some)
            }
            None => Some(None),
        };
        let hold_at_least = optional_duration(
            &mut errors,
            "hold_at_least",
            self.take_value("hold_at_least"),
        );
        let max_hold = self.take_value("max_hold");
        let max_hold_span = max_hold.as_ref().map(|arg| arg.value.span());
        let max_hold = optional_duration(&mut errors, "max_hold", max_hold);
        if let (Some(span), Some(Some(max_hold)), Some(Some(hold_at_least))) =
            (max_hold_span, &max_hold, &hold_at_least)
        {
            errors.check(check_max_hold(max_hold, hold_at_least, span));
        }

        let fair = match self.take("fair") {
            Some(arg) => {
                let name = arg.name;
                let fair = errors.ok(parse_fair(arg)).unwrap_or(false);
                if fair && !wait_given {
                    errors.push(Error::new(
                        name,
                        "`fair = true` needs `wait = \"…\"`: fair waiters keep their place in the queue until then; add `wait`, as in `wait = \"10s\"`",
                    ));
                }
                if fair && keys.as_ref().is_some_and(|keys| keys.len() > 1) {
                    errors.push(Error::new(
                        name,
                        "`fair = true` takes one `key`: waiters queue per key; remove `fair` to lock several keys",
                    ));
                }
                fair
            }
            None => false,
        };

        let fence = match self.take("fence") {
            None => Some(Fence::Off),
            Some(Arg { value: None, .. }) => Some(Fence::Derived),
            Some(Arg {
                value: Some(value), ..
            }) => errors.ok(parse_fence(value, params)),
        };

        let guard = match self.take_value("guard") {
            Some(arg) => errors.ok(parse_guard(arg.value)).map(Some),
            None => Some(None),
        };

        let replicas = match self.take_value("replicas") {
            Some(arg) => {
                let name = arg.name;
                let replicas = errors.ok(parse_replicas(arg.value)).unwrap_or(0);
                if replicas > 0 && fair {
                    errors.push(Error::new(
                        name,
                        "`replicas` cannot be combined with `fair = true`: a fair waiter is handed the key by a release, which nothing waits for the replicas to receive; remove one of them",
                    ));
                }
                replicas
            }
            None => 0,
        };

        let permits = match self.take_value("permits") {
            Some(arg) => {
                let name = arg.name;
                let permits = errors.ok(parse_permits(arg.value));
                if keys.as_ref().is_some_and(|keys| keys.len() > 1) {
                    errors.push(Error::new(
                        name,
                        "`permits` counts the holders of one key: lock one `key = \"…\"` with `permits`, or remove `permits` to lock several keys",
                    ));
                }
                if replicas > 0 {
                    errors.push(Error::new(
                        name,
                        "`permits` cannot be combined with `replicas`: remove one of them",
                    ));
                }
                permits.map(Some)
            }
            None => Some(None),
        };

        let mode = match self.take_value("mode") {
            Some(arg) => {
                let name = arg.name;
                let mode = errors.ok(parse_mode(&arg.value));
                if keys.as_ref().is_some_and(|keys| keys.len() > 1) {
                    errors.push(Error::new(
                        name,
                        "`mode` reads or writes one key: lock one `key = \"…\"` with `mode`, or remove `mode` to lock several keys",
                    ));
                }
                if permits.as_ref().is_some_and(Option::is_some) {
                    errors.push(Error::new(
                        name,
                        "`mode` cannot be combined with `permits`: a key is a read-write lock or a semaphore; remove one of them",
                    ));
                }
                if fair {
                    errors.push(Error::new(
                        name,
                        "`mode` cannot be combined with `fair = true`: readers and writers are woken by releases but not queued; remove `fair`",
                    ));
                }
                if replicas > 0 {
                    errors.push(Error::new(
                        name,
                        "`mode` cannot be combined with `replicas`: remove one of them",
                    ));
                }
                mode.map(Some)
            }
            None => Some(None),
        };

        let krate = match self.take_value("crate") {
            Some(arg) => errors.ok(parse_crate(&arg.value)),
            None => Some(syn::parse_quote!(::lockmacro_runtime)),
        };

        let locker = self.take_value("locker").map(|arg| arg.value);
        // Every argument that failed validation recorded an error: `finish`
        // returns it, or every part is there.
        let plan = (|| {
            Some(Plan {
                keys: keys?,
                ttl: ttl?,
                on_busy: on_busy?,
                wait: wait?,
                fair,
                refresh: refresh?,
                on_lost: on_lost?,
                fence: fence?,
                guard: guard?,
                locker,
                hold_at_least: hold_at_least?,
                max_hold: max_hold?,
                replicas,
                permits: permits?,
                mode: mode?,
                krate: krate?,
            })
        })();
        errors.finish()?;
        Ok(plan.expect("an argument failed validation without an error"))
    }
}

/// `Some(None)` when the argument is absent, `None` when it is invalid.
fn optional_duration(
    errors: &mut Errors,
    name: &str,
    arg: Option<Arg<Expr>>,
) -> Option<Option<Duration>> {
    match arg {
        Some(arg) => errors.ok(Duration::parse(name, arg.value)).map(Some),
        None => Some(None),
    }
}

fn parse_keys(keys: Arg<Expr>, params: &Params) -> syn::Result<Vec<Key>> {
    let Expr::Array(array) = keys.value else {
        return Err(Error::new_spanned(
            keys.value,
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

fn check_refresh(refresh: &Duration, ttl: &Duration, span: Span) -> syn::Result<()> {
    match (refresh.millis(), ttl.millis()) {
        (Some(refresh), Some(ttl)) if refresh >= ttl => Err(Error::new(
            span,
            format!(
                "`refresh` must be shorter than `ttl` ({}), or the lease can expire before it is renewed: write a shorter period, such as `refresh = \"{}\"`, or remove `refresh` to renew every third of `ttl`",
                crate::duration::display(ttl.into()),
                crate::duration::display((ttl / 3).max(1).into()),
            ),
        )),
        _ => Ok(()),
    }
}

fn check_max_hold(max_hold: &Duration, hold_at_least: &Duration, span: Span) -> syn::Result<()> {
    match (max_hold.millis(), hold_at_least.millis()) {
        (Some(max_hold), Some(hold)) if max_hold < hold => Err(Error::new(
            span,
            format!(
                "`max_hold` cannot be shorter than `hold_at_least` ({}): the lease would be lost before the key may be let go; write `max_hold = \"{}\"` or longer, or remove one of them",
                crate::duration::display(hold.into()),
                crate::duration::display(hold.into()),
            ),
        )),
        _ => Ok(()),
    }
}

fn parse_fair(arg: Arg<Option<Expr>>) -> syn::Result<bool> {
    match arg.value {
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
            "unknown argument `timeout`, expected one of: `key`, `keys`, `ttl`, `on_busy`, `wait`, `fair`, `refresh`, `on_lost`, `fence`, `guard`, `locker`, `hold_at_least`, `max_hold`, `replicas`, `permits`, `mode`, `crate`"
        );
        assert_eq!(
            error(quote!(key = "k", ttl = "1s", type = "x")),
            "unknown argument `type`, expected one of: `key`, `keys`, `ttl`, `on_busy`, `wait`, `fair`, `refresh`, `on_lost`, `fence`, `guard`, `locker`, `hold_at_least`, `max_hold`, `replicas`, `permits`, `mode`, `crate`"
        );
    }

    #[test]
    fn not_an_argument() {
        assert_eq!(
            error(quote!("k")),
            "expected one of: `key`, `keys`, `ttl`, `on_busy`, `wait`, `fair`, `refresh`, `on_lost`, `fence`, `guard`, `locker`, `hold_at_least`, `max_hold`, `replicas`, `permits`, `mode`, `crate`"
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
                "unknown argument `tll`, expected one of: `key`, `keys`, `ttl`, `on_busy`, `wait`, `fair`, `refresh`, `on_lost`, `fence`, `guard`, `locker`, `hold_at_least`, `max_hold`, `replicas`, `permits`, `mode`, `crate`",
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
}
