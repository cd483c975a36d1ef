//! `on_busy` and `on_lost`, and what the function returns when the lock is
//! not held.
//!
//! The macro does not look at the return type to choose: a trait of the
//! runtime does, so that type aliases such as `anyhow::Result<T>` work. The
//! macro only names the trait, at the return type, where rustc then reports
//! a type the policy cannot produce.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Error, Expr, ExprLit, Lit, Path, Type};

/// `on_busy = …`: what the function returns when the lock cannot be had.
#[derive(Clone, Copy)]
pub(crate) enum OnBusy {
    /// Not given: the return type decides.
    Auto,
    Error,
    Skip,
}

/// `on_lost = …`: what happens when the lease is lost while the body runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnLost {
    Abort,
    Continue,
}

impl OnBusy {
    pub(crate) fn parse(value: &Expr) -> syn::Result<Self> {
        Ok(match choice("on_busy", value, &["error", "skip"])? {
            "error" => OnBusy::Error,
            _ => OnBusy::Skip,
        })
    }
}

impl OnLost {
    pub(crate) fn parse(value: &Expr) -> syn::Result<Self> {
        Ok(match choice("on_lost", value, &["abort", "continue"])? {
            "abort" => OnLost::Abort,
            _ => OnLost::Continue,
        })
    }
}

/// One of `options`, written as a string.
fn choice<'a>(name: &str, value: &Expr, options: &[&'a str]) -> syn::Result<&'a str> {
    let instead = options
        .iter()
        .map(|option| format!("`{name} = \"{option}\"`"))
        .collect::<Vec<_>>()
        .join(" or ");
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => {
            let text = lit.value();
            options
                .iter()
                .find(|option| **option == text)
                .copied()
                .ok_or_else(|| {
                    Error::new(
                        lit.span(),
                        format!("unknown `{name}` value {text:?}: write {instead}"),
                    )
                })
        }
        // `on_busy = skip`: the quotes are missing.
        Expr::Path(path)
            if path
                .path
                .get_ident()
                .is_some_and(|ident| options.iter().any(|option| ident == option)) =>
        {
            let ident = path.path.get_ident().expect("checked by the guard");
            Err(Error::new(
                ident.span(),
                format!("`{name}` takes a string: write `{name} = \"{ident}\"`"),
            ))
        }
        other => Err(Error::new(
            other.span(),
            format!("`{name}` takes a string: write {instead}"),
        )),
    }
}

/// The type the function's future resolves to.
pub(crate) struct Output {
    /// `None` for a function without `->`, which returns `()`.
    ty: Option<Type>,
    /// The return type, or where it would be written.
    span: Span,
}

impl Output {
    /// Refuses an `impl Trait` return type: the runtime's traits must be
    /// named on the type, and `impl Trait` cannot be named there.
    pub(crate) fn new(ty: Option<Type>, span: Span) -> syn::Result<Self> {
        if let Some(ty) = &ty
            && mentions_impl(ty.to_token_stream())
        {
            return Err(Error::new_spanned(
                ty,
                "`#[distributed_lock]` does not support `impl Trait` return types: name the type, or return `Box<dyn Trait>`",
            ));
        }
        Ok(Output { ty, span })
    }

    /// Whether the function returns `()`.
    pub(crate) fn is_unit(&self) -> bool {
        self.ty.is_none()
    }

    /// The return type, spanned where it is written.
    pub(crate) fn ty(&self) -> TokenStream {
        match &self.ty {
            Some(ty) => ty.to_token_stream(),
            None => quote_spanned!(self.span=> ()),
        }
    }

    pub(crate) fn span(&self) -> Span {
        self.span
    }

    /// `fn(LockError) -> R`: the value to return when the lock is not held.
    /// The one obligation on the user's type, spanned at the return type so
    /// that rustc's message (the trait's `on_unimplemented`) points there.
    pub(crate) fn on_failure(&self, on_busy: OnBusy, krate: &Path) -> TokenStream {
        let outcome = match on_busy {
            OnBusy::Auto => quote!(AutoOutcome),
            OnBusy::Error => quote!(ErrorOutcome),
            OnBusy::Skip => quote!(SkipOutcome),
        };
        let ty = self.ty();
        quote_spanned!(self.span=> <#ty as #krate::__private::#outcome>::on_failure)
    }
}

fn mentions_impl(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Ident(ident) => ident == "impl",
        TokenTree::Group(group) => mentions_impl(group.stream()),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn error<T>(result: syn::Result<T>) -> String {
        match result {
            Ok(_) => panic!("expected an error"),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn on_busy() {
        assert!(matches!(
            OnBusy::parse(&parse_quote!("error")),
            Ok(OnBusy::Error)
        ));
        assert!(matches!(
            OnBusy::parse(&parse_quote!("skip")),
            Ok(OnBusy::Skip)
        ));
        assert_eq!(
            error(OnBusy::parse(&parse_quote!("maybe"))),
            "unknown `on_busy` value \"maybe\": write `on_busy = \"error\"` or `on_busy = \"skip\"`"
        );
        assert_eq!(
            error(OnBusy::parse(&parse_quote!(skip))),
            "`on_busy` takes a string: write `on_busy = \"skip\"`"
        );
        assert_eq!(
            error(OnBusy::parse(&parse_quote!(1))),
            "`on_busy` takes a string: write `on_busy = \"error\"` or `on_busy = \"skip\"`"
        );
    }

    #[test]
    fn on_lost() {
        assert!(matches!(
            OnLost::parse(&parse_quote!("abort")),
            Ok(OnLost::Abort)
        ));
        assert!(matches!(
            OnLost::parse(&parse_quote!("continue")),
            Ok(OnLost::Continue)
        ));
        assert_eq!(
            error(OnLost::parse(&parse_quote!("retry"))),
            "unknown `on_lost` value \"retry\": write `on_lost = \"abort\"` or `on_lost = \"continue\"`"
        );
    }

    #[test]
    fn impl_trait_return_types() {
        let span = Span::call_site();
        assert!(Output::new(Some(parse_quote!(Result<u8, E>)), span).is_ok());
        assert_eq!(
            error(Output::new(Some(parse_quote!(impl Display)), span)),
            "`#[distributed_lock]` does not support `impl Trait` return types: name the type, or return `Box<dyn Trait>`"
        );
        assert!(Output::new(Some(parse_quote!(Result<impl Display, E>)), span).is_err());
    }

    #[test]
    fn obligations_name_the_policy() {
        let krate: Path = parse_quote!(::rt);
        let output = Output::new(Some(parse_quote!(Option<u8>)), Span::call_site()).unwrap();
        assert_eq!(
            output.on_failure(OnBusy::Skip, &krate).to_string(),
            quote!(<Option<u8> as ::rt::__private::SkipOutcome>::on_failure).to_string()
        );
        let unit = Output::new(None, Span::call_site()).unwrap();
        assert_eq!(
            unit.on_failure(OnBusy::Auto, &krate).to_string(),
            quote!(<() as ::rt::__private::AutoOutcome>::on_failure).to_string()
        );
    }
}
