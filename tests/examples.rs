//! Runs every example, with small sizes, on the memory backend and against a
//! real Redis, and those that run on PostgreSQL against a real one (with the
//! `postgres` feature), so that the examples cannot rot. `cargo test` builds
//! the examples next to the test binaries.

use std::path::PathBuf;
use std::process::Command;

use lockmacro_testkit::RedisServer;

fn example(name: &str) -> Command {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_owned();
    let path: PathBuf = deps.parent().unwrap().join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built; run the tests with `cargo test`",
        path.display()
    );
    let mut command = Command::new(path);
    command.env_remove("REDIS_URL").env_remove("DATABASE_URL");
    command
}

fn run(mut command: Command) -> String {
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn field(output: &str, name: &str) -> u64 {
    let line = output
        .lines()
        .find(|line| line.starts_with(name))
        .unwrap_or_else(|| panic!("no `{name}` in:\n{output}"));
    line[name.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn billing_on_the_memory_backend_charges_everyone_once() {
    let mut command = example("billing");
    command.args(["--instances", "3", "--users", "40"]);
    let output = run(command);
    assert!(output.contains("in-memory backend"), "{output}");
    assert_eq!(field(&output, "charges made"), 40, "{output}");
    assert_eq!(field(&output, "double charges"), 0, "{output}");
}

#[test]
fn billing_as_processes_on_redis_charges_everyone_once() {
    let server = RedisServer::start();
    let mut command = example("billing");
    command
        .env("REDIS_URL", server.url())
        .args(["--instances", "3", "--users", "40"]);
    let output = run(command);
    assert!(output.contains("separate processes"), "{output}");
    assert_eq!(
        field(&output, "charges made"),
        40,
        "{output}\n{}",
        server.log()
    );
    assert_eq!(field(&output, "double charges"), 0, "{output}");
    let audit: i64 = server.cmd(&["LLEN", "demo:audit"]);
    assert_eq!(audit, 40, "the audit log in Redis disagrees with the table");
}

#[test]
fn billing_with_both_urls_set_runs_on_redis_and_says_so() {
    let server = RedisServer::start();
    let mut command = example("billing");
    command
        .env("REDIS_URL", server.url())
        // Never contacted: REDIS_URL wins.
        .env("DATABASE_URL", "postgres://app:secret@127.0.0.1:1/app")
        .args(["--instances", "2", "--users", "10"]);
    let output = run(command);
    assert!(output.contains("both set: using Redis"), "{output}");
    assert_eq!(field(&output, "charges made"), 10, "{output}");
}

#[test]
fn billing_with_nothing_listening_at_redis_url_names_the_address() {
    // Bound, then closed: connecting to it is refused.
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut command = example("billing");
    command.env("REDIS_URL", format!("redis://{address}/"));
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains(&address.to_string()), "{stderr}");
    assert!(stderr.contains("refused"), "{stderr}");
}

/// The rest of the summary line that starts with `name`.
fn text<'a>(output: &'a str, name: &str) -> &'a str {
    output
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .unwrap_or_else(|| panic!("no `{name}` in:\n{output}"))
        .trim()
}

fn migrations(redis: Option<&RedisServer>, crash: bool) -> String {
    let url = redis.map(RedisServer::url);
    migrations_in(url.as_deref().map(|url| ("REDIS_URL", url)), crash)
}

/// The migrations example with `store`, a variable and the URL it names (in
/// memory without), and what every run must show.
fn migrations_in(store: Option<(&str, &str)>, crash: bool) -> String {
    let mut command = example("migrations");
    command.args(["--services", "3"]);
    if crash {
        command.arg("--crash");
    }
    if let Some((variable, url)) = store {
        command.env(variable, url);
    }
    let output = run(command);
    assert_eq!(field(&output, "finished migrating"), 1, "{output}");
    assert_eq!(
        field(&output, "crashed mid-way"),
        u64::from(crash),
        "{output}"
    );
    assert_eq!(
        field(&output, "found them applied"),
        2 - u64::from(crash),
        "{output}"
    );
    assert_eq!(field(&output, "migrations in table"), 4, "{output}");
    assert_eq!(field(&output, "applied twice"), 0, "{output}");
    assert!(
        text(&output, "done marker").starts_with("set by"),
        "{output}"
    );
    if crash {
        assert!(output.contains("CRASHES mid-way"), "{output}");
        assert!(
            output.contains("took over: 2 found applied, 2 applied"),
            "{output}"
        );
    }
    output
}

#[test]
fn migrations_on_the_memory_backend_run_once() {
    let output = migrations(None, false);
    assert!(output.contains("in-memory backend"), "{output}");
}

#[test]
fn migrations_on_the_memory_backend_are_taken_over_after_a_crash() {
    let output = migrations(None, true);
    assert!(output.contains("in-memory backend"), "{output}");
}

#[test]
fn migrations_as_processes_on_redis_run_once() {
    let server = RedisServer::start();
    let output = migrations(Some(&server), false);
    assert!(output.contains("separate processes"), "{output}");
    let rows: i64 = server.cmd(&["LLEN", "demo:migrations:applied"]);
    assert_eq!(rows, 4, "the migration table in Redis disagrees:\n{output}");
}

#[test]
fn migrations_as_processes_on_redis_are_taken_over_after_a_crash() {
    let server = RedisServer::start();
    let output = migrations(Some(&server), true);
    assert!(output.contains("separate processes"), "{output}");
    let rows: i64 = server.cmd(&["LLEN", "demo:migrations:applied"]);
    assert_eq!(rows, 4, "the migration table in Redis disagrees:\n{output}");
}

/// The billing and migrations examples as processes on a real PostgreSQL,
/// each run in a database of its own.
#[cfg(feature = "postgres")]
mod postgres {
    use std::sync::Arc;

    use lockmacro_testkit::pgdb::PostgresDb;
    use lockmacro_testkit::postgres::PostgresServer;

    use super::{example, field, migrations_in, run};

    /// A database with lockmacro's tables, and a runtime to look at it.
    fn database() -> (PostgresDb, tokio::runtime::Runtime) {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let server = Arc::new(PostgresServer::start());
        (runtime.block_on(PostgresDb::create(server)), runtime)
    }

    fn count(db: &PostgresDb, runtime: &tokio::runtime::Runtime, table: &str) -> u64 {
        let sql = format!("SELECT count(*)::text FROM {table}");
        let rows = runtime.block_on(db.column(&sql));
        rows[0].as_deref().unwrap().parse().unwrap()
    }

    #[test]
    fn billing_as_processes_on_postgres_charges_everyone_once() {
        let (db, runtime) = database();
        let mut command = example("billing");
        command
            .env("DATABASE_URL", db.url())
            .args(["--instances", "3", "--users", "40"]);
        let output = run(command);
        assert!(
            output.contains("separate processes on PostgreSQL"),
            "{output}"
        );
        assert_eq!(field(&output, "charges made"), 40, "{output}");
        assert_eq!(field(&output, "double charges"), 0, "{output}");
        assert_eq!(
            count(&db, &runtime, "demo_audit"),
            40,
            "the audit log in PostgreSQL disagrees with the table"
        );
        assert_eq!(
            count(&db, &runtime, "lockmacro_locks"),
            0,
            "a lock was left"
        );
    }

    fn migrations(crash: bool) {
        let (db, runtime) = database();
        let output = migrations_in(Some(("DATABASE_URL", &db.url())), crash);
        assert!(
            output.contains("separate processes on PostgreSQL"),
            "{output}"
        );
        assert_eq!(
            count(&db, &runtime, "demo_migrations"),
            4,
            "the migration table in PostgreSQL disagrees:\n{output}"
        );
    }

    #[test]
    fn migrations_as_processes_on_postgres_run_once() {
        migrations(false);
    }

    #[test]
    fn migrations_as_processes_on_postgres_are_taken_over_after_a_crash() {
        migrations(true);
    }
}

fn fencing(redis: Option<&RedisServer>) -> String {
    let mut command = example("fencing");
    if let Some(server) = redis {
        command.env("REDIS_URL", server.url());
    }
    let output = run(command);
    assert!(
        field(&output, "A's token") < field(&output, "B's token"),
        "{output}"
    );
    assert_eq!(field(&output, "stale writes applied"), 0, "{output}");
    assert!(output.contains("REJECTED by the resource"), "{output}");
    output
}

#[test]
fn fencing_on_the_memory_backend_rejects_the_stale_write() {
    let output = fencing(None);
    assert!(output.contains("in memory"), "{output}");
}

#[test]
fn fencing_on_redis_rejects_the_stale_write() {
    let server = RedisServer::start();
    let output = fencing(Some(&server));
    let applied: u64 = server.cmd(&["HGET", "demo:report:contents", "fence"]);
    assert_eq!(applied, field(&output, "B's token"), "{output}");
}

fn watchdog(redis: Option<&RedisServer>) -> String {
    let mut command = example("watchdog");
    if let Some(server) = redis {
        command.env("REDIS_URL", server.url());
    }
    let output = run(command);
    assert!(
        field(&output, "contender refused while the job ran") >= 1,
        "{output}"
    );
    assert_eq!(
        field(&output, "contender got in while the job ran"),
        0,
        "{output}"
    );
    assert_eq!(
        text(&output, "contender got in after the job"),
        "yes",
        "{output}"
    );
    assert_eq!(
        text(&output, "export returned Err(Lost)"),
        "yes",
        "{output}"
    );
    assert!(field(&output, "export stopped after step") < 20, "{output}");
    output
}

#[test]
fn watchdog_on_the_memory_backend_keeps_the_lock_and_aborts_when_it_is_taken() {
    let output = watchdog(None);
    assert!(output.contains("in-memory backend"), "{output}");
}

#[test]
fn watchdog_on_redis_keeps_the_lock_and_aborts_when_it_is_taken() {
    let server = RedisServer::start();
    let output = watchdog(Some(&server));
    assert!(output.contains("DEL demo:export"), "{output}");
}

fn axum(redis: Option<&RedisServer>) -> String {
    let mut command = example("axum");
    if let Some(server) = redis {
        command.env("REDIS_URL", server.url());
    }
    let output = run(command);
    assert!(output.contains("POST /invoices/7/send -> 409"), "{output}");
    assert!(
        output.contains("POST /invoices/7/send -> 200: sent invoice 7"),
        "{output}"
    );
    assert!(output.contains("self-test passed"), "{output}");
    output
}

#[test]
fn axum_on_the_memory_backend_answers_its_self_test() {
    let output = axum(None);
    assert!(output.contains("in-memory backend"), "{output}");
}

#[test]
fn axum_on_redis_answers_its_self_test() {
    let server = RedisServer::start();
    let output = axum(Some(&server));
    assert!(output.contains("Locks on Redis"), "{output}");
}

fn scheduler(redis: Option<&RedisServer>) -> String {
    let mut command = example("scheduler");
    command.args(["--instances", "3", "--kills", "2"]);
    if let Some(server) = redis {
        command.env("REDIS_URL", server.url());
    }
    let output = run(command);
    assert_eq!(field(&output, "leaders killed"), 2, "{output}");
    assert_eq!(field(&output, "takeovers"), 2, "{output}");
    assert_eq!(text(&output, "terms increase"), "yes", "{output}");
    assert_eq!(text(&output, "one leader per term"), "yes", "{output}");
    assert_eq!(field(&output, "results refused"), 0, "{output}");
    output
}

/// The term of the last leader, from the table of terms.
fn last_term(output: &str) -> u64 {
    output
        .lines()
        .rev()
        .find_map(|line| {
            line.strip_prefix("| ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no table of terms in:\n{output}"))
}

#[test]
fn scheduler_on_the_memory_backend_is_taken_over_after_each_kill() {
    let output = scheduler(None);
    assert!(output.contains("in-memory backend"), "{output}");
    assert!(output.contains("CRASHES"), "{output}");
}

#[test]
fn scheduler_as_processes_on_redis_is_taken_over_after_each_kill() {
    let server = RedisServer::start();
    let output = scheduler(Some(&server));
    assert!(output.contains("separate processes"), "{output}");
    let written: u64 = server.cmd(&["HGET", "demo:scheduler:last-job", "fence"]);
    assert_eq!(written, last_term(&output), "{output}");
    let held: bool = server.cmd(&["EXISTS", "demo:scheduler"]);
    assert!(!held, "the last leader did not resign:\n{output}");
}

/// Three instances of the cron example, as processes on one Redis, each
/// with its clock further behind; each fire is run by exactly one.
#[test]
fn scheduled_instances_with_skewed_clocks_run_each_fire_once() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let instances: Vec<_> = ["0", "400", "900"]
        .into_iter()
        .map(|skew| {
            let mut command = example("scheduled");
            command
                .env("REDIS_URL", server.url())
                .env("SCHEDULED_SKEW_MS", skew)
                .env("SCHEDULED_RUNS", &runs)
                .env("SCHEDULED_FOR_SECS", "9");
            command
        })
        .map(|mut command| {
            command
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            command.spawn().expect("start an instance")
        })
        .collect();
    // Each stops by itself after its nine seconds.
    let mut outputs = String::new();
    for instance in instances {
        let output = instance.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stdout}\n{stderr}");
        assert!(stderr.is_empty(), "{stderr}");
        outputs.push_str(&stdout);
    }
    let recorded = std::fs::read_to_string(&runs).expect("runs were recorded");
    let mut per_fire: std::collections::BTreeMap<u64, Vec<u32>> = Default::default();
    for line in recorded.lines() {
        let (fire, pid) = line.split_once(' ').expect("`fire pid`");
        per_fire
            .entry(fire.parse().unwrap())
            .or_default()
            .push(pid.parse().unwrap());
    }
    assert!(per_fire.len() >= 3, "too few fires:\n{recorded}\n{outputs}");
    for (fire, pids) in &per_fire {
        assert_eq!(pids.len(), 1, "fire {fire} ran on {pids:?}\n{outputs}");
    }
    assert!(outputs.contains("run elsewhere"), "{outputs}");
}
