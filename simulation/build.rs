//! Exports `getrandom` from this crate's programs (see `src/entropy.rs`):
//! std and the `getrandom` crate look it up with `dlsym`, which finds only
//! what a program exports.
fn main() {
    for kind in ["bins", "tests"] {
        println!("cargo::rustc-link-arg-{kind}=-Wl,--export-dynamic-symbol=getrandom");
    }
}
