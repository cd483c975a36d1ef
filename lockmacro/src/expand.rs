//! Turns the function and its validated [`Plan`] into the locked function.
//!
//! The signature is kept token for token and only the body changes, so
//! receivers, generics, lifetimes, `impl Trait` arguments and `where`
//! clauses need no handling here. Nothing in this module can fail: every
//! check happened while building the plan.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::Attribute;
use syn::spanned::Spanned;

use crate::args::Args;
use crate::errors::Errors;
use crate::item::{Boxed, Function, Shape};
use crate::key::Params;
use crate::plan::Plan;
use crate::policy::{OnLost, Output};
use crate::values::{Fence, Mode};

/// `#[distributed_lock(args)] item`. On a mistake, the function is emitted
/// as written ([`as_written`]) next to the errors, so rustc reports nothing
/// else and the IDE keeps completing inside it.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    match expand(args, item.clone()) {
        Ok(tokens) => tokens,
        Err(err) => {
            let mut tokens = match syn::parse2::<Function>(item.clone()) {
                Ok(function) => as_written(function),
                Err(_) => item,
            };
            tokens.extend(err.into_compile_error());
            tokens
        }
    }
}

/// The function as written, with its parameters read first: the keys that
/// read some of them are not generated, and rustc would otherwise warn that
/// they are unused on top of the attribute's error.
fn as_written(function: Function) -> TokenStream {
    let Function {
        attrs,
        vis,
        sig,
        brace_token,
        inner_attrs,
        body,
    } = function;
    let params = Params::of(&sig);
    let receiver = params.receiver().then(|| quote!(&self,));
    let names = params.names().iter().map(|name| quote!(&#name,));
    let read = match (receiver, params.names()) {
        (None, []) => TokenStream::new(),
        (receiver, _) => quote!(let _ = (#receiver #(#names)*);),
    };
    let mut tokens = quote!(#(#attrs)* #vis #sig);
    brace_token.surround(&mut tokens, |tokens| {
        tokens.extend(quote!(#(#inner_attrs)* #read #body));
    });
    tokens
}

fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let function: Function = syn::parse2(item)?;
    let mut errors = Errors::default();
    let args = errors.ok(syn::parse2::<Args>(args));
    errors.check(only_once(&function.attrs));
    let shape = errors.ok(Shape::of(&function));
    let params = Params::of(&function.sig);
    let plan = args.and_then(|args| errors.ok(args.plan(&params)));
    errors.finish()?;
    let (Some((shape, output)), Some(plan)) = (shape, plan) else {
        unreachable!("a step failed without an error");
    };
    Ok(generate(function, shape, &output, &plan))
}

/// The outer attribute expands first and sees the others on the function.
fn only_once(attrs: &[Attribute]) -> syn::Result<()> {
    let again = attrs.iter().find(|attr| {
        attr.path()
            .segments
            .last()
            .is_some_and(|last| last.ident == "distributed_lock")
    });
    match again {
        Some(attr) => Err(syn::Error::new_spanned(
            attr,
            "`#[distributed_lock]` is given twice on this function: remove this one, and to lock several keys write `keys = [\"…\", \"…\"]` in the other",
        )),
        None => Ok(()),
    }
}

/// Our locals: `mixed_site` keeps them out of reach of the user's code, and
/// the user's names out of ours.
fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

fn generate(function: Function, shape: Shape, output: &Output, plan: &Plan) -> TokenStream {
    let Function {
        attrs,
        vis,
        sig,
        brace_token,
        inner_attrs,
        body,
    } = function;
    let prepare = prepare(plan);
    let block = match shape {
        Shape::Async => {
            let closure = closure(plan, fake_return(output), body, brace_token.span.join());
            let run = run(plan, output, &closure);
            quote!(#prepare #run.await)
        }
        Shape::Boxed(Boxed {
            before,
            call,
            future,
        }) => {
            // No fake return edge: `#[async_trait]` already wrote one, and a
            // typed `let __ret`, into the block.
            let stmts = &future.block.stmts;
            let span = future.block.brace_token.span.join();
            let closure = closure(plan, TokenStream::new(), quote!(#(#stmts)*), span);
            let run = run(plan, output, &closure);
            let attrs = &future.attrs;
            let async_token = &future.async_token;
            let capture = &future.capture;
            let mut future = quote!(#(#attrs)* #async_token #capture);
            future.extend(quote_spanned!(span=> { #run.await }));
            let func = &call.func;
            let mut pinned = quote!(#func);
            call.paren_token
                .surround(&mut pinned, |tokens| tokens.extend(future));
            quote!(#(#before)* #prepare #pinned)
        }
    };
    let mut tokens = quote!(#(#attrs)* #vis #sig);
    brace_token.surround(&mut tokens, |tokens| {
        tokens.extend(quote!(#(#inner_attrs)* #block));
    });
    tokens
}

/// The keys, the locker and the plan, computed before the body's closure
/// takes the arguments.
fn prepare(plan: &Plan) -> TokenStream {
    let krate = &plan.krate;
    let keys_var = local("__lockmacro_keys");
    let locker_var = local("__lockmacro_locker");
    let plan_var = local("__lockmacro_plan");

    let keys = plan.keys.iter().map(|key| key.to_tokens(krate));
    let locker = match &plan.locker {
        // Spanned at the argument: a value that is not a locker is reported
        // there, not on the whole attribute.
        Some(locker) => quote_spanned!(locker.span()=> #krate::__private::locker(&(#locker))),
        None => quote!(#krate::__private::global()),
    };

    let ttl = plan.ttl.to_tokens(krate);
    let mut builder = quote!(#krate::__private::HoldOptions::new(#ttl));
    if let Some(refresh) = &plan.refresh {
        let refresh = refresh.to_tokens(krate);
        builder.extend(quote!(.refresh(#refresh)));
    }
    if let Some(wait) = &plan.wait {
        let wait = wait.to_tokens(krate);
        builder.extend(quote!(.wait(#wait)));
    }
    if plan.fair {
        builder.extend(quote!(.fair()));
    }
    match &plan.fence {
        Fence::Off => {}
        Fence::Derived => builder.extend(quote!(.fence())),
        Fence::Key(key) => {
            let key = key.to_tokens(krate);
            builder.extend(quote!(.fence_key(#key)));
        }
    }
    if plan.on_lost == OnLost::Continue {
        builder.extend(quote!(.on_lost(#krate::__private::OnLost::Continue)));
    }
    if let Some(hold) = &plan.hold_at_least {
        let hold = hold.to_tokens(krate);
        builder.extend(quote!(.hold_at_least(#hold)));
    }
    if let Some(max_hold) = &plan.max_hold {
        let max_hold = max_hold.to_tokens(krate);
        builder.extend(quote!(.max_hold(#max_hold)));
    }
    if let Some(lock_delay) = &plan.lock_delay {
        let lock_delay = lock_delay.to_tokens(krate);
        builder.extend(quote!(.lock_delay(#lock_delay)));
    }
    if plan.replicas > 0 {
        // As a `usize` literal: the runtime takes a count of replicas.
        let replicas = proc_macro2::Literal::usize_unsuffixed(plan.replicas as usize);
        builder.extend(quote!(.replicas(#replicas)));
    }
    if let Some(permits) = plan.permits {
        let permits = proc_macro2::Literal::u32_unsuffixed(permits);
        builder.extend(quote!(.permits(#permits)));
    }
    match plan.mode {
        Some(Mode::Read) => builder.extend(quote!(.read())),
        Some(Mode::Write) => builder.extend(quote!(.write())),
        None => {}
    }
    if let Some(metadata) = &plan.metadata {
        let metadata = metadata.to_tokens(krate);
        builder.extend(quote!(.metadata(#metadata)));
    }

    quote! {
        let #keys_var = #krate::__private::vec![#(#keys),*];
        let #locker_var = #locker;
        let #plan_var = #builder;
    }
}

/// `run(…)`: takes the lock, runs the body's future, releases.
fn run(plan: &Plan, output: &Output, closure: &TokenStream) -> TokenStream {
    let krate = &plan.krate;
    let keys_var = local("__lockmacro_keys");
    let locker_var = local("__lockmacro_locker");
    let plan_var = local("__lockmacro_plan");
    let on_failure = output.on_failure(plan.on_busy, krate);
    quote! {
        #krate::__private::run(#locker_var, #keys_var, #plan_var, #on_failure, #closure)
    }
}

/// `move |guard| async move { body }`, spanned at the user's block so that
/// type errors in the body land there.
fn closure(plan: &Plan, fake_return: TokenStream, body: TokenStream, span: Span) -> TokenStream {
    let guard_var = local("__lockmacro_guard");
    let (param, binding) = match &plan.guard {
        Some(name) => (
            guard_var.to_token_stream(),
            quote!(let #name = &#guard_var;),
        ),
        None => (quote!(_), TokenStream::new()),
    };
    quote_spanned! {span=>
        move |#param| async move {
            #binding
            #fake_return
            #body
        }
    }
}

/// An unreachable `return` of the declared type, first in the body, so that
/// `?`, `return` and `.into()` in the body infer against that type, as they
/// would in the `async fn` itself.
fn fake_return(output: &Output) -> TokenStream {
    if output.is_unit() {
        return TokenStream::new();
    }
    let ty = output.ty();
    let var = local("__lockmacro_fake_return");
    quote_spanned! {output.span()=>
        #[allow(
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::empty_loop,
            clippy::needless_return
        )]
        if false {
            let #var: #ty = loop {};
            return #var;
        }
    }
}
