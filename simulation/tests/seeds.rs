//! The simulation program: a seed replays the same run, and a run of seeds
//! passes.

use std::process::Command;

fn simulate(args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_simulate"))
        .args(args)
        .env_remove("SEED")
        .output()
        .expect("running the simulation");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    (output.status.success(), stdout)
}

#[test]
fn a_seed_replays_the_same_run() {
    let (passed, first) = simulate(&["1", "--seed", "7", "--verbose"]);
    assert!(passed, "{first}");
    let (_, again) = simulate(&["1", "--seed", "7", "--verbose", "--jobs", "1"]);
    let history = |out: &str| {
        out.lines()
            .filter(|line| !line.starts_with("simulate:"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(first.contains("holds `"), "{first}");
    assert_eq!(history(&first), history(&again), "seed 7 did not replay");
}
