//! S1: uncontended acquire + release, one key per task, next to the floor.
//!
//! Every variant of a table runs in the same run, taking turns a tenth of the
//! cycles at a time, so that a burst of load on the machine falls on all of
//! them alike; the table prints the median of `--runs` such runs. CPU per
//! cycle is the process CPU time of the bench (client) and of the servers
//! the variant talks to, over the variant's turns, divided by its cycles.

use std::time::{Duration, Instant};

use lockmacro_runtime::{LockError, Locker, ObtainOptions, distributed_lock};
use redis::Script;
use redis::aio::MultiplexedConnection;
use rslock::LockManager;

use crate::floor::{self, CAD, TTL};
use crate::place::View;
use crate::table::{Cycles, measure, print};
use crate::{Args, BoxError, Servers};

#[distributed_lock(key = key, ttl = "30s", locker = locker)]
async fn attribute(locker: &Locker, key: &str) -> Result<(), LockError> {
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// `SET NX PX` + compare-and-delete on the single server.
    Floor,
    /// rslock's `lock` + `unlock` on the single server.
    Rslock,
    /// `Locker::obtain` + `Lock::release` on the single server.
    Runtime,
    /// `#[distributed_lock]` on the single server.
    Attribute,
    /// `Locker::obtain` of one of 5 permits + `Lock::release`, single server.
    Permit,
    /// `Locker::obtain` of a read + `Lock::release`, single server.
    Read,
    /// The floor on each of the three Redlock masters at once.
    FloorRedlock,
    /// rslock's `lock` + `unlock` on the three Redlock masters.
    RslockRedlock,
    /// `Locker::obtain` + `Lock::release` on Redlock, three masters.
    Redlock,
    /// `Locker::obtain` + `Lock::release` on a 3-master cluster.
    Cluster,
    /// `Locker::obtain` + `Lock::release` on one etcd member.
    #[cfg(feature = "etcd")]
    Etcd1,
    /// `Locker::obtain` + `Lock::release` on 3 etcd members.
    #[cfg(feature = "etcd")]
    Etcd3,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Floor => "floor (SET NX PX + CAD)",
            Variant::Rslock => "rslock lock+unlock",
            Variant::Runtime => "runtime obtain+release",
            Variant::Attribute => "attribute",
            Variant::Permit => "runtime, 1 of 5 permits",
            Variant::Read => "runtime, read of a rw lock",
            Variant::FloorRedlock => "floor on 3 masters at once",
            Variant::RslockRedlock => "rslock, Redlock (3)",
            Variant::Redlock => "runtime, Redlock (3)",
            Variant::Cluster => "runtime, cluster (3)",
            #[cfg(feature = "etcd")]
            Variant::Etcd1 => "runtime, etcd (1 member)",
            #[cfg(feature = "etcd")]
            Variant::Etcd3 => "runtime, etcd (3 members)",
        }
    }
}

/// Every connection and locker the variants use; cheap to clone, so that
/// each task gets its own handles onto the same connections.
#[derive(Clone)]
struct Clients {
    conn: MultiplexedConnection,
    script: Script,
    single: Locker,
    masters: Vec<MultiplexedConnection>,
    /// rslock on the single server, and on the masters when there are any.
    rslock: LockManager,
    rslock_redlock: Option<LockManager>,
    redlock: Option<Locker>,
    cluster: Option<Locker>,
    single_pid: u32,
    master_pids: Vec<u32>,
    cluster_pids: Vec<u32>,
    /// One member, then three: lockers and member pids.
    #[cfg(feature = "etcd")]
    etcd: Vec<(Locker, Vec<u32>)>,
}

impl Clients {
    async fn connect(servers: &Servers) -> Result<Clients, BoxError> {
        let url = servers.single.url();
        let mut masters = Vec::new();
        for master in &servers.masters {
            masters.push(floor::connect(&master.url()).await?);
        }
        let master_urls: Vec<String> = servers.masters.iter().map(|m| m.url()).collect();
        let (redlock, rslock_redlock) = if master_urls.is_empty() {
            (None, None)
        } else {
            (
                Some(Locker::redlock(master_urls.iter()).await?),
                Some(LockManager::new(master_urls)),
            )
        };
        let cluster = match &servers.cluster {
            Some(cluster) => Some(Locker::cluster(cluster.seeds()).await?),
            None => None,
        };
        Ok(Clients {
            conn: floor::connect(&url).await?,
            script: Script::new(CAD),
            single: Locker::connect(&url).await?,
            masters,
            rslock: LockManager::new(vec![url]),
            rslock_redlock,
            redlock,
            cluster,
            single_pid: servers.single.pid(),
            master_pids: servers.masters.iter().map(|m| m.pid()).collect(),
            cluster_pids: servers
                .cluster
                .iter()
                .flat_map(|c| c.nodes().iter().map(|n| n.pid()))
                .collect(),
            #[cfg(feature = "etcd")]
            etcd: {
                let mut etcd = Vec::new();
                for cluster in &servers.etcd {
                    let pids = cluster.members().iter().filter_map(|m| m.pid()).collect();
                    etcd.push((Locker::etcd(cluster.endpoints()).await?, pids));
                }
                etcd
            },
        })
    }
}

impl Cycles for Clients {
    type Variant = Variant;

    fn name(variant: Variant) -> &'static str {
        variant.name()
    }

    fn pids(&self, variant: Variant) -> Vec<u32> {
        match variant {
            Variant::Floor
            | Variant::Rslock
            | Variant::Runtime
            | Variant::Attribute
            | Variant::Permit
            | Variant::Read => {
                vec![self.single_pid]
            }
            Variant::FloorRedlock | Variant::RslockRedlock | Variant::Redlock => {
                self.master_pids.clone()
            }
            Variant::Cluster => self.cluster_pids.clone(),
            #[cfg(feature = "etcd")]
            Variant::Etcd1 => self.etcd[0].1.clone(),
            #[cfg(feature = "etcd")]
            Variant::Etcd3 => self.etcd[1].1.clone(),
        }
    }

    async fn cycles(
        &self,
        variant: Variant,
        key: &str,
        n: usize,
    ) -> Result<Vec<Duration>, BoxError> {
        let mut conn = self.conn.clone();
        let mut masters = self.masters.clone();
        let mut latencies = Vec::with_capacity(n);
        for _ in 0..n {
            let cycle = Instant::now();
            match variant {
                Variant::Floor => {
                    let token = floor::token();
                    assert!(floor::acquire(&mut conn, key, &token).await);
                    floor::release(&mut conn, &self.script, key, &token).await;
                }
                Variant::Rslock | Variant::RslockRedlock => {
                    let manager = if variant == Variant::Rslock {
                        &self.rslock
                    } else {
                        self.rslock_redlock
                            .as_ref()
                            .expect("its servers were started")
                    };
                    let lock = manager.lock(key, TTL).await?;
                    manager.unlock(&lock).await;
                }
                Variant::Runtime => {
                    let lock = self.single.obtain(key, TTL, ObtainOptions::default());
                    lock.await?.release().await?;
                }
                Variant::Attribute => attribute(&self.single, key).await?,
                Variant::Permit | Variant::Read => {
                    let opts = match variant {
                        Variant::Permit => ObtainOptions::new().permits(5),
                        _ => ObtainOptions::new().read(),
                    };
                    let lock = self.single.obtain(key, TTL, opts);
                    lock.await?.release().await?;
                }
                Variant::FloorRedlock => {
                    let token = floor::token();
                    let acquired = futures::future::join_all(
                        masters
                            .iter_mut()
                            .map(|conn| floor::acquire(conn, key, &token)),
                    )
                    .await;
                    assert!(acquired.into_iter().all(|acquired| acquired));
                    futures::future::join_all(
                        masters
                            .iter_mut()
                            .map(|conn| floor::release(conn, &self.script, key, &token)),
                    )
                    .await;
                }
                Variant::Redlock | Variant::Cluster => {
                    let locker = if variant == Variant::Redlock {
                        &self.redlock
                    } else {
                        &self.cluster
                    };
                    let locker = locker.as_ref().expect("its servers were started");
                    let lock = locker.obtain(key, TTL, ObtainOptions::default());
                    lock.await?.release().await?;
                }
                #[cfg(feature = "etcd")]
                Variant::Etcd1 | Variant::Etcd3 => {
                    let locker = &self.etcd[usize::from(variant == Variant::Etcd3)].0;
                    let lock = locker.obtain(key, TTL, ObtainOptions::default());
                    lock.await?.release().await?;
                }
            }
            latencies.push(cycle.elapsed());
        }
        Ok(latencies)
    }
}

/// S1 sequential (floor, runtime, attribute; the floor on three masters and
/// Redlock when `servers.masters` is not empty), then 64 tasks on distinct
/// keys over one connection and one `Locker`.
pub async fn s1(args: &Args, servers: &Servers, view: View) -> Result<(), BoxError> {
    let clients = Clients::connect(servers).await?;
    let mut variants = vec![
        Variant::Floor,
        Variant::Rslock,
        Variant::Runtime,
        Variant::Attribute,
        Variant::Permit,
        Variant::Read,
    ];
    if !servers.masters.is_empty() {
        variants.extend([
            Variant::FloorRedlock,
            Variant::RslockRedlock,
            Variant::Redlock,
        ]);
    }
    let samples = measure(
        &clients,
        &variants,
        None,
        args.cycles,
        usize::from(args.runs),
    )
    .await?;
    print::<Clients>(
        &format!(
            "S1 uncontended, sequential ({} cycles per variant and run, {}; {}; Redlock: 3 \
             masters on the server CPU)",
            args.cycles,
            args.runs_text(),
            view.short()
        ),
        &variants,
        &samples,
    );
    let variants = [
        Variant::Floor,
        Variant::Rslock,
        Variant::Runtime,
        Variant::Attribute,
    ];
    let samples = measure(
        &clients,
        &variants,
        Some(args.tasks),
        args.task_cycles,
        usize::from(args.runs),
    )
    .await?;
    print::<Clients>(
        &format!(
            "S1 uncontended, {} tasks on distinct keys over one connection / one Locker \
             ({} cycles each per run, {}; {})",
            args.tasks,
            args.task_cycles,
            args.runs_text(),
            view.short()
        ),
        &variants,
        &samples,
    );
    Ok(())
}

/// S1 sequential through the runtime on each backend: the single server, a
/// 3-master cluster, 3 Redlock masters.
pub async fn s1_scale(args: &Args, servers: &Servers, view: View) -> Result<(), BoxError> {
    let clients = Clients::connect(servers).await?;
    #[cfg_attr(not(feature = "etcd"), allow(unused_mut))]
    let mut variants = vec![
        Variant::Floor,
        Variant::Runtime,
        Variant::Cluster,
        Variant::Redlock,
    ];
    #[cfg(feature = "etcd")]
    variants.extend([Variant::Etcd1, Variant::Etcd3]);
    let samples = measure(
        &clients,
        &variants,
        None,
        args.cycles,
        usize::from(args.runs),
    )
    .await?;
    print::<Clients>(
        &format!(
            "S1 uncontended, sequential, per backend ({} cycles, {}; cluster: 3 masters, \
             Redlock: 3 masters, all on the server CPU; {})",
            args.cycles,
            args.runs_text(),
            view.short()
        ),
        &variants,
        &samples,
    );
    Ok(())
}
