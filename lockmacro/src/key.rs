//! Key templates such as `"user:{u.id}"`, scanned like a format string at
//! expansion time.
//!
//! `{expr}` and `<expr>` are the same placeholder (the second is how the
//! design card wrote it); a doubled bracket is the bracket itself. Each
//! placeholder is parsed into an expression carrying the literal's span, so
//! that rustc reports type errors in it on the key the user wrote.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Error, Expr, ExprLit, FnArg, Ident, Lit, LitStr, Pat, Path, Signature};

/// A key, as `key = …`, in `keys = […]` or as `fence = …`.
pub(crate) enum Key {
    Template(Template),
    /// A non-literal expression, rendered with `Display`.
    Expr(Expr),
}

/// A key literal, split into text and placeholders.
pub(crate) struct Template {
    /// Where the literal is, for the generated format string.
    span: Span,
    pieces: Vec<Piece>,
}

enum Piece {
    Text(String),
    Placeholder(Expr),
}

/// What a placeholder may read: the function's parameters.
pub(crate) struct Params {
    function: Ident,
    receiver: bool,
    names: Vec<Ident>,
}

impl Params {
    pub(crate) fn of(sig: &Signature) -> Self {
        let mut params = Params {
            function: sig.ident.clone(),
            receiver: false,
            names: Vec::new(),
        };
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(_) => params.receiver = true,
                FnArg::Typed(typed) => bindings(&typed.pat, &mut params.names),
            }
        }
        params
    }

    /// Whether the function takes `self`.
    pub(crate) fn receiver(&self) -> bool {
        self.receiver
    }

    /// The names its parameters bind, in order.
    pub(crate) fn names(&self) -> &[Ident] {
        &self.names
    }

    /// What a message suggests instead of a name that is not a parameter.
    fn suggestion(&self) -> String {
        let receiver = self.receiver.then(|| "`self`".to_owned());
        let names = self.names.iter().map(|name| format!("`{name}`"));
        let all: Vec<String> = receiver.into_iter().chain(names).collect();
        match all.as_slice() {
            [] => format!(
                "`{}` takes no arguments, so the key can only be text",
                self.function
            ),
            [one] => format!("use {one}"),
            all => format!("use one of {}", all.join(", ")),
        }
    }
}

/// The names a parameter pattern binds: `u` in `u: &User`, `a` and `b` in
/// `(a, b): (u32, u32)`.
fn bindings(pat: &Pat, names: &mut Vec<Ident>) {
    match pat {
        Pat::Ident(ident) => {
            names.push(ident.ident.clone());
            if let Some((_, sub)) = &ident.subpat {
                bindings(sub, names);
            }
        }
        Pat::Or(or) => or.cases.iter().for_each(|case| bindings(case, names)),
        Pat::Paren(paren) => bindings(&paren.pat, names),
        Pat::Reference(reference) => bindings(&reference.pat, names),
        Pat::Slice(slice) => slice.elems.iter().for_each(|elem| bindings(elem, names)),
        Pat::Struct(strukt) => strukt
            .fields
            .iter()
            .for_each(|field| bindings(&field.pat, names)),
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|elem| bindings(elem, names)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|elem| bindings(elem, names)),
        Pat::Type(typed) => bindings(&typed.pat, names),
        _ => {}
    }
}

impl Key {
    /// A template literal, or any other expression.
    pub(crate) fn parse(value: Expr, params: &Params) -> syn::Result<Self> {
        match value {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => Template::parse(&lit, params).map(Key::Template),
            Expr::Lit(other) => Err(Error::new_spanned(
                other,
                "a key is text: write it as a string, as in `\"user:{u.id}\"`",
            )),
            other => Ok(Key::Expr(other)),
        }
    }

    /// A `String` expression.
    pub(crate) fn to_tokens(&self, krate: &Path) -> TokenStream {
        match self {
            // Spanned at the argument: a value that cannot be a key is
            // reported there, not on the whole attribute.
            Key::Expr(expr) => quote_spanned!(expr.span()=> #krate::__private::key(&(#expr))),
            Key::Template(template) => template.to_tokens(krate),
        }
    }
}

impl Template {
    fn parse(lit: &LitStr, params: &Params) -> syn::Result<Self> {
        let text = lit.value();
        if text.is_empty() {
            return Err(Error::new(
                lit.span(),
                "empty key: write the name of the lock, as in `\"user:{u.id}\"`",
            ));
        }
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find(['{', '}', '<', '>']) {
            literal.push_str(&rest[..at]);
            let bracket = rest[at..].chars().next().expect("found above");
            let after = &rest[at + 1..];
            if let Some(after) = after.strip_prefix(bracket) {
                literal.push(bracket);
                rest = after;
                continue;
            }
            let close = match bracket {
                '{' => '}',
                '<' => '>',
                _ => {
                    return Err(Error::new(
                        lit.span(),
                        format!(
                            "unmatched `{bracket}` in key: write `{bracket}{bracket}` for a literal `{bracket}`"
                        ),
                    ));
                }
            };
            let Some(end) = placeholder_end(after, bracket) else {
                return Err(Error::new(
                    lit.span(),
                    format!(
                        "unclosed placeholder `{bracket}{after}` in key: add `{close}`, or write `{bracket}{bracket}` for a literal `{bracket}`"
                    ),
                ));
            };
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            let source = &after[..end];
            let expr = placeholder(lit, bracket, source, close)?;
            check_root(&expr, lit.span(), bracket, source, close, params)?;
            pieces.push(Piece::Placeholder(expr));
            rest = &after[end + close.len_utf8()..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template {
            span: lit.span(),
            pieces,
        })
    }

    fn to_tokens(&self, krate: &Path) -> TokenStream {
        match self.pieces.as_slice() {
            [Piece::Text(text)] => {
                let text = LitStr::new(text, self.span);
                quote!(#krate::__private::String::from(#text))
            }
            [Piece::Placeholder(expr)] => quote!(#krate::__private::key(&(#expr))),
            pieces => {
                let mut format = String::new();
                let mut args = Vec::new();
                for piece in pieces {
                    match piece {
                        Piece::Text(text) => {
                            format.push_str(&text.replace('{', "{{").replace('}', "}}"));
                        }
                        Piece::Placeholder(expr) => {
                            format.push_str("{}");
                            args.push(expr);
                        }
                    }
                }
                let format = LitStr::new(&format, self.span);
                quote!(#krate::__private::format!(#format, #(#args),*))
            }
        }
    }
}

/// Where the placeholder opened by `open` closes in `text`, which starts
/// just after the opening bracket. Brackets of the expression itself, and
/// string literals in it, are skipped.
fn placeholder_end(text: &str, open: char) -> Option<usize> {
    let mut depth = 0usize;
    let mut previous = ' ';
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => {
                while let Some((_, c)) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '(' | '[' | '{' => depth += 1,
            '<' if open == '<' => depth += 1,
            // `->` and `=>` are no brackets.
            '>' if open == '<' && matches!(previous, '-' | '=') => {}
            ')' | ']' | '}' if depth > 0 => depth -= 1,
            '>' if open == '<' && depth > 0 => depth -= 1,
            '}' if open == '{' => return Some(at),
            '>' if open == '<' => return Some(at),
            _ => {}
        }
        previous = c;
    }
    None
}

/// The placeholder's text as an expression that carries the literal's span.
fn placeholder(lit: &LitStr, open: char, source: &str, close: char) -> syn::Result<Expr> {
    if source.trim().is_empty() {
        return Err(Error::new(
            lit.span(),
            format!(
                "empty placeholder `{open}{source}{close}` in key: write the argument to insert, as in `{open}u.id{close}`, or `{open}{open}{close}{close}` for the brackets themselves"
            ),
        ));
    }
    LitStr::new(source, Span::call_site().located_at(lit.span()))
        .parse::<Expr>()
        .map_err(|err| {
        // A format spec such as `{id:?}` is the likely mistake.
        let message = if source.replace("::", "").contains(':') {
            format!(
                "`{open}{source}{close}` in key: placeholders take no format spec, keys are rendered with `Display`; write `{open}{}{close}`",
                source.split(':').next().unwrap_or_default().trim()
            )
        } else {
            format!("`{open}{source}{close}` in key is not an expression: {err}")
        };
        Error::new(lit.span(), message)
    })
}

/// The expression a placeholder starts from: `u` in `u.id`, in
/// `u.name.len()` or in `&u.tags[0]`.
fn root(expr: &Expr) -> &Expr {
    match expr {
        Expr::Field(field) => root(&field.base),
        Expr::MethodCall(call) => root(&call.receiver),
        Expr::Index(index) => root(&index.expr),
        Expr::Reference(reference) => root(&reference.expr),
        Expr::Paren(paren) => root(&paren.expr),
        Expr::Group(group) => root(&group.expr),
        Expr::Unary(unary) => root(&unary.expr),
        Expr::Cast(cast) => root(&cast.expr),
        Expr::Try(try_) => root(&try_.expr),
        Expr::Await(await_) => root(&await_.base),
        other => other,
    }
}

/// A placeholder reads a parameter, `self` or a constant. Anything else
/// (a call such as `hash(u)`, a path such as `Self::PREFIX`) is left to
/// rustc.
fn check_root(
    expr: &Expr,
    span: Span,
    open: char,
    source: &str,
    close: char,
    params: &Params,
) -> syn::Result<()> {
    let ident = match root(expr) {
        Expr::Lit(_) => {
            return Err(Error::new(
                span,
                format!(
                    "`{open}{source}{close}` in key inserts no argument: write the text itself, or an argument, as in `{open}u.id{close}`"
                ),
            ));
        }
        Expr::Path(path) if path.qself.is_none() => match path.path.get_ident() {
            Some(ident) => ident,
            None => return Ok(()),
        },
        _ => return Ok(()),
    };
    let function = &params.function;
    if ident == "self" {
        if params.receiver {
            return Ok(());
        }
        return Err(Error::new(
            span,
            format!("`self` in key, but `{function}` takes no `self`: use one of its arguments"),
        ));
    }
    let constant = ident.to_string().chars().all(|c| !c.is_lowercase());
    if constant || params.names.iter().any(|name| name == ident) {
        return Ok(());
    }
    Err(Error::new(
        span,
        format!(
            "`{ident}` in key is not a parameter of `{function}`: {}",
            params.suggestion()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn params() -> Params {
        let sig: Signature =
            parse_quote!(async fn bill(&self, u: &User, (from, to): (u32, u32), _: u8));
        Params::of(&sig)
    }

    fn expand(value: Expr) -> String {
        match Key::parse(value, &params()) {
            Ok(key) => key
                .to_tokens(&parse_quote!(::rt))
                .to_string()
                .replace(' ', ""),
            Err(err) => panic!("{err}"),
        }
    }

    fn error(value: Expr) -> String {
        match Key::parse(value, &params()) {
            Ok(_) => panic!("expected an error"),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn parameters() {
        let params = params();
        assert!(params.receiver);
        let names: Vec<String> = params.names.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["u", "from", "to"]);
    }

    #[test]
    fn text_only() {
        assert_eq!(
            expand(parse_quote!("jobs:nightly")),
            r#"::rt::__private::String::from("jobs:nightly")"#
        );
    }

    #[test]
    fn one_placeholder_alone() {
        assert_eq!(
            expand(parse_quote!("{u.id}")),
            "::rt::__private::key(&(u.id))"
        );
    }

    #[test]
    fn braces_and_angles_are_the_same() {
        let braces = expand(parse_quote!("user:{u.id}"));
        assert_eq!(braces, r#"::rt::__private::format!("user:{}",u.id)"#);
        assert_eq!(expand(parse_quote!("user:<u.id>")), braces);
    }

    #[test]
    fn several_placeholders() {
        assert_eq!(
            expand(parse_quote!("transfer:{from}->>{to}:<self.tenant>")),
            r#"::rt::__private::format!("transfer:{}->{}:{}",from,to,self.tenant)"#
        );
    }

    #[test]
    fn doubled_brackets_are_literal() {
        assert_eq!(
            expand(parse_quote!("{{a}}<<b>>:{u.id}")),
            r#"::rt::__private::format!("{{a}}<b>:{}",u.id)"#
        );
    }

    #[test]
    fn nested_brackets_in_placeholders() {
        assert_eq!(
            expand(parse_quote!("a:{u.tags[0]}:{u.get({ 1 })}:{u.name(\"}\")}")),
            r#"::rt::__private::format!("a:{}:{}:{}",u.tags[0],u.get({1}),u.name("}"))"#
        );
        assert_eq!(
            expand(parse_quote!("a:<u.get::<u8>()>:<u.map(|x| -> u8 { x })>")),
            r#"::rt::__private::format!("a:{}:{}",u.get::<u8>(),u.map(|x|->u8{x}))"#
        );
    }

    #[test]
    fn constants_calls_and_paths() {
        assert_eq!(
            expand(parse_quote!("{PREFIX}:{hash(u)}:{Self::NAME}")),
            r#"::rt::__private::format!("{}:{}:{}",PREFIX,hash(u),Self::NAME)"#
        );
    }

    #[test]
    fn expression_keys() {
        assert_eq!(
            expand(parse_quote!(self.key())),
            "::rt::__private::key(&(self.key()))"
        );
    }

    #[test]
    fn empty_key() {
        assert_eq!(
            error(parse_quote!("")),
            "empty key: write the name of the lock, as in `\"user:{u.id}\"`"
        );
    }

    #[test]
    fn unclosed_placeholder() {
        assert_eq!(
            error(parse_quote!("user:{u.id")),
            "unclosed placeholder `{u.id` in key: add `}`, or write `{{` for a literal `{`"
        );
        assert_eq!(
            error(parse_quote!("user:<u.id")),
            "unclosed placeholder `<u.id` in key: add `>`, or write `<<` for a literal `<`"
        );
    }

    #[test]
    fn unmatched_closing_bracket() {
        assert_eq!(
            error(parse_quote!("user:u.id}")),
            "unmatched `}` in key: write `}}` for a literal `}`"
        );
        assert_eq!(
            error(parse_quote!("a>b")),
            "unmatched `>` in key: write `>>` for a literal `>`"
        );
    }

    #[test]
    fn empty_placeholder() {
        assert_eq!(
            error(parse_quote!("user:{}")),
            "empty placeholder `{}` in key: write the argument to insert, as in `{u.id}`, or `{{}}` for the brackets themselves"
        );
        assert_eq!(
            error(parse_quote!("user:< >")),
            "empty placeholder `< >` in key: write the argument to insert, as in `<u.id>`, or `<<>>` for the brackets themselves"
        );
    }

    #[test]
    fn format_spec() {
        assert_eq!(
            error(parse_quote!("user:{u.id:?}")),
            "`{u.id:?}` in key: placeholders take no format spec, keys are rendered with `Display`; write `{u.id}`"
        );
    }

    #[test]
    fn not_an_expression() {
        assert_eq!(
            error(parse_quote!("user:{u.}")),
            "`{u.}` in key is not an expression: unexpected end of input, expected identifier or integer"
        );
    }

    #[test]
    fn literal_placeholder() {
        assert_eq!(
            error(parse_quote!("user:{0}")),
            "`{0}` in key inserts no argument: write the text itself, or an argument, as in `{u.id}`"
        );
    }

    #[test]
    fn not_a_parameter() {
        assert_eq!(
            error(parse_quote!("user:{user.id}")),
            "`user` in key is not a parameter of `bill`: use one of `self`, `u`, `from`, `to`"
        );
    }

    #[test]
    fn self_without_receiver() {
        let sig: Signature = parse_quote!(async fn free(u: &User));
        let err = Key::parse(parse_quote!("t:{self.tenant}"), &Params::of(&sig));
        assert_eq!(
            err.err().unwrap().to_string(),
            "`self` in key, but `free` takes no `self`: use one of its arguments"
        );
    }

    #[test]
    fn no_parameters() {
        let sig: Signature = parse_quote!(async fn nightly());
        let err = Key::parse(parse_quote!("job:{id}"), &Params::of(&sig));
        assert_eq!(
            err.err().unwrap().to_string(),
            "`id` in key is not a parameter of `nightly`: `nightly` takes no arguments, so the key can only be text"
        );
    }

    #[test]
    fn non_string_literal() {
        assert_eq!(
            error(parse_quote!(42)),
            "a key is text: write it as a string, as in `\"user:{u.id}\"`"
        );
    }
}
