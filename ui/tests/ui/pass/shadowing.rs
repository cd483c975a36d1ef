//! Generated code names nothing the user's crate can shadow: modules named
//! like the crates it uses, a `Result` alias, macros named like std's, and
//! user bindings named like its locals.
#![deny(warnings)]
// The shadowing items exist only to be in the way.
#![allow(dead_code, non_camel_case_types, unused_macros)]

// `::` because the module below shadows the crate at the root.
use ::lockmacro_runtime::distributed_lock;

mod core {}
mod std {}
mod alloc {}
mod lockmacro_runtime {}

struct String;
struct Vec;
struct Option;
struct Duration;
struct Plan;
struct Box;

macro_rules! format {
    ($($t:tt)*) => {
        compile_error!("the user's `format!` was used")
    };
}

macro_rules! vec {
    ($($t:tt)*) => {
        compile_error!("the user's `vec!` was used")
    };
}

type Result<T> = ::core::result::Result<T, Error>;

#[derive(Debug)]
pub struct Error;

impl From<::lockmacro_runtime::LockError> for Error {
    fn from(_: ::lockmacro_runtime::LockError) -> Self {
        Error
    }
}

#[distributed_lock(
    key = "user:{id}:{__lockmacro_keys}",
    ttl = "30s",
    fence = "f:{__lockmacro_plan}"
)]
async fn locals(id: u64, __lockmacro_keys: u8, __lockmacro_plan: u8) -> Result<u8> {
    let __lockmacro_guard = __lockmacro_keys + __lockmacro_plan;
    let __lockmacro_locker = id;
    let _ = __lockmacro_locker;
    Ok(__lockmacro_guard)
}

#[distributed_lock(keys = ["a:{keys}", "b:{plan}"], ttl = "30s", guard = guard)]
async fn plain_names(keys: u8, plan: u8, locker: u8) -> Result<u8> {
    let _ = guard.key();
    Ok(keys + plan + locker)
}

fn main() {
    drop(locals(1, 2, 3));
    drop(plain_names(1, 2, 3));
}
