//! A Redis Sentinel deployment of real processes: one master, two replicas and
//! three sentinels, each a [`RedisServer`] of its own (port, temporary
//! directory, log), killed and reaped on drop like any other. Every panic the
//! harness raises carries the logs of all of them.

use std::fmt::Display;
use std::thread;
use std::time::{Duration, Instant};

use super::redis::RedisServer;
use super::tls::TestCa;

/// The name the sentinels monitor the master under.
pub const MASTER_NAME: &str = "lockmacro";
/// Sentinels that must agree that the master is down: a majority of three.
const QUORUM: usize = 2;
/// How long the master may be silent before a sentinel thinks it down. Short,
/// so that a failover takes a few seconds; long enough that a busy machine
/// does not trigger one by itself.
const DOWN_AFTER_MS: u64 = 1000;
/// The same for a deployment that no test fails over, shared by many tests:
/// a master that the machine's load holds up for a moment is not failed over
/// under the tests' feet.
const STEADY_DOWN_AFTER_MS: u64 = 60_000;
const FAILOVER_TIMEOUT_MS: u64 = 5000;
/// Sentinels find each other through hello messages sent every 2 s.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Detection (`DOWN_AFTER_MS`), agreement, election and promotion.
const FAILOVER_WAIT: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A running deployment; its processes are killed and reaped on drop.
pub struct RedisSentinel {
    /// The master first, then its replicas; the master changes with
    /// failovers.
    servers: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    killed: Vec<bool>,
}

impl RedisSentinel {
    /// One master, two replicas, three sentinels. Returns once the replicas
    /// receive the master's writes and every sentinel knows the master, both
    /// replicas and the two other sentinels.
    #[track_caller]
    pub fn start() -> Self {
        Self::start_ready(true, None, None, DOWN_AFTER_MS)
    }

    /// Like [`RedisSentinel::start_quick`], every process accepting TLS only,
    /// with the certificates of `ca` (and replicating over TLS).
    #[track_caller]
    pub fn start_tls(ca: &TestCa) -> Self {
        Self::start_ready(false, None, Some(ca), DOWN_AFTER_MS)
    }

    /// Like [`RedisSentinel::start_quick`], with passwords: the master and
    /// replicas ask for `master` (and the replicas and sentinels give it to
    /// the master), the sentinels ask for `sentinel`.
    #[track_caller]
    pub fn start_with_passwords(master: &str, sentinel: &str) -> Self {
        Self::start_ready(false, Some((master, sentinel)), None, DOWN_AFTER_MS)
    }

    /// Like [`RedisSentinel::start`], but returns as soon as every sentinel
    /// names the master, before the sentinels have found each other (which
    /// takes their 2 s hello period): enough for tests that take locks but
    /// do not fail over.
    #[track_caller]
    pub fn start_quick() -> Self {
        Self::start_ready(false, None, None, DOWN_AFTER_MS)
    }

    /// Like [`RedisSentinel::start_quick`], with sentinels that wait a
    /// minute, not a second, before they think the master down: for a
    /// deployment shared by tests that never fail it over.
    #[track_caller]
    pub fn start_steady() -> Self {
        Self::start_ready(false, None, None, STEADY_DOWN_AFTER_MS)
    }

    #[track_caller]
    fn start_ready(
        for_failover: bool,
        passwords: Option<(&str, &str)>,
        tls: Option<&TestCa>,
        down_after_ms: u64,
    ) -> Self {
        // Replicas synchronise at once instead of waiting 5 s for others to
        // share the transfer.
        let mut args = vec!["--repl-diskless-sync-delay", "0"];
        if let Some((master, _)) = passwords {
            // Every server may become the master, or the replica of another.
            args.extend(["--requirepass", master, "--masterauth", master]);
        }
        if tls.is_some() {
            // Replicas and sentinels reach the servers over TLS too.
            args.extend(["--tls-replication", "yes"]);
        }
        let start = |args: &[&str]| match tls {
            Some(ca) => RedisServer::start_tls(ca, args),
            None => RedisServer::start_with(args),
        };
        let master = start(&args);
        let port = master.port().to_string();
        let mut servers = vec![master];
        for _ in 0..2 {
            let mut replica = args.clone();
            replica.extend(["--replicaof", "127.0.0.1", &port]);
            servers.push(start(&replica));
        }
        let mut deployment = RedisSentinel {
            killed: vec![false; servers.len()],
            servers,
            sentinels: Vec::new(),
        };
        deployment.wait_until("both replicas receive writes", READY_TIMEOUT, |d| {
            d.replicas_acknowledge(0, 2)
        });
        let mut config = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {port} {QUORUM}\n\
             sentinel down-after-milliseconds {MASTER_NAME} {down_after_ms}\n\
             sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
             sentinel parallel-syncs {MASTER_NAME} 2\n"
        );
        let mut sentinel_args = Vec::new();
        if tls.is_some() {
            sentinel_args.extend(["--tls-replication", "yes"]);
        }
        if let Some((master, sentinel)) = passwords {
            config.push_str(&format!(
                "sentinel auth-pass {MASTER_NAME} {master}\nsentinel sentinel-pass {sentinel}\n"
            ));
            sentinel_args.extend(["--requirepass", sentinel]);
        }
        for _ in 0..3 {
            deployment.sentinels.push(match tls {
                Some(ca) => RedisServer::start_sentinel_tls(ca, &config, &sentinel_args),
                None => RedisServer::start_sentinel(&config, &sentinel_args),
            });
        }
        if for_failover {
            deployment.wait_until(
                "every sentinel knows both replicas and the other sentinels",
                READY_TIMEOUT,
                |d| {
                    d.sentinels.iter().all(|sentinel| {
                        let fields = d.master_fields(sentinel);
                        field(&fields, "num-slaves") == Some("2")
                            && field(&fields, "num-other-sentinels") == Some("2")
                    })
                },
            );
        } else {
            deployment.wait_until("every sentinel names the master", READY_TIMEOUT, |d| {
                d.sentinels
                    .iter()
                    .all(|sentinel| d.named_master(sentinel) == Some(d.servers[0].port()))
            });
        }
        deployment
    }

    /// `redis://127.0.0.1:PORT/` of each sentinel (`rediss://` under TLS).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The master and its replicas.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    pub fn server(&self, index: usize) -> &RedisServer {
        &self.servers[index]
    }

    /// Index of the server the first sentinel names as the master.
    #[track_caller]
    pub fn master(&self) -> usize {
        let port = self
            .named_master(&self.sentinels[0])
            .unwrap_or_else(|| self.fail("the sentinel names no master"));
        self.index_of(port)
    }

    /// Kills the master with SIGKILL; returns its index.
    #[track_caller]
    pub fn kill_master(&mut self) -> usize {
        let master = self.master();
        self.servers[master].stop();
        self.killed[master] = true;
        master
    }

    /// Asks the sentinels for a failover (`SENTINEL FAILOVER`): a replica is
    /// promoted and the master, left running, becomes its replica. Returns
    /// the old master's index; see [`RedisSentinel::wait_for_failover`].
    #[track_caller]
    pub fn fail_over_by_hand(&self) -> usize {
        let master = self.master();
        let () = self.sentinels[0].cmd(&["SENTINEL", "FAILOVER", MASTER_NAME]);
        master
    }

    /// Waits until every sentinel names a master other than `old`, that
    /// server says it is a master, and `replicas` replicas receive its
    /// writes; returns its index.
    #[track_caller]
    pub fn wait_for_failover(&self, old: usize, replicas: usize) -> usize {
        self.wait_until("the sentinels promote a replica", FAILOVER_WAIT, |d| {
            let named: Vec<Option<u16>> = d.sentinels.iter().map(|s| d.named_master(s)).collect();
            let Some(Some(port)) = named.first().copied() else {
                return false;
            };
            let index = d.index_of_opt(port);
            named.iter().all(|other| *other == Some(port))
                && index.is_some_and(|index| index != old && !d.killed[index])
                && index.is_some_and(|index| d.role(&d.servers[index]) == "master")
        });
        let master = self.master();
        self.wait_until("the replicas follow the new master", FAILOVER_WAIT, |d| {
            d.replicas_acknowledge(master, replicas)
        });
        master
    }

    /// Waits until server `index` answers `ROLE` with `role` (`master`,
    /// `slave`): a master left running through a failover becomes a replica
    /// only once a sentinel reconfigures it, after the switch.
    #[track_caller]
    pub fn wait_for_role(&self, index: usize, role: &str) {
        self.wait_until(&format!("server {index} is a {role}"), FAILOVER_WAIT, |d| {
            d.role(&d.servers[index]) == role
        });
    }

    /// True when `WAIT` after a write on server `index` hears `replicas`
    /// acknowledgements: they are connected and receive its writes.
    fn replicas_acknowledge(&self, index: usize, replicas: usize) -> bool {
        let server = &self.servers[index];
        let mut conn = server.connection();
        let acked: redis::RedisResult<(usize,)> = redis::pipe()
            .cmd("SET")
            .arg("lockmacro-harness:probe")
            .arg("1")
            .ignore()
            .cmd("WAIT")
            .arg(replicas)
            .arg(200)
            .query(&mut conn);
        acked.is_ok_and(|(acked,)| acked >= replicas)
    }

    /// The port of the master `sentinel` names.
    fn named_master(&self, sentinel: &RedisServer) -> Option<u16> {
        let mut conn = sentinel.client().get_connection().ok()?;
        let named: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER_NAME)
            .query(&mut conn)
            .ok()?;
        named.map(|(_, port)| port)
    }

    /// `SENTINEL MASTER <name>` as field, value pairs.
    fn master_fields(&self, sentinel: &RedisServer) -> Vec<(String, String)> {
        let Ok(mut conn) = sentinel.client().get_connection() else {
            return Vec::new();
        };
        let fields: redis::RedisResult<Vec<String>> = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(MASTER_NAME)
            .query(&mut conn);
        fields
            .unwrap_or_default()
            .chunks(2)
            .filter_map(|pair| Some((pair.first()?.clone(), pair.get(1)?.clone())))
            .collect()
    }

    /// `master` or `slave`, as the server says (`ROLE`); empty when it does
    /// not answer.
    fn role(&self, server: &RedisServer) -> String {
        let Ok(mut conn) = server.client().get_connection() else {
            return String::new();
        };
        let role: redis::RedisResult<redis::Value> = redis::cmd("ROLE").query(&mut conn);
        match role {
            Ok(redis::Value::Array(items)) => match items.first() {
                Some(redis::Value::BulkString(name)) => String::from_utf8_lossy(name).into(),
                _ => String::new(),
            },
            _ => String::new(),
        }
    }

    fn index_of_opt(&self, port: u16) -> Option<usize> {
        self.servers.iter().position(|server| server.port() == port)
    }

    #[track_caller]
    fn index_of(&self, port: u16) -> usize {
        self.index_of_opt(port)
            .unwrap_or_else(|| self.fail(format_args!("no server of ours on port {port}")))
    }

    #[track_caller]
    fn wait_until(&self, what: &str, timeout: Duration, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + timeout;
        while !done(self) {
            if Instant::now() > deadline {
                self.fail(format_args!(
                    "timed out after {timeout:?} waiting until {what}"
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Panics with `message` followed by the logs of every process.
    #[track_caller]
    pub fn fail(&self, message: impl Display) -> ! {
        let logs: Vec<String> = self
            .servers
            .iter()
            .map(|server| ("redis-server", server))
            .chain(self.sentinels.iter().map(|sentinel| ("sentinel", sentinel)))
            .map(|(what, server)| {
                format!(
                    "--- log of {what} on port {} ---\n{}",
                    server.port(),
                    server.log().trim_end()
                )
            })
            .collect();
        panic!("{message}\n\n{}\n--- end of logs ---", logs.join("\n"))
    }
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find_map(|(key, value)| (key == name).then_some(value.as_str()))
}
