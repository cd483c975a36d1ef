//! Helpers shared by the integration tests, included with `mod support;`.

// Every test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

pub mod cluster;
pub mod etcd;
pub mod outside;
pub mod proxy;
pub mod redis;
pub mod sentinel;
pub mod shared;
pub mod tls;

#[allow(unused_imports)] // Likewise: not every test binary starts a server.
pub use self::redis::RedisServer;
