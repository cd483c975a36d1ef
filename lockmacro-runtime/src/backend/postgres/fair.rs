//! Fair waiters: `lockmacro_queue` orders them; the first in line takes the
//! key itself when a release wakes it.

use super::PostgresBackend;
use crate::backend::FairQueue;
use crate::backend::shared::{as_any_waiter, forward};

impl FairQueue for PostgresBackend {
    forward!(as_any_waiter:
        /// No hand-off message: every waiter hears the release of the key (or
        /// the departure of a waiter, which releases its place) and tries
        /// again; only the first in line may take it, so the others find it
        /// held and wait on.
        listen_granted,
    );
}
