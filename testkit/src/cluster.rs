//! A Redis Cluster of real `redis-server` processes, built with
//! `redis-cli --cluster create`, for the cluster tests.
//!
//! Every node is a [`RedisServer`] of its own (port, bus port, temporary directory,
//! log), so nodes can be killed, paused and inspected one by one. Every panic the
//! harness raises carries the logs of all nodes.

use std::env;
use std::ffi::OsString;
use std::fmt::Display;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::redis::RedisServer;

/// How long a node may be silent before the others declare it failed. Short, so that
/// a failover takes a couple of seconds; long enough that a busy CI machine does not
/// trigger one by itself.
const NODE_TIMEOUT_MS: &str = "1000";
/// The node timeout of a cluster that no test fails over, shared by many
/// tests (Redis's default): a node that the machine's load holds up for a
/// moment is not declared failed under the tests' feet.
const STEADY_NODE_TIMEOUT_MS: &str = "15000";
/// `redis-cli --cluster create` and the first `cluster_state:ok` take about two
/// seconds.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Failure detection takes about two node timeouts, then the replica is elected.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A running cluster; its nodes are killed and reaped on drop.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// Which nodes were killed, and are left out when polling.
    killed: Vec<bool>,
}

impl RedisCluster {
    /// Three masters with one replica each.
    #[track_caller]
    pub fn start() -> Self {
        Self::start_with(3, 1)
    }

    /// `masters` masters (at least 3, which `redis-cli` requires) with
    /// `replicas` replicas each. Returns once every node reports
    /// `cluster_state:ok` and every replica has synchronised with its master.
    #[track_caller]
    pub fn start_with(masters: usize, replicas: usize) -> Self {
        Self::start_nodes(masters, replicas, NODE_TIMEOUT_MS)
    }

    /// Three masters with one replica each, as [`RedisCluster::start`], that
    /// take the default 15 s to declare a silent node failed rather than one:
    /// for a cluster shared by tests that never fail a node.
    #[track_caller]
    pub fn start_steady() -> Self {
        Self::start_nodes(3, 1, STEADY_NODE_TIMEOUT_MS)
    }

    #[track_caller]
    fn start_nodes(masters: usize, replicas: usize, node_timeout_ms: &str) -> Self {
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            node_timeout_ms,
            // Replicas synchronise at once instead of waiting 5 s for more replicas
            // to share the transfer.
            "--repl-diskless-sync-delay",
            "0",
        ];
        let nodes = RedisServer::start_many_with(masters * (1 + replicas), &args);
        let cluster = RedisCluster {
            killed: vec![false; nodes.len()],
            nodes,
        };
        cluster.create(replicas);
        cluster.wait_until("every node reports cluster_state:ok", READY_TIMEOUT, |c| {
            c.live().all(|node| c.cluster_state(node) == "ok")
        });
        cluster.wait_until("every replica is in sync", READY_TIMEOUT, |c| {
            c.live()
                .filter(|node| c.role(node) == "slave")
                .all(|node| c.info_field(node, "replication", "master_link_status") == "up")
        });
        // A replica that loaded its master's snapshot reports its link up, yet
        // the master may hold back later writes until the replica's next
        // acknowledgement, up to a second later: a write it takes meanwhile is
        // lost if the master fails. `WAIT` after a write on the same connection
        // shows that the replicas receive writes.
        cluster.wait_until("every replica receives writes", READY_TIMEOUT, |c| {
            c.live()
                .filter(|node| c.role(node) == "master")
                .all(|node| {
                    let mut conn = node.connection();
                    let acked: redis::RedisResult<usize> = redis::pipe()
                        .cmd("FLUSHALL")
                        .ignore()
                        .cmd("WAIT")
                        .arg(replicas)
                        .arg(1000)
                        .query::<(usize,)>(&mut conn)
                        .map(|(acked,)| acked);
                    node.expect_ok(acked, "FLUSHALL then WAIT") >= replicas
                })
        });
        cluster
    }

    fn create(&self, replicas: usize) {
        let mut command = Command::new(cli_binary());
        command.arg("--cluster").arg("create");
        for node in &self.nodes {
            command.arg(format!("127.0.0.1:{}", node.port()));
        }
        command
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null());
        // Its output goes to a file, so that it can be shown after the
        // process was killed for taking too long.
        let log = tempfile::tempfile().unwrap_or_else(|error| {
            self.fail(format_args!(
                "cannot make a file for redis-cli's output: {error}"
            ))
        });
        let clone = |file: &std::fs::File| {
            file.try_clone()
                .unwrap_or_else(|error| self.fail(format_args!("cannot clone a file: {error}")))
        };
        command
            .stdout(Stdio::from(clone(&log)))
            .stderr(Stdio::from(clone(&log)));
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => self.fail(format_args!(
                "cannot run `{}`: {error}; the cluster tests need redis-cli (Debian package \
                 redis-tools), or set LOCKMACRO_REDIS_CLI",
                cli_binary().to_string_lossy(),
            )),
        };
        // redis-cli waits without end for nodes that never meet.
        let deadline = Instant::now() + READY_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(POLL_INTERVAL),
                Ok(None) | Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        let output = {
            use std::io::{Read, Seek};
            let mut log = log;
            let mut text = String::new();
            let _ = log.rewind().and_then(|()| log.read_to_string(&mut text));
            text
        };
        match status {
            Some(status) if status.success() => {}
            Some(status) => self.fail(format_args!(
                "redis-cli --cluster create failed ({status}):\n{output}"
            )),
            None => self.fail(format_args!(
                "redis-cli --cluster create did not finish within {READY_TIMEOUT:?}:\n{output}"
            )),
        }
    }

    /// A new locker on the cluster (`Locker::cluster` of its seeds), with
    /// connections of its own; panics with every node's log when it cannot
    /// connect.
    #[cfg(feature = "cluster")]
    pub async fn locker(&self) -> lockmacro_runtime::Locker {
        match lockmacro_runtime::Locker::cluster(self.seeds()).await {
            Ok(locker) => locker,
            Err(error) => self.fail(format_args!("connect: {error:?}")),
        }
    }

    /// The URL of every node, masters and replicas: the seeds for a client.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    pub fn node(&self, index: usize) -> &RedisServer {
        &self.nodes[index]
    }

    /// The nodes that were not killed.
    fn live(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes
            .iter()
            .zip(&self.killed)
            .filter(|(_, killed)| !**killed)
            .map(|(node, _)| node)
    }

    /// The slot of `key`, as the cluster computes it.
    #[track_caller]
    pub fn slot(&self, key: &str) -> u16 {
        let node = self
            .live()
            .next()
            .unwrap_or_else(|| self.fail("no node is up"));
        node.cmd(&["CLUSTER", "KEYSLOT", key])
    }

    /// Index of the node that serves `slot` as a master, according to a live node.
    #[track_caller]
    pub fn master_of_slot(&self, slot: u16) -> usize {
        for node in self.live() {
            let nodes: String = node.cmd(&["CLUSTER", "NODES"]);
            for line in nodes.lines() {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let (Some(addr), Some(flags)) = (fields.get(1), fields.get(2)) else {
                    continue;
                };
                if !flags.contains("master") || flags.contains("fail") {
                    continue;
                }
                let serves = fields.get(8..).unwrap_or_default().iter().any(|range| {
                    let (start, end) = range.split_once('-').unwrap_or((range, range));
                    match (start.parse::<u16>(), end.parse::<u16>()) {
                        (Ok(start), Ok(end)) => (start..=end).contains(&slot),
                        _ => false,
                    }
                });
                if serves {
                    return self.index_of(addr);
                }
            }
        }
        self.fail(format_args!("no live master serves slot {slot}"))
    }

    /// Index of the master that serves `key`.
    #[track_caller]
    pub fn master_for(&self, key: &str) -> usize {
        self.master_of_slot(self.slot(key))
    }

    /// Index of the node whose `CLUSTER NODES` address (`127.0.0.1:PORT@BUS`) is `addr`.
    #[track_caller]
    fn index_of(&self, addr: &str) -> usize {
        let port = addr
            .split('@')
            .next()
            .and_then(|host_port| host_port.rsplit(':').next())
            .and_then(|port| port.parse::<u16>().ok());
        self.nodes
            .iter()
            .position(|node| Some(node.port()) == port)
            .unwrap_or_else(|| self.fail(format_args!("unknown node {addr}")))
    }

    /// The cluster node id of the node at `index`.
    #[track_caller]
    pub fn node_id(&self, index: usize) -> String {
        self.nodes[index].cmd(&["CLUSTER", "MYID"])
    }

    /// Index of the replica of the master at `master`, waiting (up to 10 s)
    /// until the master lists it: a replica attaches a moment after the
    /// cluster reports `ok`.
    #[track_caller]
    pub fn replica_of(&self, master: usize) -> usize {
        let id = self.node_id(master);
        let mut replicas: Vec<String> = Vec::new();
        for _ in 0..1000 {
            replicas = self.nodes[master].cmd(&["CLUSTER", "REPLICAS", &id]);
            if !replicas.is_empty() {
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let line = replicas
            .first()
            .unwrap_or_else(|| self.fail(format_args!("node {master} has no replica")));
        let addr = line.split_whitespace().nth(1).unwrap_or_default();
        self.index_of(addr)
    }

    /// Kills the node at `index` with SIGKILL, as a crash would, and waits for
    /// nothing: a replica's death leaves every slot served.
    #[track_caller]
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].stop();
        self.killed[index] = true;
    }

    /// Kills the master at `master` with SIGKILL and waits until its replica has
    /// taken over and every remaining node reports `cluster_state:ok`. Returns the
    /// index of the new master.
    #[track_caller]
    pub fn fail_over(&mut self, master: usize) -> usize {
        let replica = self.replica_of(master);
        self.nodes[master].stop();
        self.killed[master] = true;
        self.wait_until("the replica took over", FAILOVER_TIMEOUT, |c| {
            c.role(&c.nodes[replica]) == "master"
        });
        self.wait_until(
            "every node reports cluster_state:ok after the failover",
            FAILOVER_TIMEOUT,
            |c| c.live().all(|node| c.cluster_state(node) == "ok"),
        );
        replica
    }

    /// Waits until `done` holds, polling; panics with every log after `timeout`.
    #[track_caller]
    pub fn wait_until(&self, what: &str, timeout: Duration, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + timeout;
        while !done(self) {
            if Instant::now() > deadline {
                self.fail(format_args!("{what}: not within {timeout:?}"));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    fn cluster_state(&self, node: &RedisServer) -> String {
        self.info_field_of(node, &["CLUSTER", "INFO"], "cluster_state")
    }

    /// `master` or `slave`, as `ROLE` reports it.
    fn role(&self, node: &RedisServer) -> String {
        let role: Vec<redis::Value> = node.cmd(&["ROLE"]);
        match role.first() {
            Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            other => self.fail(format_args!("unexpected ROLE reply {other:?}")),
        }
    }

    fn info_field(&self, node: &RedisServer, section: &str, field: &str) -> String {
        self.info_field_of(node, &["INFO", section], field)
    }

    fn info_field_of(&self, node: &RedisServer, command: &[&str], field: &str) -> String {
        let info: String = node.cmd(command);
        info.lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    /// Every live node's view of the cluster and of `key`: `CLUSTER NODES`,
    /// `INFO replication`, and `GET`/`PTTL` of `key` read with `READONLY`, so that a
    /// replica answers for its own copy. For failure messages.
    pub fn describe(&self, key: &str) -> String {
        let mut text = String::new();
        for (index, node) in self.nodes.iter().enumerate() {
            if self.killed[index] {
                text.push_str(&format!(
                    "\n=== node {index} (port {}): killed\n",
                    node.port()
                ));
                continue;
            }
            let view = (|| -> redis::RedisResult<(String, String, String)> {
                let mut conn = node
                    .client()
                    .get_connection_with_timeout(Duration::from_secs(5))?;
                conn.set_read_timeout(Some(Duration::from_secs(5)))?;
                let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut conn)?;
                let replication: String = redis::cmd("INFO").arg("replication").query(&mut conn)?;
                let () = redis::cmd("READONLY").query(&mut conn)?;
                // A node that does not serve the key's slot answers MOVED.
                let value: redis::RedisResult<Option<String>> =
                    redis::cmd("GET").arg(key).query(&mut conn);
                let pttl: redis::RedisResult<i64> = redis::cmd("PTTL").arg(key).query(&mut conn);
                Ok((
                    nodes,
                    replication,
                    format!("GET {key}: {value:?}, PTTL: {pttl:?}"),
                ))
            })();
            text.push_str(&format!("\n=== node {index} (port {}) ===\n", node.port()));
            match view {
                Ok((nodes, replication, key_view)) => text.push_str(&format!(
                    "{key_view}\n{}\n{}\n",
                    nodes.trim_end(),
                    replication.trim_end()
                )),
                Err(error) => text.push_str(&format!("unreachable: {error}\n")),
            }
        }
        text
    }

    /// Panics with `message` followed by the log of every node.
    #[track_caller]
    pub fn fail(&self, message: impl Display) -> ! {
        let mut logs = String::new();
        for node in &self.nodes {
            logs.push_str(&format!(
                "\n--- log of cluster node on port {} ---\n{}",
                node.port(),
                node.log().trim_end(),
            ));
        }
        panic!("{message}\n{logs}\n--- end of logs ---")
    }
}

fn cli_binary() -> OsString {
    if let Some(cli) = env::var_os("LOCKMACRO_REDIS_CLI").filter(|cli| !cli.is_empty()) {
        return cli;
    }
    // Next to a redis-server given by path, as in a Redis build directory.
    env::var_os("LOCKMACRO_REDIS_SERVER")
        .map(std::path::PathBuf::from)
        .and_then(|server| Some(server.parent()?.join("redis-cli")))
        .filter(|cli| cli.is_file())
        .map_or_else(|| "redis-cli".into(), Into::into)
}
