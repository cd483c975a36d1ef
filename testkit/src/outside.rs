//! A backend written outside the crate, against its public `backend` module
//! only: a map in a mutex. The behaviour suite runs on it as on the
//! backends that ship with the crate, which shows that the trait and its
//! requests are enough to write one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use lockmacro_runtime::LockError;
use lockmacro_runtime::backend::{AcquireRequest, Acquired, Backend, BoxFuture, TOKEN_LEN};
use tokio::time::Instant;

/// Lock keys with their value and expiry, and fence counters.
#[derive(Default)]
pub struct MapBackend {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    held: HashMap<String, (String, Instant)>,
    counters: HashMap<String, u64>,
}

impl State {
    /// The value of `key`, if it has not expired.
    fn value(&mut self, key: &str) -> Option<&str> {
        let now = Instant::now();
        self.held.retain(|_, (_, expiry)| *expiry > now);
        self.held.get(key).map(|(value, _)| value.as_str())
    }

    fn owns(&mut self, keys: &[String], token: &str) -> bool {
        token.len() == TOKEN_LEN
            && keys.iter().all(|key| {
                self.value(key)
                    .is_some_and(|value| value.starts_with(token))
            })
    }
}

impl MapBackend {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Backend for MapBackend {
    fn acquire<'a>(
        &'a self,
        req: AcquireRequest<'a>,
    ) -> BoxFuture<'a, Result<Acquired, LockError>> {
        let mut state = self.state();
        let result = (|| {
            for (index, key) in req.keys.iter().enumerate() {
                if let Some(value) = state.value(key)
                    && value != req.value
                {
                    let remaining = state.held[key].1 - Instant::now();
                    return Ok(Acquired::Busy {
                        index,
                        remaining: Some(remaining),
                    });
                }
            }
            let expiry = Instant::now() + req.ttl;
            for key in req.keys {
                state
                    .held
                    .insert(key.clone(), (req.value.to_owned(), expiry));
            }
            let fence = req.fence_key.map(|counter| {
                let next = state.counters.entry(counter.to_owned()).or_default();
                *next += 1;
                *next
            });
            Ok(Acquired::Obtained { fence })
        })();
        Box::pin(std::future::ready(result))
    }

    fn refresh<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        let mut state = self.state();
        let owned = state.owns(keys, token);
        if owned {
            for key in keys {
                if let Some((_, expiry)) = state.held.get_mut(key) {
                    *expiry = Instant::now() + ttl;
                }
            }
        }
        Box::pin(std::future::ready(Ok(owned)))
    }

    fn release<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        let mut state = self.state();
        let mut all = true;
        for key in keys {
            if state.owns(std::slice::from_ref(key), token) {
                state.held.remove(key);
            } else {
                all = false;
            }
        }
        Box::pin(std::future::ready(Ok(all)))
    }

    fn remaining<'a>(
        &'a self,
        keys: &'a [String],
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Duration>, LockError>> {
        let mut state = self.state();
        let remaining = state.owns(keys, token).then(|| {
            let now = Instant::now();
            keys.iter()
                .map(|key| state.held[key].1 - now)
                .min()
                .unwrap_or_default()
        });
        Box::pin(std::future::ready(Ok(remaining)))
    }

    fn name(&self) -> &'static str {
        "map"
    }
}
