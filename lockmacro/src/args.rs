//! The attribute's arguments as written: which argument, where, and its
//! value as an expression. What each value means is `values.rs`'s, how the
//! arguments go together `valid.rs`'s.

use proc_macro2::{Span, TokenTree};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Error, Expr, Ident, Token};

use crate::errors::Errors;

/// Every argument, in the order error messages list them; a flag may also
/// stand alone (`fence`, `fair`).
const ARGUMENTS: [(&str, Form); 19] = [
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
    ("lock_delay", Form::Value),
    ("replicas", Form::Value),
    ("permits", Form::Value),
    ("mode", Form::Value),
    ("metadata", Form::Value),
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
pub(crate) struct Arg<T> {
    /// The argument's name: where errors about the argument as a whole go.
    pub(crate) name: Span,
    /// Its place in the list, so that a conflict is reported on the later one.
    pub(crate) position: usize,
    pub(crate) value: T,
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
    /// The repeated and unknown arguments, to report before anything else.
    pub(crate) fn take_errors(&mut self) -> Errors {
        std::mem::take(&mut self.errors)
    }

    /// Takes the argument `name` out, as written.
    pub(crate) fn take(&mut self, name: &str) -> Option<Arg<Option<Expr>>> {
        let index = ARGUMENTS
            .iter()
            .position(|&(known, _)| known == name)
            .expect("a name from ARGUMENTS");
        self.given[index].take()
    }

    /// Takes the argument `name = value` out.
    pub(crate) fn take_value(&mut self, name: &str) -> Option<Arg<Expr>> {
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
