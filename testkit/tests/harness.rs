//! Tests of the kit's `redis-server` harness, which every Redis test relies
//! on.

use std::env;
use std::io::{BufRead, BufReader};
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lockmacro_testkit::RedisServer;
use lockmacro_testkit::program::Program;

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => payload
            .downcast_ref::<&str>()
            .map_or_else(|| "(non-string panic)".to_owned(), |&s| s.to_owned()),
    }
}

fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn started_server_answers_ping() {
    let server = RedisServer::start();
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert_eq!(server.addr().port(), server.port());

    let pong: String = server.cmd(&["PING"]);
    assert_eq!(pong, "PONG");

    let mut connection = server.expect_ok(server.client().get_connection(), "connect");
    let pong: String = server.expect_ok(redis::cmd("PING").query(&mut connection), "PING");
    assert_eq!(pong, "PONG");
}

#[test]
fn servers_run_side_by_side() {
    let servers = RedisServer::start_many(2);
    assert_ne!(servers[0].port(), servers[1].port());
    assert_ne!(servers[0].pid(), servers[1].pid());

    let _: () = servers[0].cmd(&["SET", "k", "first"]);
    let first: Option<String> = servers[0].cmd(&["GET", "k"]);
    let second: Option<String> = servers[1].cmd(&["GET", "k"]);
    assert_eq!(first.as_deref(), Some("first"));
    assert_eq!(second, None);
}

#[test]
fn paused_server_times_out_and_answers_after_resume() {
    let mut server = RedisServer::start();
    let mut connection = server.connection();
    server.expect_ok(
        connection.set_read_timeout(Some(Duration::from_millis(200))),
        "set_read_timeout",
    );

    server.pause();
    assert!(server.is_running(), "a paused server still exists");
    let started = Instant::now();
    let error = server.expect_err(
        redis::cmd("PING").query::<String>(&mut connection),
        "PING a paused server",
    );
    assert!(error.is_timeout(), "expected a timeout, got {error:?}");
    assert!(started.elapsed() < Duration::from_secs(2));

    server.resume();
    // The old connection would read the late reply to the timed-out PING.
    let pong: String = server.cmd(&["PING"]);
    assert_eq!(pong, "PONG");
}

#[test]
fn restart_keeps_the_port_and_loses_the_data() {
    let mut server = RedisServer::start();
    let (port, pid) = (server.port(), server.pid());
    let _: () = server.cmd(&["SET", "k", "v"]);

    server.restart();

    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    assert!(!process_exists(pid));
    let value: Option<String> = server.cmd(&["GET", "k"]);
    assert_eq!(value, None);
    assert_eq!(
        server.log().matches("Ready to accept connections").count(),
        2,
        "one log across both runs"
    );
}

#[test]
fn stop_kills_and_reaps_the_server() {
    let mut server = RedisServer::start();
    let pid = server.pid();
    assert!(server.is_running());

    server.stop();

    assert!(!server.is_running());
    assert!(!process_exists(pid));
    let error = server.expect_err(
        server.client().get_connection(),
        "connect to a stopped server",
    );
    assert!(error.is_connection_refusal(), "{error:?}");
}

#[test]
fn drop_kills_and_reaps_the_server() {
    let server = RedisServer::start();
    let pid = server.pid();

    drop(server);

    assert!(!process_exists(pid));
    // SAFETY: signal 0 only checks that the process exists.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, 0) }, -1);
}

#[test]
fn drop_kills_a_paused_server() {
    let server = RedisServer::start();
    let pid = server.pid();
    server.pause();

    drop(server);

    assert!(!process_exists(pid));
}

#[test]
fn panics_carry_the_log() {
    let server = RedisServer::start();
    let log = server.log();
    assert!(log.contains("Ready to accept connections"), "{log}");

    let payload = panic::catch_unwind(AssertUnwindSafe(|| {
        server.expect_ok(Err::<(), _>("boom"), "tampering with the key");
    }))
    .expect_err("expect_ok on an error panics");
    let message = panic_message(payload);
    assert!(
        message.contains("tampering with the key: unexpected error: \"boom\""),
        "{message}"
    );
    assert!(message.contains("Ready to accept connections"), "{message}");
}

#[test]
fn startup_failure_panics_with_the_log() {
    let payload = panic::catch_unwind(|| RedisServer::start_with(&["--no-such-directive", "x"]))
        .map(drop)
        .expect_err("redis-server rejects an unknown directive");
    let message = panic_message(payload);
    assert!(message.contains("exited during startup"), "{message}");
    assert!(message.contains("no-such-directive"), "{message}");
}

/// The Valkey flavour goes through the same start, pause, restart and
/// failure paths, with `valkey-server` behind them.
#[test]
fn valkey_server_starts_pauses_restarts_and_names_itself_in_panics() {
    let mut server = RedisServer::valkey();
    assert_eq!(server.program(), Program::Valkey);
    let info: String = server.cmd(&["INFO", "server"]);
    assert!(info.contains("server_name:valkey"), "{info}");

    let () = server.cmd(&["SET", "k", "v"]);
    server.pause();
    server.resume();
    let kept: Option<String> = server.cmd(&["GET", "k"]);
    assert_eq!(kept.as_deref(), Some("v"));
    let port = server.port();
    server.restart();
    assert_eq!(server.port(), port);
    let lost: Option<String> = server.cmd(&["GET", "k"]);
    assert_eq!(lost, None);

    let payload = panic::catch_unwind(AssertUnwindSafe(|| {
        server.expect_ok(Err::<(), _>("boom"), "on valkey");
    }))
    .expect_err("expect_ok on an error panics");
    let message = panic_message(payload);
    assert!(
        message.contains("--- log of valkey-server on port"),
        "{message}"
    );
    assert!(message.contains("Valkey is starting"), "{message}");
}

#[test]
fn raw_client_authenticates_with_requirepass() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);

    let pong: String = server.cmd(&["PING"]);
    assert_eq!(pong, "PONG");

    let client = server.expect_ok(redis::Client::open(server.url()), "open");
    let mut connection = server.expect_ok(client.get_connection(), "connect");
    let error = server.expect_err(
        redis::cmd("PING").query::<String>(&mut connection),
        "PING without the password",
    );
    assert_eq!(error.code(), Some("NOAUTH"), "{error:?}");
}

#[test]
fn cluster_enabled_servers_start_and_restart() {
    let mut servers = RedisServer::start_many_with(6, &["--cluster-enabled", "yes"]);
    for server in &servers {
        let info: String = server.cmd(&["INFO", "cluster"]);
        assert!(info.contains("cluster_enabled:1"), "{info}");
    }

    servers[0].restart();
    let info: String = servers[0].cmd(&["INFO", "cluster"]);
    assert!(info.contains("cluster_enabled:1"), "{info}");
}

#[test]
fn server_outlives_the_thread_that_started_it() {
    let server = thread::spawn(RedisServer::start).join().unwrap();
    // Long enough for a parent-death signal tied to the exited thread to land.
    thread::sleep(Duration::from_millis(100));
    let pong: String = server.cmd(&["PING"]);
    assert_eq!(pong, "PONG");
}

/// Set for the child test process that `server_dies_with_the_test_process` kills.
const HOLDER_ENV: &str = "LOCKMACRO_HARNESS_HOLDER";

#[test]
fn server_dies_with_the_test_process() {
    // The same test, run again in a child process, starts the server.
    if env::var_os(HOLDER_ENV).is_some() {
        return hold_a_server_until_killed();
    }
    // The orphaned server is then reparented to us rather than to init, and we can reap
    // it and see how it died.
    // SAFETY: sets an attribute of this process; no pointers involved.
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) }, 0);
    let mut holder = Command::new(env::current_exe().unwrap())
        .args([
            "server_dies_with_the_test_process",
            "--exact",
            "--nocapture",
        ])
        .env(HOLDER_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid: libc::pid_t = BufReader::new(holder.stdout.take().unwrap())
        .lines()
        .find_map(|line| line.unwrap().strip_prefix("server pid ")?.parse().ok())
        .expect("the holder prints the server's pid");

    holder.kill().unwrap();
    holder.wait().unwrap();

    let deadline = Instant::now() + Duration::from_secs(5);
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer; `pid` is our child since the holder died.
    while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0 {
        if Instant::now() > deadline {
            // SAFETY: plain signal to our unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("redis-server {pid} outlived the test process");
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
        "redis-server {pid} ended with status {status:#x}, not by SIGKILL"
    );
}

/// The child process's part: starts a server and waits to be killed.
fn hold_a_server_until_killed() {
    let server = RedisServer::start();
    println!("server pid {}", server.pid());
    thread::sleep(Duration::from_secs(60));
}
