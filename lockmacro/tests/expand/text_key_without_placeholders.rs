async fn nightly() -> anyhow::Result<()> {
    let __lockmacro_keys = ::lockmacro_runtime::__private::vec![
        ::lockmacro_runtime::__private::String::from("jobs:{nightly}")
    ];
    let __lockmacro_locker = ::lockmacro_runtime::__private::global();
    let __lockmacro_plan = ::lockmacro_runtime::__private::HoldOptions::new(
            ::lockmacro_runtime::__private::__Duration::from_millis(500),
        )
        .hold_at_least(::lockmacro_runtime::__private::__Duration::from_millis(300000));
    ::lockmacro_runtime::__private::run(
            __lockmacro_locker,
            __lockmacro_keys,
            __lockmacro_plan,
            <anyhow::Result<
                (),
            > as ::lockmacro_runtime::__private::AutoOutcome>::on_failure,
            move |_| async move {
                #[allow(
                    unreachable_code,
                    clippy::diverging_sub_expression,
                    clippy::empty_loop,
                    clippy::needless_return
                )]
                if false {
                    let __lockmacro_fake_return: anyhow::Result<()> = loop {};
                    return __lockmacro_fake_return;
                }
                Ok(())
            },
        )
        .await
}
