//! Methods with every kind of receiver; `self` in keys and in the body.
#![deny(warnings)]

use std::sync::Arc;

use lockmacro_runtime::{LockError, distributed_lock};

pub struct Account {
    pub id: u64,
    pub balance: i64,
}

impl Account {
    #[distributed_lock(key = "account:{self.id}", ttl = "30s")]
    pub async fn by_ref(&self) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:{self.id}", ttl = "30s")]
    pub async fn by_mut(&mut self, amount: i64) -> Result<i64, LockError> {
        self.balance += amount;
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:{self.id}", ttl = "30s")]
    pub async fn by_value(self) -> Result<Account, LockError> {
        Ok(self)
    }

    #[distributed_lock(key = "account:{self.id}", ttl = "30s")]
    pub async fn by_mut_value(mut self) -> Result<Account, LockError> {
        self.balance = 0;
        Ok(self)
    }

    #[distributed_lock(key = "account:{self.id}", ttl = "30s")]
    pub async fn by_arc(self: Arc<Self>) -> Option<i64> {
        Some(self.balance)
    }

    #[distributed_lock(key = "account:{self.id}", ttl = "30s")]
    pub async fn by_box(self: Box<Self>) {
        let _ = self.balance;
    }

    #[distributed_lock(key = "account:{self.id}", ttl = "30s")]
    pub async fn by_typed_ref<'a>(self: &'a Self, note: &'a str) -> Option<&'a str> {
        Some(note)
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let mut account = Account { id: 1, balance: 0 };
    assert_send(account.by_ref());
    assert_send(account.by_mut(1));
    assert_send(Account { id: 2, balance: 0 }.by_value());
    assert_send(Account { id: 3, balance: 0 }.by_mut_value());
    assert_send(Arc::new(Account { id: 4, balance: 0 }).by_arc());
    assert_send(Box::new(Account { id: 5, balance: 0 }).by_box());
    assert_send(account.by_typed_ref("note"));
}
