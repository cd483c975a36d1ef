//! What a fault harness does to the server: stop it answering for a while,
//! restart it with all or some of its keys lost, drop its connections,
//! and make it refuse scripts as an ACL would.

use std::sync::atomic::Ordering;

use crate::keyspace::Value;
use crate::server::Server;

impl Server {
    /// Stops answering: requests are read and wait, in order, until
    /// [`Server::resume`] (a `SIGSTOP`ped server, or one stuck in a long
    /// command, as its clients see it).
    pub fn pause(&self) {
        self.inner.paused.send_replace(true);
    }

    pub fn resume(&self) {
        self.inner.paused.send_replace(false);
    }

    /// Closes every connection; the keys stay. Their subscriptions end at
    /// once, so that a test waiting for a client to subscribe again does
    /// not count the old ones.
    pub fn drop_connections(&self) {
        self.state().pubsub.clear();
        self.inner.generation.send_modify(|g| *g += 1);
    }

    /// Runs each of the next `n` requests and closes its connection
    /// instead of answering, with what that connection had yet to write:
    /// the client sees its connection drop with the request's fate
    /// unknown, as when a reply is lost on its way back.
    pub fn lose_replies(&self, n: u64) {
        self.inner.lose.store(n, Ordering::SeqCst);
    }

    /// Whether the reply of the request just run is to be lost.
    pub(crate) fn reply_lost(&self) -> bool {
        self.inner
            .lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// A restart without persistence: every key and script is lost, every
    /// connection closed.
    pub fn restart(&self) {
        self.restart_keeping(|_, _| false);
    }

    /// A restart from a snapshot that has only some keys: those for which
    /// `keep` is true stay (called in key order, so a seeded RNG deciding
    /// gives the same keys each run), their expiries as they were. Scripts
    /// are lost (clients get `NOSCRIPT` and teach them again), connections
    /// closed, subscriptions gone.
    pub fn restart_keeping(&self, keep: impl FnMut(&[u8], &Value) -> bool) {
        {
            let mut state = self.state();
            state.keys.retain(keep);
            // A new process: no scripts, math.random from its start.
            state.scripting = crate::lua::Scripting::new();
        }
        self.drop_connections();
    }

    /// Refuses `EVAL`, `EVALSHA` and `SCRIPT` with Redis 7's `NOPERM`, as
    /// for a user whose ACL has `-@scripting`: the runtime then goes on
    /// with its script-free engine.
    pub fn refuse_scripts(&self, refuse: bool) {
        self.state().scripts_refused = refuse;
    }
}
