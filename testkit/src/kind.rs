//! Which backend a fixture is on, what each backend can do, and the macro
//! that runs one scenario on every backend that can run it.
//!
//! The table of capabilities is written twice: as [`Kind::has`], which tests
//! ask at run time, and as the rules of `__if_capable!`, which
//! [`for_each_backend!`](crate::for_each_backend) asks when it expands. Every
//! generated group of tests asserts, at compile time, that its backend has
//! what the scenario needs (and lacks what it must lack), and the unit test
//! at the end checks every pair against the other copy.

/// A backend under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// One `redis-server`.
    Redis,
    /// One `valkey-server`: the Redis backend, on Valkey.
    Valkey,
    /// A Redis Cluster of three masters with a replica each.
    Cluster,
    /// Three independent masters, majority quorum.
    Redlock,
    /// The master of a Sentinel deployment (two replicas, three sentinels).
    Sentinel,
    /// The crate's in-memory backend.
    Memory,
    /// A backend written outside the crate, against the public `backend`
    /// module only ([`crate::outside::MapBackend`]).
    Outside,
    /// An etcd member (feature `etcd`).
    Etcd,
    /// A PostgreSQL server, a database per test (feature `postgres`).
    Postgres,
}

/// What a backend can do beyond what every backend does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Waiters served in arrival order (`ObtainOptions::fair`).
    FairQueue,
    /// Shares of one key: semaphores (`permits`) and read-write locks.
    Shares,
    /// Keys of several hash slots locked together, and a lock with a fence
    /// counter in another slot: everywhere but on a cluster.
    SeveralSlots,
    /// Leases shorter than a second that run out in the store, and fence
    /// tokens that count one by one: not on etcd, whose leases are whole
    /// seconds and whose tokens are revisions.
    ShortLeases,
    /// A store that a test can read and write behind the library's back
    /// ([`crate::Fixture::lease_left`], [`crate::Fixture::overwrite`]), and
    /// servers it can stop and freeze when they are its own.
    Servers,
    /// `replicas = N`: an obtain that waits until replicas have the lock.
    Replicas,
    /// `Locker::inspect` and `Locker::force_release`: see and clear a key.
    Inspect,
    /// `Locker::list`: the keys held under a prefix.
    List,
}

impl Kind {
    /// Every backend, in the order the suites list them.
    pub const ALL: [Kind; 9] = [
        Kind::Redis,
        Kind::Valkey,
        Kind::Cluster,
        Kind::Redlock,
        Kind::Sentinel,
        Kind::Memory,
        Kind::Outside,
        Kind::Etcd,
        Kind::Postgres,
    ];

    /// Whether this backend can do `capability`.
    pub const fn has(self, capability: Capability) -> bool {
        use Capability::*;
        match self {
            Kind::Redis | Kind::Valkey | Kind::Sentinel => matches!(
                capability,
                FairQueue
                    | Shares
                    | SeveralSlots
                    | ShortLeases
                    | Servers
                    | Replicas
                    | Inspect
                    | List
            ),
            Kind::Cluster => matches!(
                capability,
                FairQueue | Shares | ShortLeases | Servers | Replicas | Inspect | List
            ),
            Kind::Redlock => matches!(
                capability,
                SeveralSlots | ShortLeases | Servers | Inspect | List
            ),
            Kind::Memory => matches!(
                capability,
                FairQueue | Shares | SeveralSlots | ShortLeases | Inspect | List
            ),
            Kind::Outside => matches!(capability, FairQueue | SeveralSlots | ShortLeases),
            Kind::Etcd => matches!(
                capability,
                FairQueue | Shares | SeveralSlots | Servers | Inspect | List
            ),
            Kind::Postgres => matches!(
                capability,
                FairQueue | Shares | SeveralSlots | ShortLeases | Servers | Inspect | List
            ),
        }
    }

    /// Whether this backend can do every one of `capabilities`.
    pub const fn has_all(self, capabilities: &[Capability]) -> bool {
        let mut i = 0;
        while i < capabilities.len() {
            if !self.has(capabilities[i]) {
                return false;
            }
            i += 1;
        }
        true
    }
}

/// Expands to the first brace group when backend `$kind` has every
/// capability in the list, and to the second otherwise: the compile-time
/// copy of [`Kind::has`].
#[doc(hidden)]
#[macro_export]
macro_rules! __if_capable {
    ($kind:ident, [] { $($then:tt)* } $else:tt) => { $($then)* };
    (Redis, [$(FairQueue)? $(Shares)? $(SeveralSlots)? $(ShortLeases)? $(Servers)? $(Replicas)? $(Inspect)? $(List)? $(, $rest:ident)*] $then:tt $else:tt) => {
        $crate::__if_capable!(Redis, [$($rest),*] $then $else);
    };
    (Valkey, [$(FairQueue)? $(Shares)? $(SeveralSlots)? $(ShortLeases)? $(Servers)? $(Replicas)? $(Inspect)? $(List)? $(, $rest:ident)*] $then:tt $else:tt) => {
        $crate::__if_capable!(Valkey, [$($rest),*] $then $else);
    };
    (Cluster, [$(FairQueue)? $(Shares)? $(ShortLeases)? $(Servers)? $(Replicas)? $(Inspect)? $(List)? $(, $rest:ident)*] $then:tt $else:tt) => {
        $crate::__if_capable!(Cluster, [$($rest),*] $then $else);
    };
    (Redlock, [$(SeveralSlots)? $(ShortLeases)? $(Servers)? $(Inspect)? $(List)? $(, $rest:ident)*] $then:tt $else:tt) => {
        $crate::__if_capable!(Redlock, [$($rest),*] $then $else);
    };
    (Sentinel, [$(FairQueue)? $(Shares)? $(SeveralSlots)? $(ShortLeases)? $(Servers)? $(Replicas)? $(Inspect)? $(List)? $(, $rest:ident)*] $then:tt $else:tt) => {
        $crate::__if_capable!(Sentinel, [$($rest),*] $then $else);
    };
    (Memory, [$(FairQueue)? $(Shares)? $(SeveralSlots)? $(ShortLeases)? $(Inspect)? $(List)? $(, $rest:ident)*] $then:tt $else:tt) => {
        $crate::__if_capable!(Memory, [$($rest),*] $then $else);
    };
    (Outside, [$(FairQueue)? $(SeveralSlots)? $(ShortLeases)? $(, $rest:ident)*] $then:tt $else:tt) => {
        $crate::__if_capable!(Outside, [$($rest),*] $then $else);
    };
    (Etcd, [$(FairQueue)? $(Shares)? $(SeveralSlots)? $(Servers)? $(Inspect)? $(List)? $(, $rest:ident)*] $then:tt $else:tt) => {
        $crate::__if_capable!(Etcd, [$($rest),*] $then $else);
    };
    (Postgres, [$(FairQueue)? $(Shares)? $(SeveralSlots)? $(ShortLeases)? $(Servers)? $(Inspect)? $(List)? $(, $rest:ident)*] $then:tt $else:tt) => {
        $crate::__if_capable!(Postgres, [$($rest),*] $then $else);
    };
    // A capability the backend lacks.
    ($kind:ident, [$($caps:ident),*] $then:tt { $($else:tt)* }) => { $($else)* };
}

/// Expands the items in braces when backend `$kind` lacks every capability
/// in the list.
#[doc(hidden)]
#[macro_export]
macro_rules! __if_lacking {
    ($kind:ident, [] { $($items:tt)* }) => { $($items)* };
    ($kind:ident, [$cap:ident $(, $rest:ident)*] $items:tt) => {
        $crate::__if_capable!($kind, [$cap] {} {
            $crate::__if_lacking!($kind, [$($rest),*] $items);
        });
    };
}

/// Expands the items in braces when `$kind` is one of the listed backends,
/// or when the list is empty.
#[doc(hidden)]
#[macro_export]
macro_rules! __if_listed {
    ($kind:ident, [] { $($items:tt)* }) => { $($items)* };
    ($kind:ident, [$($only:ident),+] $items:tt) => {
        $crate::__if_among!($kind, [$($only),+] $items);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __if_among {
    ($kind:ident, [] $items:tt) => {};
    (Redis, [Redis $(, $rest:ident)*] { $($items:tt)* }) => { $($items)* };
    (Valkey, [Valkey $(, $rest:ident)*] { $($items:tt)* }) => { $($items)* };
    (Cluster, [Cluster $(, $rest:ident)*] { $($items:tt)* }) => { $($items)* };
    (Redlock, [Redlock $(, $rest:ident)*] { $($items:tt)* }) => { $($items)* };
    (Sentinel, [Sentinel $(, $rest:ident)*] { $($items:tt)* }) => { $($items)* };
    (Memory, [Memory $(, $rest:ident)*] { $($items:tt)* }) => { $($items)* };
    (Outside, [Outside $(, $rest:ident)*] { $($items:tt)* }) => { $($items)* };
    (Etcd, [Etcd $(, $rest:ident)*] { $($items:tt)* }) => { $($items)* };
    (Postgres, [Postgres $(, $rest:ident)*] { $($items:tt)* }) => { $($items)* };
    ($kind:ident, [$other:ident $(, $rest:ident)*] $items:tt) => {
        $crate::__if_among!($kind, [$($rest),*] $items);
    };
}

/// One test per scenario on every backend that has the capabilities it
/// needs, each in a module named after its backend (`on_redis::case`,
/// `on_valkey::case`, `on_cluster::case`, …, `on_a_backend_written_outside_the_crate::case`).
///
/// ```ignore
/// lockmacro_testkit::for_each_backend! {
///     needs: [FairQueue, Shares],
///     // `shared`: the binary's cluster, Sentinel and etcd servers, each
///     // test under a namespace of its own; `own`: servers of the test's own.
///     servers: own,
///     // The `#[tokio::test]` arguments of every case ...
///     runtime: (flavor = "multi_thread", worker_threads = 2),
///     // ... unless the case gives its own. Each is an `async fn(&Fixture)`.
///     cases: crate::fair::[
///         arrival_order_is_respected,
///         fair_locks_exclude(flavor = "current_thread"),
///     ],
/// }
/// ```
///
/// Several groups of cases, each with its own needs, share the backends'
/// modules:
///
/// ```ignore
/// lockmacro_testkit::for_each_backend! {
///     runtime: (flavor = "multi_thread", worker_threads = 2),
///     cases: [crate::cases],
///     { needs: [], servers: shared } => [obtain_then_busy_then_release],
///     { needs: [SeveralSlots, ShortLeases], servers: shared } => [explicit_fence_key_is_used],
///     // Where the backend lacks a capability: the refusal.
///     { needs: [], lacks: [Shares], servers: shared } => [permits_are_refused],
/// }
/// ```
///
/// `only: [Redis, Cluster]` after `needs` (and `lacks`) narrows the backends
/// further, for a scenario that looks at what only some of them store. The
/// etcd module is compiled with the calling crate's `etcd` feature, the
/// PostgreSQL one with its `postgres` feature.
#[macro_export]
macro_rules! for_each_backend {
    (
        needs: [$($cap:ident),* $(,)?],
        $(lacks: [$($lack:ident),* $(,)?],)?
        $(only: [$($only:ident),* $(,)?],)?
        servers: $servers:ident,
        runtime: $runtime:tt,
        cases: $($module:ident)::+ :: [$($cases:tt)*] $(,)?
    ) => {
        $crate::for_each_backend! {
            runtime: $runtime,
            cases: [$($module)::+],
            {
                needs: [$($cap),*],
                lacks: [$($($lack),*)?],
                only: [$($($only),*)?],
                servers: $servers
            } => [$($cases)*],
        }
    };
    (
        runtime: $runtime:tt,
        cases: $module:tt,
        $({
            needs: [$($cap:ident),* $(,)?]
            $(, lacks: [$($lack:ident),* $(,)?])?
            $(, only: [$($only:ident),* $(,)?])?
            , servers: $servers:ident $(,)?
        } => $cases:tt),+ $(,)?
    ) => {
        $crate::__backend_module!(Redis, on_redis, $runtime, $module, $([$($cap),*] [$($($lack),*)?] [$($($only),*)?] $servers $cases)+);
        $crate::__backend_module!(Valkey, on_valkey, $runtime, $module, $([$($cap),*] [$($($lack),*)?] [$($($only),*)?] $servers $cases)+);
        $crate::__backend_module!(Cluster, on_cluster, $runtime, $module, $([$($cap),*] [$($($lack),*)?] [$($($only),*)?] $servers $cases)+);
        $crate::__backend_module!(Redlock, on_redlock, $runtime, $module, $([$($cap),*] [$($($lack),*)?] [$($($only),*)?] $servers $cases)+);
        #[cfg(feature = "sentinel")]
        $crate::__backend_module!(Sentinel, on_sentinel, $runtime, $module, $([$($cap),*] [$($($lack),*)?] [$($($only),*)?] $servers $cases)+);
        $crate::__backend_module!(Memory, on_memory, $runtime, $module, $([$($cap),*] [$($($lack),*)?] [$($($only),*)?] $servers $cases)+);
        $crate::__backend_module!(Outside, on_a_backend_written_outside_the_crate, $runtime, $module, $([$($cap),*] [$($($lack),*)?] [$($($only),*)?] $servers $cases)+);
        #[cfg(feature = "etcd")]
        $crate::__backend_module!(Etcd, on_etcd, $runtime, $module, $([$($cap),*] [$($($lack),*)?] [$($($only),*)?] $servers $cases)+);
        #[cfg(feature = "postgres")]
        $crate::__backend_module!(Postgres, on_postgres, $runtime, $module, $([$($cap),*] [$($($lack),*)?] [$($($only),*)?] $servers $cases)+);
    };
}

/// One backend's module of [`for_each_backend!`], with the cases of every
/// group it qualifies for.
#[doc(hidden)]
#[macro_export]
macro_rules! __backend_module {
    ($kind:ident, $name:ident, $runtime:tt, $module:tt, $($needs:tt $lacks:tt $only:tt $servers:ident $cases:tt)+) => {
        mod $name {
            $($crate::__group!($kind, $needs, $lacks, $only, $servers, $runtime, $module, $cases);)+
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __group {
    ($kind:ident, [$($cap:ident),*], [$($lack:ident),*], $only:tt, $servers:ident, $runtime:tt, [$($module:ident)::+], [$($cases:tt)*]) => {
        $crate::__if_listed!($kind, $only {
            $crate::__if_capable!($kind, [$($cap),*] {
                $crate::__if_lacking!($kind, [$($lack),*] {
                    const _: () = assert!(
                        $crate::Kind::$kind.has_all(&[$($crate::Capability::$cap),*])
                            $(&& !$crate::Kind::$kind.has($crate::Capability::$lack))*,
                        "the capability table of `__if_capable!` disagrees with `Kind::has`",
                    );
                    $crate::__cases!($kind, $servers, $runtime, [$($module)::+], $($cases)*);
                });
            } {});
        });
    };
}

/// The tests of one backend's module, one per case.
#[doc(hidden)]
#[macro_export]
macro_rules! __cases {
    ($kind:ident, $servers:ident, $runtime:tt, [$($module:ident)::+] $(,)?) => {};
    ($kind:ident, $servers:ident, $runtime:tt, [$($module:ident)::+], $case:ident ($($own:tt)*) $(, $($rest:tt)*)?) => {
        $crate::__case!($kind, $servers, ($($own)*), [$($module)::+], $case);
        $crate::__cases!($kind, $servers, $runtime, [$($module)::+], $($($rest)*)?);
    };
    ($kind:ident, $servers:ident, $runtime:tt, [$($module:ident)::+], $case:ident $(, $($rest:tt)*)?) => {
        $crate::__case!($kind, $servers, $runtime, [$($module)::+], $case);
        $crate::__cases!($kind, $servers, $runtime, [$($module)::+], $($($rest)*)?);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __case {
    ($kind:ident, shared, ($($runtime:tt)*), [$($module:ident)::+], $case:ident) => {
        #[::tokio::test($($runtime)*)]
        async fn $case() {
            let fixture = $crate::Fixture::on($crate::Kind::$kind).await;
            $($module)::+::$case(&fixture).await;
        }
    };
    ($kind:ident, own, ($($runtime:tt)*), [$($module:ident)::+], $case:ident) => {
        #[::tokio::test($($runtime)*)]
        async fn $case() {
            let fixture = $crate::Fixture::own_servers($crate::Kind::$kind).await;
            $($module)::+::$case(&fixture).await;
        }
    };
}

#[cfg(test)]
mod tests {
    use super::{Capability, Kind};

    /// `__if_capable!` lists a capability for a backend exactly when
    /// [`Kind::has`] says it has it.
    #[test]
    fn the_macro_table_agrees_with_kind_has() {
        macro_rules! listed {
            ($kind:ident, $cap:ident) => {{
                // Set only when the macro expands its items.
                #[allow(unused_mut, unused_assignments)]
                let mut listed = false;
                crate::__if_capable!($kind, [$cap] {
                    listed = true;
                } {});
                assert_eq!(
                    listed,
                    Kind::$kind.has(Capability::$cap),
                    "{:?} and {:?}",
                    Kind::$kind,
                    Capability::$cap,
                );
            }};
        }
        macro_rules! every_capability {
            ($($kind:ident),*) => {$(
                listed!($kind, FairQueue);
                listed!($kind, Shares);
                listed!($kind, Inspect);
                listed!($kind, List);
                listed!($kind, SeveralSlots);
                listed!($kind, ShortLeases);
                listed!($kind, Servers);
                listed!($kind, Replicas);
            )*};
        }
        every_capability!(
            Redis, Valkey, Cluster, Redlock, Sentinel, Memory, Outside, Etcd, Postgres
        );
        assert_eq!(Kind::ALL.len(), 9, "a kind is missing above");
    }
}
