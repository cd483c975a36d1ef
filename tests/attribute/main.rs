//! Every row of the attribute's outcomes table, on a real Redis: what the
//! annotated function returns, whether its body ran, and what is left in
//! Redis afterwards.

#[path = "../support/mod.rs"]
mod support;

mod outcomes;
mod watchdog;
