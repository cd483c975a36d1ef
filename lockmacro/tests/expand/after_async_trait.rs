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
        dyn ::core::future::Future<
            Output = Result<Receipt, BillingError>,
        > + ::core::marker::Send + 'async_trait,
    >,
>
where
    'life0: 'async_trait,
    'life1: 'async_trait,
    Self: 'async_trait,
{
    let __lockmacro_keys = ::lockmacro_runtime::__private::vec![
        ::lockmacro_runtime::__private::format!("user:{}", u.id)
    ];
    let __lockmacro_locker = ::lockmacro_runtime::__private::locker(&(&self.locker));
    let __lockmacro_plan = ::lockmacro_runtime::__private::HoldOptions::new(
        ::lockmacro_runtime::__private::__Duration::from_millis(30000),
    );
    Box::pin(async move {
        ::lockmacro_runtime::__private::run(
                __lockmacro_locker,
                __lockmacro_keys,
                __lockmacro_plan,
                <Result<
                    Receipt,
                    BillingError,
                > as ::lockmacro_runtime::__private::AutoOutcome>::on_failure,
                move |_| async move {
                    if let ::core::option::Option::Some(__ret) = ::core::option::Option::None::<
                        Result<Receipt, BillingError>,
                    > {
                        #[allow(unreachable_code)] return __ret;
                    }
                    let __self = self;
                    let __ret: Result<Receipt, BillingError> = {
                        __self.charge(u).await
                    };
                    #[allow(unreachable_code)] __ret
                },
            )
            .await
    })
}
