//! What an operator does to a key, over any [`Transport`]: see what holds
//! it, list the keys under a prefix, clear it, and turn a write into a read.

use std::time::Duration;

use super::locks::Protocol;
use super::protocol::kind_of;
use super::scripts::{DOWNGRADE, FORCE_RELEASE, INSPECT};
use super::transport::Transport;
use crate::LockError;
use crate::backend::keys::{is_companion, prefix_pattern};
use crate::backend::{HeldAs, Holder, Inspection, TOKEN_LEN};
use crate::error::{BackendError, BackendErrorKind};

/// A token no holder or waiter has (tokens are hex): the force-release
/// hands the key over as a release would, without passing over anyone's
/// entry as its own.
const NOBODY: &str = "--------------------------------";

impl<T: Transport> Protocol<T> {
    pub(super) async fn inspect_scripted(
        &self,
        key: &str,
        fence_key: &str,
    ) -> Result<Inspection, LockError> {
        let keys = [key.to_owned(), fence_key.to_owned()];
        self.transport.check(&keys[..1], Some(fence_key))?;
        let queue = T::COMPANIONS.queue(key);
        let reply: Vec<String> = self.script("inspect", &keys, &INSPECT, &[queue]).await?;
        inspection(&reply).ok_or_else(|| {
            BackendError::new(
                BackendErrorKind::Other,
                format!("{}: inspect `{key}`", self.transport.name()),
                format!("unexpected reply {reply:?} from the inspect script"),
            )
            .into()
        })
    }

    pub(super) async fn force_release_scripted(&self, key: &str) -> Result<bool, LockError> {
        let keys = [key.to_owned()];
        self.transport.check(&keys, None)?;
        let args = [NOBODY.to_owned(), T::COMPANIONS.flag(key)];
        let done: i64 = self
            .script("force-release", &keys, &FORCE_RELEASE, &args)
            .await?;
        Ok(done == 1)
    }

    /// The keys under `prefix` that may be locks: every key the scan finds
    /// but the fence counters, queues, waiters flags and holders hashes;
    /// sorted.
    pub(in crate::backend) async fn keys(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let mut keys = self.transport.scan(&prefix_pattern(prefix)).await?;
        keys.retain(|key| !is_companion(key));
        keys.sort_unstable();
        keys.dedup();
        Ok(keys)
    }

    pub(super) async fn downgrade_scripted(
        &self,
        key: &str,
        token: &str,
    ) -> Result<bool, LockError> {
        let keys = [key.to_owned()];
        self.transport.check(&keys, None)?;
        if token.len() != TOKEN_LEN {
            return Ok(false);
        }
        let done: i64 = self
            .script("downgrade", &keys, &DOWNGRADE, &[token])
            .await?;
        Ok(done == 1)
    }
}

/// Reads the reply of `inspect.lua`.
fn inspection(reply: &[String]) -> Option<Inspection> {
    let [kind, fence, waiters, holders @ ..] = reply else {
        return None;
    };
    let mut seen = Inspection::free();
    seen.kind = kind.parse().ok().and_then(kind_of);
    seen.fence = fence.parse().ok();
    seen.waiters = waiters.parse().ok()?;
    for holder in holders.chunks(3) {
        let [held_as, metadata, remaining] = holder else {
            return None;
        };
        let held_as = match held_as.as_str() {
            "lock" => HeldAs::Lock,
            "permit" => HeldAs::Permit,
            "read" => HeldAs::Read,
            "write" => HeldAs::Write,
            _ => return None,
        };
        let remaining = remaining.parse::<u64>().ok().map(Duration::from_millis);
        seen.holders.push(Holder::new(held_as, metadata, remaining));
    }
    Some(seen)
}
