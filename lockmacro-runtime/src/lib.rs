// The crate documentation is the user's guide, one chapter per file of
// `src/guide/`: doctests and intra-doc links work in them as here.
#![doc = include_str!("guide/1-start.md")]
#![doc = include_str!("guide/2-locks.md")]
#![doc = include_str!("guide/3-shares-and-operations.md")]
#![doc = include_str!("guide/4-fencing-and-services.md")]
#![doc = include_str!("guide/5-wire-and-observability.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]
#![forbid(unsafe_code)]

pub mod backend;
mod claim;
#[cfg(doctest)]
mod doc_examples;
mod downgrade;
mod election;
mod error;
#[cfg(feature = "redis")]
mod fenced;
mod global;
mod guard;
mod hold;
mod inspect;
mod kind;
mod lease;
mod list;
mod lock;
mod locker;
mod metrics;
mod options;
mod reentry;
mod registry;
mod retry;
mod rules;
mod shutdown;
mod signal;
#[cfg(feature = "tower")]
mod tower;
#[cfg(feature = "postgres")]
mod transaction;
mod url;
mod wait;
mod watchdog;

#[doc(hidden)]
pub mod __private;
#[doc(hidden)]
pub mod missing_feature;

#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use crate::backend::ClusterBackend;
#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub use crate::backend::SentinelBackend;
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use crate::backend::{EtcdBackend, EtcdConfig};
pub use crate::backend::{HeldAs, Holder, Inspection, MemoryBackend};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use crate::backend::{POSTGRES_MIGRATION, PostgresBackend, PostgresConfig};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use crate::backend::{RedisBackend, RedisConfig, RedlockBackend, Scripts};
pub use crate::election::{Election, IntoNext, LeaderInfo, Leadership, Next, Term};
pub use crate::error::{BackendError, BackendErrorKind, LockError};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use crate::fenced::{FencedStore, FencedValue};
pub use crate::global::{global, set_global};
pub use crate::guard::LockGuard;
pub use crate::hold::{HoldOptions, OnLost};
pub use crate::kind::KeyKind;
pub use crate::lease::MAX_TTL;
pub use crate::list::KeyInfo;
pub use crate::lock::Lock;
pub use crate::locker::Locker;
pub use crate::options::{Fencing, ObtainOptions};
pub use crate::registry::ShutdownReport;
pub use crate::retry::RetryStrategy;
pub use crate::signal::shutdown_signal;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use crate::tower::{
    HostAndRequest, HttpResponses, LockLayer, LockResponses, LockService, RequestMetadata,
};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use crate::transaction::TransactionLock;
#[doc(inline)]
pub use lockmacro::distributed_lock;
