async fn bill(u: &User) -> Result<Receipt, BillingError> {
    let _ = (&u,);
    charge(u).await
}
::core::compile_error! {
    "unknown argument `tll`, expected one of: `key`, `keys`, `ttl`, `on_busy`, `wait`, `fair`, `refresh`, `on_lost`, `fence`, `guard`, `locker`, `hold_at_least`, `max_hold`, `lock_delay`, `replicas`, `permits`, `mode`, `metadata`, `crate`"
}
::core::compile_error! {
    "`user` in key is not a parameter of `bill`: use `u`"
}
::core::compile_error! {
    "`ttl` cannot be zero: write a positive duration, as in `ttl = \"30s\"`"
}
::core::compile_error! {
    "unknown `on_busy` value \"maybe\": write `on_busy = \"error\"` or `on_busy = \"skip\"`"
}
