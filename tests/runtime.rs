//! The behaviour suite, run against every backend.
