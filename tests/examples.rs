//! Runs every example, with small sizes, on the memory backend and against a
//! real Redis, so that the examples cannot rot. `cargo test` builds the
//! examples next to the test binaries.

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::RedisServer;

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
    command.env_remove("REDIS_URL");
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
