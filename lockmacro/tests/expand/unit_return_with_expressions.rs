async fn nightly(self: Arc<Self>) {
    let __lockmacro_keys = ::lockmacro_runtime::__private::vec![
        ::lockmacro_runtime::__private::key(& (self.job_key()))
    ];
    let __lockmacro_locker = ::lockmacro_runtime::__private::global();
    let __lockmacro_plan = ::lockmacro_runtime::__private::HoldOptions::new(self.lease)
        .fence_key(::lockmacro_runtime::__private::format!("fence:{}", self.name));
    ::lockmacro_runtime::__private::run(
            __lockmacro_locker,
            __lockmacro_keys,
            __lockmacro_plan,
            <() as ::lockmacro_runtime::__private::ErrorOutcome>::on_failure,
            move |_| async move {
                self.run().await;
            },
        )
        .await
}
