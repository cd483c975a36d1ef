//! What an operator does to a key on every master: see what holds it (the
//! majority's view), list the keys (on any of them) and clear it (on each
//! of them).

use std::sync::Arc;

use super::RedlockBackend;
use super::fanout::{Answer, Tally};
use crate::LockError;
use crate::backend::{Backend, Inspection};

impl RedlockBackend {
    /// Asks every master and waits for each (within the response timeout);
    /// the view a majority of the masters share (the kind and who holds
    /// what, whatever the leases have left), else the first answer. The
    /// fence is the largest token a majority of the masters have reached:
    /// the one an obtain handed out, which it wrote back to the masters
    /// that granted it.
    pub(super) async fn inspect_all(
        &self,
        key: &str,
        fence_key: &str,
    ) -> Result<Inspection, LockError> {
        let (key, fence_key): (Arc<str>, Arc<str>) = (key.into(), fence_key.into());
        let timeout = self.inner.config.response_timeout;
        let mut set = self.fan_out(self.masters(), timeout, "inspect", move |backend| {
            let (key, fence_key) = (key.clone(), fence_key.clone());
            async move { Ok(Answer::Yes(backend.inspect(&key, &fence_key).await?)) }
        });
        let mut tally: Tally<Inspection, ()> = Tally::default();
        while let Some(reply) = set.next().await {
            tally.add(reply);
        }
        let views: Vec<&Inspection> = tally.yes.iter().map(|(_, seen)| seen).collect();
        let Some(first) = views.first().filter(|_| views.len() >= self.quorum()) else {
            return Err(self.no_quorum("inspect", &tally).into());
        };
        let same = |a: &Inspection, b: &Inspection| {
            a.kind == b.kind
                && a.holders.len() == b.holders.len()
                && a.holders
                    .iter()
                    .zip(&b.holders)
                    .all(|(a, b)| a.held_as == b.held_as && a.metadata == b.metadata)
        };
        let majority = views
            .iter()
            .find(|view| views.iter().filter(|other| same(view, other)).count() >= self.quorum())
            .unwrap_or(first);
        let mut seen = (*majority).clone();
        let mut fences: Vec<u64> = views.iter().filter_map(|view| view.fence).collect();
        fences.sort_unstable_by(|a, b| b.cmp(a));
        seen.fence = fences.get(self.quorum() - 1).copied();
        Ok(seen)
    }

    /// The keys under `prefix` on any master, asking every master and
    /// waiting for each (within the response timeout): a key a minority
    /// holds is listed too, and its inspection tells. Fails when fewer than
    /// a majority answered.
    pub(super) async fn keys_all(&self, prefix: &str) -> Result<Vec<String>, LockError> {
        let prefix: Arc<str> = prefix.into();
        let timeout = self.inner.config.response_timeout;
        let mut set = self.fan_out(self.masters(), timeout, "list", move |backend| {
            let prefix = prefix.clone();
            async move { Ok(Answer::Yes(backend.keys(&prefix).await?)) }
        });
        let mut tally: Tally<Vec<String>, ()> = Tally::default();
        while let Some(reply) = set.next().await {
            tally.add(reply);
        }
        if tally.answered() < self.quorum() {
            return Err(self.no_quorum("list", &tally).into());
        }
        let mut keys: Vec<String> = tally.yes.into_iter().flat_map(|(_, keys)| keys).collect();
        keys.sort_unstable();
        keys.dedup();
        Ok(keys)
    }

    /// Deletes every lease on `key` on every master, waiting for each
    /// (within the response timeout); true when any of them held it.
    /// Fails when fewer than a majority answered: the key may still be
    /// held.
    pub(super) async fn force_release_all(&self, key: &str) -> Result<bool, LockError> {
        let key: Arc<str> = key.into();
        let timeout = self.inner.config.response_timeout;
        let mut set = self.fan_out(self.masters(), timeout, "force-release", move |backend| {
            let key = key.clone();
            async move {
                Ok(match backend.force_release(&key).await? {
                    true => Answer::Yes(()),
                    false => Answer::No(()),
                })
            }
        });
        let mut tally: Tally<(), ()> = Tally::default();
        while let Some(reply) = set.next().await {
            tally.add(reply);
        }
        if tally.answered() < self.quorum() {
            return Err(self.no_quorum("force-release", &tally).into());
        }
        Ok(!tally.yes.is_empty())
    }
}
