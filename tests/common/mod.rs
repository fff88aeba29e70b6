//! Test harness: a private `redis-server` per test (`RedisServer`), the `redq`
//! binary under test (`TestServer`), and small gRPC helpers shared by `tests/*.rs`.
//!
//! Every test gets its own temp dir, Unix socket and server processes, so tests run
//! in parallel without sharing state and never touch a Redis on 6379. Readiness is
//! always polled with a bound, never assumed after a fixed sleep; timeouts here only
//! keep a broken build from hanging, they never assert speed.

// Each test binary uses a different subset of the helpers.
#![allow(dead_code)]
// `..Default::default()` on proto messages keeps tests compiling when fields are added.
#![allow(clippy::needless_update)]

pub mod cli;
pub mod cluster;
mod grpc;
pub mod load;
pub mod metrics;
pub mod ordering;
pub mod ports;
mod redis;
mod scheduling;
pub mod security;
pub mod sentinel;
mod server;
pub mod sockets;

pub use grpc::*;
pub use redis::*;
pub use scheduling::*;
pub use server::*;

use std::time::Duration;

/// Bound for a process to come up (redis-server, redq).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound for something that should happen "soon" (a delivery, a health flip).
pub const EVENTUALLY: Duration = Duration::from_secs(20);
/// Polls `check` until it holds; panics naming `what` after [`EVENTUALLY`].
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} did not happen within {EVENTUALLY:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The gRPC service name redq registers with the health service.
pub const QUEUE_SERVICE: &str = "redq.v1.QueueService";
