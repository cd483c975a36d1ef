//! A single `etcd` member as production runs it: TLS only, checking client
//! certificates, or with users and roles (authentication enabled through
//! etcd's own API, as an operator would with `etcdctl`).
//!
//! Its health and metrics are read over a plain metrics port
//! (`--listen-metrics-urls`), so that the harness needs neither TLS nor a
//! token. Killed and reaped on drop, and dies with the test process.

use std::fmt::Display;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{self, Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::redis::{die_with_parent, free_ports, spawn};
use crate::tls::TestCa;

const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
const IO_TIMEOUT: Duration = Duration::from_secs(2);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// A port found free can be taken by someone else before `etcd` binds it.
const START_ATTEMPTS: u32 = 5;

/// The root user's password on a member with authentication.
pub const ROOT_PASSWORD: &str = "root-secret";

/// One `etcd` member with TLS or authentication.
pub struct SecureEtcd {
    client_port: u16,
    metrics_port: u16,
    tls: bool,
    process: Option<Child>,
    dir: TempDir,
}

impl SecureEtcd {
    /// A member that serves clients over TLS only, with the CA's server
    /// certificate, and lets in only clients that present a certificate
    /// the CA signed (`--client-cert-auth`).
    #[track_caller]
    pub fn start_tls(ca: &TestCa) -> Self {
        let args = [
            "--cert-file".into(),
            path(ca.server_cert()),
            "--key-file".into(),
            path(ca.server_key()),
            "--trusted-ca-file".into(),
            path(ca.ca_cert()),
            "--client-cert-auth".into(),
        ];
        Self::start(true, &args)
    }

    /// A plain member whose tokens last `token_ttl` (`--auth-token-ttl`,
    /// simple tokens) once authentication is enabled
    /// ([`SecureEtcd::enable_auth`]).
    #[track_caller]
    pub fn start_with_token_ttl(token_ttl: Duration) -> Self {
        let ttl = token_ttl.as_secs().max(1).to_string();
        Self::start(false, &["--auth-token-ttl".into(), ttl])
    }

    #[track_caller]
    fn start(tls: bool, args: &[String]) -> Self {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match Self::try_start(tls, args) {
                Ok(member) => return member,
                Err((member, _)) if attempts < START_ATTEMPTS && member.port_taken() => {}
                Err((member, message)) => member.fail(message),
            }
        }
    }

    fn try_start(tls: bool, args: &[String]) -> Result<Self, (Self, String)> {
        let dir = tempfile::Builder::new()
            .prefix("lockmacro-etcd-secure-")
            .tempdir()
            .expect("cannot create a temporary directory for etcd");
        let ports = free_ports(3);
        let mut member = SecureEtcd {
            client_port: ports[0],
            metrics_port: ports[2],
            tls,
            process: None,
            dir,
        };
        let log = File::create(member.log_path()).expect("cannot create the etcd log");
        let client = member.url();
        let peer = format!("http://127.0.0.1:{}", ports[1]);
        let metrics = format!("http://127.0.0.1:{}", ports[2]);
        let mut command = Command::new("etcd");
        command
            .args(["--name", "secure"])
            .arg("--data-dir")
            .arg(member.dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("secure={peer}")])
            .args(["--listen-metrics-urls", &metrics])
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("cannot share the etcd log"))
            .stderr(log);
        let parent = process::id();
        // SAFETY: `die_with_parent` only makes async-signal-safe system calls
        // and does not allocate.
        unsafe { command.pre_exec(move || die_with_parent(parent)) };
        match spawn(command) {
            Ok(child) => member.process = Some(child),
            Err(err) => return Err((member, format!("cannot start `etcd`: {err}"))),
        }
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(child) = member.process.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                member.process = None;
                return Err((member, format!("etcd exited during startup: {status}")));
            }
            if member.healthy() {
                return Ok(member);
            }
            if Instant::now() > deadline {
                return Err((
                    member,
                    format!("etcd not healthy within {STARTUP_TIMEOUT:?}"),
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// `https://127.0.0.1:PORT` for a TLS member, else `http://…`.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// The client URL with the member's address in the other scheme: plain
    /// `http://` to a TLS member, `https://` to a plain one.
    pub fn url_in_the_other_scheme(&self) -> String {
        let scheme = if self.tls { "http" } else { "https" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// `http://user:password@127.0.0.1:PORT`.
    pub fn url_for(&self, user: &str, password: &str) -> String {
        format!("http://{user}:{password}@127.0.0.1:{}", self.client_port)
    }

    fn healthy(&self) -> bool {
        self.get("/health")
            .is_ok_and(|reply| reply.contains("\"health\":\"true\""))
    }

    /// The value of the Prometheus metric `name` (without labels).
    pub fn metric(&self, name: &str) -> io::Result<f64> {
        let reply = self.get("/metrics")?;
        reply
            .lines()
            .find_map(|line| {
                line.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .ok_or_else(|| io::Error::other(format!("no metric {name}")))
    }

    fn get(&self, path: &str) -> io::Result<String> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.metrics_port));
        let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply)?;
        Ok(reply)
    }

    fn port_taken(&self) -> bool {
        self.log().contains("address already in use")
    }

    pub fn log(&self) -> String {
        fs::read(self.log_path()).map_or_else(
            |err| format!("(cannot read the log: {err})"),
            |bytes| String::from_utf8_lossy(&bytes).into_owned(),
        )
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    #[track_caller]
    pub fn fail(&self, message: impl Display) -> ! {
        panic!(
            "{message}\n\n--- log of etcd (client port {}) ---\n{}\n--- end of log ---",
            self.client_port,
            self.log().trim_end()
        )
    }

    /// `result`'s value, or a panic with `what`, the error and the log.
    #[track_caller]
    pub fn expect_ok<T, E: std::fmt::Debug>(&self, result: Result<T, E>, what: &str) -> T {
        result.unwrap_or_else(|err| self.fail(format_args!("{what}: {err:?}")))
    }
}

#[cfg(feature = "etcd")]
impl SecureEtcd {
    /// Adds `root` (password [`ROOT_PASSWORD`]) with the root role, and a
    /// user `user` whose role may read and write the keys under `prefixes`
    /// only, then enables authentication, as an operator would.
    pub async fn enable_auth(&self, user: &str, password: &str, prefixes: &[&str]) {
        use etcd_client::{Client, Permission};
        let mut client = self.expect_ok(Client::connect([self.url()], None).await, "connect");
        let role = format!("{user}-locks");
        let steps = async {
            client.user_add("root", ROOT_PASSWORD, None).await?;
            client.user_grant_role("root", "root").await?;
            client.role_add(role.as_str()).await?;
            for prefix in prefixes {
                let permission = Permission::read_write(*prefix).with_prefix();
                client
                    .role_grant_permission(role.as_str(), permission)
                    .await?;
            }
            client.user_add(user, password, None).await?;
            client.user_grant_role(user, role.as_str()).await?;
            client.auth_enable().await?;
            Ok::<_, etcd_client::Error>(())
        };
        self.expect_ok(steps.await, "enable authentication");
    }

    /// A client of the store as root, behind the library's back.
    pub async fn root_client(&self) -> etcd_client::Client {
        let options = etcd_client::ConnectOptions::new().with_user("root", ROOT_PASSWORD);
        self.expect_ok(
            etcd_client::Client::connect([self.url()], Some(options)).await,
            "connect as root",
        )
    }
}

impl Drop for SecureEtcd {
    fn drop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }
}

fn path(path: PathBuf) -> String {
    path.display().to_string()
}
