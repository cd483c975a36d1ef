//! Fair waiters: `lockmacro_queue` orders them; the first in line takes the
//! key itself when a release wakes it.

use super::PostgresBackend;
use crate::backend::{BoxFuture, FairQueue, ReleaseListener};

impl FairQueue for PostgresBackend {
    /// No hand-off message: every waiter hears the release of the key (or
    /// the departure of a waiter, which releases its place) and tries
    /// again; only the first in line may take it, so the others find it
    /// held and wait on.
    fn listen_granted<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
    ) -> BoxFuture<'a, ReleaseListener> {
        let _ = token;
        Box::pin(self.releases.listen(key))
    }
}
