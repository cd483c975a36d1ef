async fn pay_out(id: u64) -> Result<(), PayoutError> {
    let __lockmacro_keys = ::lockmacro_runtime::__private::vec![
        ::lockmacro_runtime::__private::format!("payout:{}", id)
    ];
    let __lockmacro_locker = ::lockmacro_runtime::__private::global();
    let __lockmacro_plan = ::lockmacro_runtime::__private::HoldOptions::new(
            ::lockmacro_runtime::__private::__Duration::from_millis(30000),
        )
        .replicas(2);
    ::lockmacro_runtime::__private::run(
            __lockmacro_locker,
            __lockmacro_keys,
            __lockmacro_plan,
            <Result<
                (),
                PayoutError,
            > as ::lockmacro_runtime::__private::AutoOutcome>::on_failure,
            move |_| async move {
                #[allow(
                    unreachable_code,
                    clippy::diverging_sub_expression,
                    clippy::empty_loop,
                    clippy::needless_return
                )]
                if false {
                    let __lockmacro_fake_return: Result<(), PayoutError> = loop {};
                    return __lockmacro_fake_return;
                }
                send(id).await
            },
        )
        .await
}
