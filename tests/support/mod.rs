//! Helpers shared by the integration tests, included with `mod support;`.

// Every test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

pub mod redis;

pub use self::redis::RedisServer;
