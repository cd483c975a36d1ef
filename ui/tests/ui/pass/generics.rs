//! Generics, lifetimes, const generics, `impl Trait` arguments and `where`
//! clauses need nothing from the attribute: the signature is kept as written.
#![deny(warnings)]

use std::fmt::Display;

use lockmacro_runtime::{LockError, distributed_lock};

pub struct Repo<T> {
    items: Vec<T>,
}

impl<T: Clone + Send + Sync> Repo<T> {
    #[distributed_lock(key = "repo:{name}:{N}", ttl = "5s")]
    pub async fn first<'a, const N: usize>(
        &'a self,
        name: &'a str,
    ) -> Result<Option<&'a T>, LockError> {
        Ok(self.items.first())
    }
}

#[distributed_lock(key = "item:{id}", ttl = "5s")]
pub async fn show<'a, T>(id: impl Display + Send, items: &'a [T]) -> Result<&'a [T], LockError>
where
    T: Sync,
{
    Ok(items)
}

#[distributed_lock(key = "pair:{left}:{right}", ttl = "5s")]
pub async fn pair<L: Display + Send + Sync, R>(left: L, right: &R) -> Option<String>
where
    R: Display + Sync + ?Sized,
{
    Some(format!("{left}{right}"))
}

#[distributed_lock(key = "elided:{name}", ttl = "5s")]
pub async fn elided(name: &str) -> Result<&str, LockError> {
    Ok(name)
}

#[distributed_lock(key = "tuple:{a}:{b}", ttl = "5s")]
pub async fn patterns((a, b): (u32, u32), Wrapper(c): Wrapper) -> Option<u32> {
    Some(a + b + c)
}

pub struct Wrapper(pub u32);

fn assert_send<T: Send>(_: T) {}

fn main() {
    let repo = Repo { items: vec![1u8] };
    assert_send(repo.first::<3>("r"));
    assert_send(show(1, &[1u8]));
    assert_send(pair(1, "x"));
    assert_send(elided("x"));
    assert_send(patterns((1, 2), Wrapper(3)));
}
