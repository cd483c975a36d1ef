//! How a waiter hears that a key was released or handed to it: the
//! [`ReleaseListener`] a backend gives out, and the bookkeeping of hand-offs
//! made for a grant lease, which the listener follows on its own clock.

use std::time::Duration;

use tokio::sync::watch;

#[cfg(doc)]
use super::{AcquireRequest, Backend, FairQueue};

/// Interest in the releases of one key; see [`Backend::listen`].
///
/// Backends signal a release by bumping the value in a
/// [`tokio::sync::watch`] channel: a receiver remembers the last value it saw,
/// so a release that comes while nobody is waiting is not lost.
pub struct ReleaseListener {
    releases: Option<watch::Receiver<u64>>,
    /// A fair waiter's: `Some(fence)` once the key was handed to it (`0`
    /// when no fencing token was minted).
    grant: Option<watch::Receiver<Option<u64>>>,
    /// A fair waiter's: the hand-offs on its key that wait for confirmation.
    hand_offs: Option<HandOffs>,
    /// Kept until the listener is dropped: the backend stops listening then.
    _subscription: Option<Box<dyn Send + Sync>>,
}

impl std::fmt::Debug for ReleaseListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseListener")
            .field("hears", &self.hears())
            .finish_non_exhaustive()
    }
}

impl ReleaseListener {
    /// A listener that hears nothing: [`wait`](Self::wait) sleeps its whole
    /// `max`.
    pub fn deaf() -> Self {
        ReleaseListener {
            releases: None,
            grant: None,
            hand_offs: None,
            _subscription: None,
        }
    }

    /// A listener woken whenever `releases` changes; `subscription` lives as
    /// long as the listener (a guard that unsubscribes on drop).
    pub fn new(releases: watch::Receiver<u64>, subscription: impl Send + Sync + 'static) -> Self {
        ReleaseListener {
            releases: Some(releases),
            grant: None,
            hand_offs: None,
            _subscription: Some(Box::new(subscription)),
        }
    }

    /// A fair waiter's listener (see [`FairQueue::listen_granted`]): the backend
    /// sends `Some(fence)` on `grant` when a release hands it the key (`0` as
    /// the fence when none was minted).
    pub fn granting(
        grant: watch::Receiver<Option<u64>>,
        subscription: impl Send + Sync + 'static,
    ) -> Self {
        ReleaseListener {
            releases: None,
            grant: Some(grant),
            hand_offs: None,
            _subscription: Some(Box::new(subscription)),
        }
    }

    /// A fair waiter's listener that also follows the key's hand-offs made
    /// with a grant lease (see `grant.lua`): [`wait`](Self::wait) returns
    /// when the key is handed to `token` (on `mine`, this waiter's own slot,
    /// when the message names the fence and the attempt), and when a
    /// hand-off to another waiter was not confirmed by the end of its lease,
    /// so that this one tries again and the key goes on down the line.
    ///
    /// A backend that hands keys over this way builds its fair waiters'
    /// listeners as the crate's Redis backends do:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::time::Duration;
    /// use tokio::sync::watch;
    /// use lockmacro_runtime::backend::{Handed, ReleaseListener};
    ///
    /// let token = "0123456789abcdef0123456789abcdef";
    /// // Kept by the backend: the key given for good, the hand-offs on the
    /// // key awaiting confirmation, and those to this waiter.
    /// let (_granted, grant) = watch::channel(None);
    /// let (_hand_offs, hand_offs) = watch::channel(None);
    /// let (to_this_waiter, mine) = watch::channel(None);
    /// let mut listener = ReleaseListener::granting(grant, ())
    ///     .hearing_hand_offs(hand_offs, token, mine);
    ///
    /// // A release hands the key to this waiter for a grant lease.
    /// let handed = Handed { lease: Duration::from_secs(1), fence: 7, attempt: 2 };
    /// to_this_waiter.send_replace(Some(handed));
    /// listener.wait(Duration::from_secs(5)).await;
    /// assert_eq!(listener.handed(), Some(handed));
    /// # }
    /// ```
    pub fn hearing_hand_offs(
        mut self,
        hand_offs: watch::Receiver<Option<HandOff>>,
        token: &str,
        mine: watch::Receiver<Option<Handed>>,
    ) -> Self {
        self.hand_offs = Some(HandOffs {
            receiver: hand_offs,
            token: token.to_owned(),
            acted: None,
            mine,
        });
        self
    }

    /// True while the backend can wake this listener; false for a deaf one,
    /// whose waits are plain sleeps.
    pub fn hears(&self) -> bool {
        self.releases.is_some() || self.grant.is_some()
    }

    /// For a fair waiter: `Some(fence)` once a release handed it the key.
    pub fn granted(&self) -> Option<u64> {
        self.grant.as_ref().and_then(|grant| *grant.borrow())
    }

    /// For a fair waiter whose last [`wait`](Self::wait) returned because
    /// the key was handed to it for a grant lease: the lease, the fence and
    /// the attempt the hand-off followed, when its message named them.
    pub fn handed(&mut self) -> Option<Handed> {
        let hand_offs = self.hand_offs.as_mut()?;
        if let Some(handed) = *hand_offs.mine.borrow_and_update() {
            return Some(handed);
        }
        let acted = hand_offs.acted.as_ref()?;
        (acted.token == hand_offs.token).then_some(acted.named?)
    }

    /// Returns when a release was heard since this listener was made or last
    /// returned from `wait` (for a fair waiter: when the key was handed to
    /// it, or when the grant lease of a hand-off to another waiter ended
    /// without its confirmation), or after `max`, whichever comes first; at
    /// once when the backend
    /// stops listening (its connection closed), after which the listener is
    /// deaf.
    pub async fn wait(&mut self, max: Duration) {
        let deadline = tokio::time::Instant::now() + max;
        if let Some(grant) = &mut self.grant {
            if grant.borrow().is_some() {
                return;
            }
            loop {
                if self
                    .hand_offs
                    .as_ref()
                    .is_some_and(|hand_offs| hand_offs.mine.has_changed().unwrap_or(false))
                {
                    return;
                }
                let due = self.hand_offs.as_ref().and_then(HandOffs::due);
                if let (Some((at, pending)), Some(hand_offs)) = (&due, &mut self.hand_offs)
                    && *at <= tokio::time::Instant::now()
                {
                    // Without a timer: one rounds up to the next millisecond,
                    // and this is the key handed to this waiter.
                    hand_offs.acted = Some(pending.clone());
                    return;
                }
                let wake = due.as_ref().map_or(deadline, |(at, _)| (*at).min(deadline));
                let hand_off = async {
                    match &mut self.hand_offs {
                        // `Ok(true)`: a hand-off to this waiter.
                        Some(hand_offs) => tokio::select! {
                            changed = hand_offs.receiver.changed() => changed.map(|()| false),
                            changed = hand_offs.mine.changed() => changed.map(|()| true),
                        },
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    changed = grant.changed() => {
                        if changed.is_err() {
                            // The backend stopped listening: try again at once.
                            self.grant = None;
                            self.hand_offs = None;
                        }
                        return;
                    }
                    changed = hand_off => match changed {
                        Ok(false) => {}
                        Ok(true) => return,
                        Err(_) => {
                            self.grant = None;
                            self.hand_offs = None;
                            return;
                        }
                    },
                    () = tokio::time::sleep_until(wake) => {
                        if let (Some((at, pending)), Some(hand_offs)) = (due, &mut self.hand_offs)
                            && at <= wake
                        {
                            hand_offs.acted = Some(pending);
                        }
                        return;
                    }
                }
            }
        }
        if let Some(releases) = &mut self.releases {
            match tokio::time::timeout_at(deadline, releases.changed()).await {
                Ok(Ok(())) | Err(_) => return,
                // The backend stopped listening (its connection is gone):
                // the caller may listen again.
                Ok(Err(_)) => {
                    self.releases = None;
                    return;
                }
            }
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// A hand-off of a key with a grant lease, not confirmed yet: to the waiter
/// holding `token`, whose lease ends by `until` on this process's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandOff {
    /// The token of the waiter the key was handed to.
    pub token: String,
    /// When the grant lease ends, on this process's clock.
    pub until: tokio::time::Instant,
    /// The grant lease, the fencing token minted (`0`: none) and the attempt
    /// after which the key was handed over, when the message named them.
    pub named: Option<Handed>,
}

/// What a grant message says beyond whom the key goes to (see `grant.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handed {
    /// How long the key is the waiter's without a confirmation.
    pub lease: Duration,
    /// The fencing token minted for the waiter (`0`: none).
    pub fence: u64,
    /// The number of the waiter's attempt ([`AcquireRequest::attempt`])
    /// that last found it in line: the lease runs from when that attempt
    /// was sent.
    pub attempt: u32,
}

struct HandOffs {
    receiver: watch::Receiver<Option<HandOff>>,
    /// Hand-offs to this waiter, each kept until this waiter has read it.
    mine: watch::Receiver<Option<Handed>>,
    /// This waiter's token.
    token: String,
    /// The hand-off this listener last returned for: it returns once for
    /// each, so that a hand-off whose confirmation went unheard costs one
    /// attempt, not a spin.
    acted: Option<HandOff>,
}

impl HandOffs {
    /// When to try again for the hand-off waiting for confirmation, if there
    /// is one this listener has not acted on: at once when it is to this
    /// waiter (to confirm it), else once its lease is over.
    fn due(&self) -> Option<(tokio::time::Instant, HandOff)> {
        let pending = self.receiver.borrow().clone()?;
        if self.acted.as_ref() == Some(&pending) {
            return None;
        }
        let at = if pending.token == self.token {
            tokio::time::Instant::now()
        } else {
            pending.until
        };
        Some((at, pending))
    }
}
