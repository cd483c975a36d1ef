//! What an obtain may own on the server before it has a lease to show for it.

use std::sync::Arc;

use tokio_util::task::TaskTracker;

use crate::backend::Backend;

/// What an obtain may own on the server before it hands back a lease: an
/// attempt whose reply was not read (its future dropped, or timed out), a
/// grant that came too late to be used, or a fair waiter's place in a queue.
/// Given back while armed, by a release with the call's token: that deletes
/// only keys holding the token, and removes the token's queue entry (handing
/// the key on should it have been handed to this call meanwhile).
///
/// It borrows what it would give back: only a claim dropped while armed
/// copies it, for the background release, which the locker's tracker counts
/// so that a shutdown waits for it.
pub(crate) struct Claim<'a> {
    backend: &'a Arc<dyn Backend>,
    tracker: &'a TaskTracker,
    wire_keys: &'a [String],
    token: &'a str,
    /// True while the server may hold something of this call's.
    pub(crate) armed: bool,
}

impl<'a> Claim<'a> {
    /// A claim on nothing yet: the first attempt arms it.
    pub(crate) fn new(
        backend: &'a Arc<dyn Backend>,
        tracker: &'a TaskTracker,
        wire_keys: &'a [String],
        token: &'a str,
    ) -> Self {
        Claim {
            backend,
            tracker,
            wire_keys,
            token,
            armed: false,
        }
    }

    /// Gives back now, if armed. Disarmed only once the release answered:
    /// a caller dropped while it is under way leaves the claim armed, and
    /// its drop sends the release again.
    pub(crate) async fn give_back(&mut self) {
        if self.armed {
            release(&**self.backend, self.wire_keys, self.token).await;
            self.armed = false;
        }
    }
}

async fn release(backend: &dyn Backend, wire_keys: &[String], token: &str) {
    if let Err(error) = backend.release(wire_keys, token).await {
        tracing::debug!(target: "lockmacro", %error, "could not give back an unfinished obtain; what it took lapses at its ttl");
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !std::mem::take(&mut self.armed) {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (backend, wire_keys, token) = (
                self.backend.clone(),
                self.wire_keys.to_vec(),
                self.token.to_owned(),
            );
            self.tracker.spawn_on(
                async move { release(&*backend, &wire_keys, &token).await },
                &runtime,
            );
        }
    }
}
