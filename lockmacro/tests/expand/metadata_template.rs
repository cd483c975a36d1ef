async fn bill(u: &User) -> Result<Receipt, BillingError> {
    let __lockmacro_keys = ::lockmacro_runtime::__private::vec![
        ::lockmacro_runtime::__private::format!("user:{}", u.id)
    ];
    let __lockmacro_locker = ::lockmacro_runtime::__private::global();
    let __lockmacro_plan = ::lockmacro_runtime::__private::HoldOptions::new(
            ::lockmacro_runtime::__private::__Duration::from_millis(30000),
        )
        .metadata(::lockmacro_runtime::__private::format!("billing-{}", u.id));
    ::lockmacro_runtime::__private::run(
            __lockmacro_locker,
            __lockmacro_keys,
            __lockmacro_plan,
            <Result<
                Receipt,
                BillingError,
            > as ::lockmacro_runtime::__private::AutoOutcome>::on_failure,
            move |_| async move {
                #[allow(
                    unreachable_code,
                    clippy::diverging_sub_expression,
                    clippy::empty_loop,
                    clippy::needless_return
                )]
                if false {
                    let __lockmacro_fake_return: Result<Receipt, BillingError> = loop {};
                    return __lockmacro_fake_return;
                }
                charge(u).await
            },
        )
        .await
}
