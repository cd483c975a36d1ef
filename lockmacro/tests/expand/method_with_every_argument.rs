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
    let __lockmacro_keys = ::my_app::locks::__private::vec![
        ::my_app::locks::__private::format!("account:{}", from),
        ::my_app::locks::__private::format!("account:{}", to),
        ::my_app::locks::__private::format!("tenant:{}", self.tenant)
    ];
    let __lockmacro_locker = ::my_app::locks::__private::locker(&(self.locker));
    let __lockmacro_plan = ::my_app::locks::__private::HoldOptions::new(
            ::my_app::locks::__private::__Duration::from_millis(90000),
        )
        .refresh(::my_app::locks::__private::__Duration::from_millis(20000))
        .wait(::my_app::locks::__private::__Duration::from_millis(10000))
        .fence()
        .on_lost(::my_app::locks::__private::OnLost::Continue)
        .hold_at_least(::my_app::locks::__private::__Duration::from_millis(300000));
    ::my_app::locks::__private::run(
            __lockmacro_locker,
            __lockmacro_keys,
            __lockmacro_plan,
            <Result<
                Option<T>,
                Error,
            > as ::my_app::locks::__private::SkipOutcome>::on_failure,
            move |__lockmacro_guard| async move {
                let lock = &__lockmacro_guard;
                #[allow(
                    unreachable_code,
                    clippy::diverging_sub_expression,
                    clippy::empty_loop,
                    clippy::needless_return
                )]
                if false {
                    let __lockmacro_fake_return: Result<Option<T>, Error> = loop {};
                    return __lockmacro_fake_return;
                }
                self.ledger.move_funds(from, to, lock.fence_token()).await?;
                Ok(None)
            },
        )
        .await
}
