//! Expansion snapshots: what representative functions expand to, printed
//! with prettyplease and compared with `tests/expand/*.rs`. Run with
//! `LOCKMACRO_BLESS=1` to write the files after a deliberate change, then
//! read the diff.

use std::fmt::Write as _;
use std::path::PathBuf;

use proc_macro2::TokenStream;
use quote::quote;

fn snapshot(name: &str, args: TokenStream, item: TokenStream) {
    let expanded = crate::expand::distributed_lock(args, item);
    let file: syn::File = match syn::parse2(expanded.clone()) {
        Ok(file) => file,
        Err(err) => panic!("the expansion of {name} does not parse ({err}):\n{expanded}"),
    };
    let actual = prettyplease::unparse(&file);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/expand")
        .join(format!("{name}.rs"));
    if std::env::var_os("LOCKMACRO_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("a directory")).expect("create tests/expand");
        std::fs::write(&path, &actual).expect("write the snapshot");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "the expansion of {name} differs from {} (- expected, + actual; LOCKMACRO_BLESS=1 writes it):\n{}",
        path.display(),
        diff(&expected, &actual),
    );
}

/// A line diff (longest common subsequence): the files are small.
fn diff(expected: &str, actual: &str) -> String {
    let old: Vec<&str> = expected.lines().collect();
    let new: Vec<&str> = actual.lines().collect();
    let mut common = vec![vec![0usize; new.len() + 1]; old.len() + 1];
    for i in (0..old.len()).rev() {
        for j in (0..new.len()).rev() {
            common[i][j] = if old[i] == new[j] {
                common[i + 1][j + 1] + 1
            } else {
                common[i + 1][j].max(common[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < old.len() || j < new.len() {
        if i < old.len() && j < new.len() && old[i] == new[j] {
            let _ = writeln!(out, "  {}", old[i]);
            i += 1;
            j += 1;
        } else if j < new.len() && (i == old.len() || common[i][j + 1] >= common[i + 1][j]) {
            let _ = writeln!(out, "+ {}", new[j]);
            j += 1;
        } else {
            let _ = writeln!(out, "- {}", old[i]);
            i += 1;
        }
    }
    out
}

#[test]
fn free_fn() {
    snapshot(
        "free_fn",
        quote!(key = "user:{u.id}", ttl = "30s"),
        quote! {
            /// Charges the user once, whichever instance runs it.
            pub async fn bill(u: &User) -> Result<Receipt, BillingError> {
                let receipt = charge(u).await?;
                Ok(receipt)
            }
        },
    );
}

#[test]
fn metadata_template() {
    snapshot(
        "metadata_template",
        quote!(
            key = "user:{u.id}",
            ttl = "30s",
            metadata = "billing-{u.id}"
        ),
        quote! {
            async fn bill(u: &User) -> Result<Receipt, BillingError> {
                charge(u).await
            }
        },
    );
}

#[test]
fn design_card_angle_brackets() {
    snapshot(
        "design_card_angle_brackets",
        quote!(key = "user:<u.id>", ttl = "30s"),
        quote! {
            async fn bill(u: &User) -> Result<Receipt, BillingError> {
                charge(u).await
            }
        },
    );
}

#[test]
fn fair_waiter() {
    snapshot(
        "fair_waiter",
        quote!(
            key = "printer:{p.id}",
            ttl = "30s",
            wait = "2m",
            fair = true
        ),
        quote! {
            async fn print(p: &Printer, doc: Doc) -> Result<(), PrintError> {
                p.print(doc).await
            }
        },
    );
}

#[test]
fn replicated_payout() {
    snapshot(
        "replicated_payout",
        quote!(key = "payout:{id}", ttl = "30s", replicas = 2),
        quote! {
            async fn pay_out(id: u64) -> Result<(), PayoutError> {
                send(id).await
            }
        },
    );
}

#[test]
fn method_with_every_argument() {
    snapshot(
        "method_with_every_argument",
        quote!(
            keys = ["account:{from}", "account:{to}", "tenant:<self.tenant>"],
            ttl = "1m30s",
            on_busy = "skip",
            wait = "10s",
            fair = false,
            refresh = "20s",
            on_lost = "continue",
            fence,
            guard = lock,
            locker = self.locker,
            hold_at_least = "5m",
            crate = "::my_app::locks",
        ),
        quote! {
            #[tracing::instrument(skip(self))]
            pub(crate) async fn transfer<'a, T: Ledger>(
                &mut self,
                from: u64,
                to: u64,
                memo: impl Into<String>,
            ) -> Result<Option<T>, Error>
            where
                T: Send + 'a,
            {
                #![allow(clippy::cast_possible_truncation)]
                self.ledger.move_funds(from, to, lock.fence_token()).await?;
                Ok(None)
            }
        },
    );
}

#[test]
fn unit_return_with_expressions() {
    snapshot(
        "unit_return_with_expressions",
        quote!(
            key = self.job_key(),
            ttl = self.lease,
            fence = "fence:{self.name}",
            on_busy = "error"
        ),
        quote! {
            async fn nightly(self: Arc<Self>) {
                self.run().await;
            }
        },
    );
}

#[test]
fn text_key_without_placeholders() {
    snapshot(
        "text_key_without_placeholders",
        quote!(
            key = "jobs:{{nightly}}",
            ttl = "500ms",
            hold_at_least = "5m"
        ),
        quote! {
            async fn nightly() -> anyhow::Result<()> {
                Ok(())
            }
        },
    );
}

/// What `#[async_trait]` 0.1.92 makes of
/// `async fn bill(&self, u: &User) -> Result<Receipt, BillingError>`
/// before this attribute expands.
#[test]
fn after_async_trait() {
    snapshot(
        "after_async_trait",
        quote!(key = "user:{u.id}", ttl = "30s", locker = &self.locker),
        quote! {
            #[allow(
                elided_named_lifetimes,
                clippy::async_yields_async,
                clippy::diverging_sub_expression,
                clippy::let_unit_value,
                clippy::needless_arbitrary_self_type,
                clippy::no_effect_underscore_binding,
                clippy::shadow_same,
                clippy::type_complexity,
                clippy::type_repetition_in_bounds,
                clippy::used_underscore_binding
            )]
            fn bill<'life0, 'life1, 'async_trait>(
                &'life0 self,
                u: &'life1 User,
            ) -> ::core::pin::Pin<
                Box<
                    dyn ::core::future::Future<Output = Result<Receipt, BillingError>>
                        + ::core::marker::Send
                        + 'async_trait,
                >,
            >
            where
                'life0: 'async_trait,
                'life1: 'async_trait,
                Self: 'async_trait,
            {
                Box::pin(async move {
                    if let ::core::option::Option::Some(__ret) =
                        ::core::option::Option::None::<Result<Receipt, BillingError>>
                    {
                        #[allow(unreachable_code)]
                        return __ret;
                    }
                    let __self = self;
                    let __ret: Result<Receipt, BillingError> = { __self.charge(u).await };
                    #[allow(unreachable_code)]
                    __ret
                })
            }
        },
    );
}

/// Every independent mistake at once, next to the function as written.
#[test]
fn mistakes() {
    snapshot(
        "mistakes",
        quote!(
            key = "user:{user.id}",
            ttl = "0s",
            on_busy = "maybe",
            tll = "1s"
        ),
        quote! {
            async fn bill(u: &User) -> Result<Receipt, BillingError> {
                charge(u).await
            }
        },
    );
    snapshot(
        "mistakes_in_values",
        quote!(
            key = "user:{user.id}",
            ttl = "0s",
            on_busy = "maybe",
            wait = "1 parsec"
        ),
        quote! {
            fn bill(u: &User) -> Result<Receipt, BillingError> {
                charge(u)
            }
        },
    );
}
