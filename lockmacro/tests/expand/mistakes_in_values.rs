fn bill(u: &User) -> Result<Receipt, BillingError> {
    let _ = (&u,);
    charge(u)
}
::core::compile_error! {
    "`#[distributed_lock]` requires an `async fn`: add `async` before `fn`"
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
::core::compile_error! {
    "unknown unit `parsec` in `wait = \"1 parsec\"`: use `ms`, `s`, `m`, `h` or `d`, as in `\"30s\"` or `\"1m30s\"`"
}
