//! Compile-time behaviour of `#[distributed_lock]`: every supported shape
//! compiles (`tests/ui/pass`), and every misuse fails with the message in its
//! `.stderr` (`tests/ui/fail`). `TRYBUILD=overwrite` rewrites the `.stderr`
//! files: read each one before committing it.

/// `tests/ui/clippy.rs`: annotated functions under `clippy::pedantic`.
mod ui {
    mod clippy;
}

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
