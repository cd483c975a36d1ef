//! The annotated function, and which of the two shapes it has.

use proc_macro2::TokenStream;
use syn::parse::{Parse, ParseStream, Parser};
use syn::spanned::Spanned;
use syn::token::Brace;
use syn::{
    Attribute, Block, Error, Expr, ExprAsync, ExprCall, GenericArgument, Path, PathArguments,
    ReturnType, Signature, Stmt, Token, Type, TypeParamBound, Visibility, braced,
};

use crate::policy::Output;

/// A function whose body is kept as tokens: an `async fn` body is wrapped as
/// written, never re-printed from a syntax tree.
pub(crate) struct Function {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    pub(crate) brace_token: Brace,
    pub(crate) inner_attrs: Vec<Attribute>,
    pub(crate) body: TokenStream,
}

impl Parse for Function {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis = input.parse()?;
        let sig: Signature = input.parse()?;
        if input.peek(Token![;]) {
            return Err(Error::new(
                proc_macro2::Span::call_site(),
                "`#[distributed_lock]` needs the function's body: put it on the method in the `impl`, not on its declaration",
            ));
        }
        let content;
        let brace_token = braced!(content in input);
        let inner_attrs = content.call(Attribute::parse_inner)?;
        let body = content.parse()?;
        Ok(Function {
            attrs,
            vis,
            sig,
            brace_token,
            inner_attrs,
            body,
        })
    }
}

/// Where the body to lock is.
pub(crate) enum Shape {
    /// An `async fn`: its whole body.
    Async,
    /// A method `#[async_trait]` has already rewritten into a plain `fn`
    /// returning `Box::pin(async move { body })`: the `async` block. Seen
    /// when `#[async_trait]` is on the `impl` (it expands first), also after
    /// `#[tracing::instrument]` has instrumented that block.
    Boxed(Boxed),
}

pub(crate) struct Boxed {
    /// The statements before the `Box::pin(…)` tail, kept as they are.
    pub(crate) before: Vec<Stmt>,
    /// `Box::pin(…)` itself, whose argument is replaced.
    pub(crate) call: ExprCall,
    /// Its argument, `async move { … }`.
    pub(crate) future: ExprAsync,
}

impl Shape {
    /// The shape of `function`, and the type its future resolves to.
    pub(crate) fn of(function: &Function) -> syn::Result<(Shape, Output)> {
        let sig = &function.sig;
        if sig.asyncness.is_some() {
            let output = match &sig.output {
                ReturnType::Type(_, ty) => Output::new(Some((**ty).clone()), ty.span())?,
                // A missing return type would go after the parameters.
                ReturnType::Default => Output::new(None, sig.paren_token.span.close())?,
            };
            return Ok((Shape::Async, output));
        }
        if let Some((boxed, ty)) = boxed(function) {
            let output = Output::new(Some(ty.clone()), ty.span())?;
            return Ok((Shape::Boxed(boxed), output));
        }
        Err(Error::new(
            sig.fn_token.span,
            "`#[distributed_lock]` requires an `async fn`: add `async` before `fn`",
        ))
    }
}

/// `Box::pin(async move { … })` as the body's tail, and the `R` of the
/// `Pin<Box<dyn Future<Output = R> + …>>` return type.
fn boxed(function: &Function) -> Option<(Boxed, &Type)> {
    let ReturnType::Type(_, ty) = &function.sig.output else {
        return None;
    };
    let output = future_output(ty)?;
    let mut stmts = Block::parse_within.parse2(function.body.clone()).ok()?;
    let Some(Stmt::Expr(Expr::Call(call), None)) = stmts.pop() else {
        return None;
    };
    let Expr::Path(func) = &*call.func else {
        return None;
    };
    let mut segments = func.path.segments.iter().rev();
    if !(segments.next()?.ident == "pin" && segments.next()?.ident == "Box") {
        return None;
    }
    let (Some(Expr::Async(future)), 1) = (call.args.first(), call.args.len()) else {
        return None;
    };
    let future = future.clone();
    Some((
        Boxed {
            before: stmts,
            call,
            future,
        },
        output,
    ))
}

/// `R` in `Pin<Box<dyn Future<Output = R> + Send + 'a>>`.
fn future_output(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Path(path) => path_output(&path.path),
        Type::TraitObject(object) => object.bounds.iter().find_map(|bound| match bound {
            TypeParamBound::Trait(bound) => path_output(&bound.path),
            _ => None,
        }),
        Type::Group(group) => future_output(&group.elem),
        Type::Paren(paren) => future_output(&paren.elem),
        _ => None,
    }
}

fn path_output(path: &Path) -> Option<&Type> {
    let PathArguments::AngleBracketed(args) = &path.segments.last()?.arguments else {
        return None;
    };
    args.args.iter().find_map(|arg| match arg {
        GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&assoc.ty),
        GenericArgument::Type(inner) => future_output(inner),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::{ToTokens, quote};

    fn shape_of(item: TokenStream) -> syn::Result<(Shape, Output)> {
        Shape::of(&syn::parse2(item)?)
    }

    fn error(item: TokenStream) -> String {
        match shape_of(item) {
            Ok(_) => panic!("expected an error"),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn async_fn() {
        let (shape, output) = shape_of(quote!(
            async fn f() -> Option<u8> {
                None
            }
        ))
        .unwrap();
        assert!(matches!(shape, Shape::Async));
        assert_eq!(output.ty().to_string(), quote!(Option<u8>).to_string());
        let (_, unit) = shape_of(quote!(
            async fn f() {}
        ))
        .unwrap();
        assert!(unit.is_unit());
    }

    #[test]
    fn after_async_trait() {
        let (shape, output) = shape_of(quote! {
            fn f<'a>(&'a self) -> ::core::pin::Pin<Box<
                dyn ::core::future::Future<Output = Result<u8, E>> + ::core::marker::Send + 'a
            >> {
                Box::pin(async move { Ok(1) })
            }
        })
        .unwrap();
        let Shape::Boxed(boxed) = shape else {
            panic!("expected the boxed shape");
        };
        assert!(boxed.before.is_empty());
        assert_eq!(
            boxed.future.block.to_token_stream().to_string(),
            quote!({ Ok(1) }).to_string()
        );
        assert_eq!(output.ty().to_string(), quote!(Result<u8, E>).to_string());
    }

    #[test]
    fn not_async() {
        let message = "`#[distributed_lock]` requires an `async fn`: add `async` before `fn`";
        assert_eq!(
            error(quote!(
                fn f() -> u8 {
                    1
                }
            )),
            message
        );
        // A boxed future that is not `Box::pin(async …)`.
        assert_eq!(
            error(quote! {
                fn f() -> Pin<Box<dyn Future<Output = u8>>> { Box::pin(ready(1)) }
            }),
            message
        );
        // `Box::pin(async …)` without a future return type to read `R` from.
        assert_eq!(
            error(quote!(
                fn f() -> Box<u8> {
                    Box::pin(async move { 1 })
                }
            )),
            message
        );
    }

    #[test]
    fn declaration_without_body() {
        assert_eq!(
            error(quote!(
                async fn f(&self) -> u8;
            )),
            "`#[distributed_lock]` needs the function's body: put it on the method in the `impl`, not on its declaration"
        );
    }

    #[test]
    fn impl_trait_return_type() {
        assert_eq!(
            error(quote!(
                async fn f() -> impl Display {
                    1
                }
            )),
            "`#[distributed_lock]` does not support `impl Trait` return types: name the type, or return `Box<dyn Trait>`"
        );
    }
}
