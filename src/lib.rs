//! redq: a gRPC message queue that keeps its messages in Redis.
//!
//! A request flows one way: [`grpc`] (validate, convert) → [`broker`] (the
//! domain: publish, deliver, ack, leases) → [`store`] (one module per Redis
//! structure, Lua scripts where steps must be atomic).
//!
//! - [`model`]: the domain's types, shared by the API façades, the broker
//!   and the store.
//! - [`config`]: flags and `REDQ_*` variables.
//! - [`server`]: wires the gRPC and HTTP servers and the background loops.
//! - [`health`]: readiness from Redis reachability and loop liveness.
//! - [`metrics`]: Prometheus metrics, served on `/metrics`.
//! - [`shutdown`]: the signals that start a graceful shutdown.
//! - [`dev`]: `redq dev`, a private redis-server plus the server.
//! - [`bench`]: `redq bench`, load generators against a running server.
//! - [`cli`]: `redq publish`, `subscribe`, `stats`, `dlq`…: the API from a shell.
//! - [`error`]: the domain's error and its one mapping to gRPC status codes.
//! - [`auth`]: tokens, grants and the per-token limits; [`security`] builds
//!   them and TLS from the flags, [`tls`] serves TLS, [`reload`] reloads
//!   certificates and tokens on an interval and on SIGHUP.
//! - [`workers`]: the worker threads that serve gRPC connections.
//! - `ui`: the web dashboard at `/ui/` on the HTTP port, and its JSON API.
//!
//! Only what the binary, the tests and the fuzz targets use is `pub`.
//!
//! `ARCHITECTURE.md` follows one message through these modules and defines
//! the broker's terms.

pub mod auth;
pub mod bench;
pub mod broker;
pub mod cli;
pub mod config;
pub mod dev;
pub mod error;
pub mod grpc;
mod health;
mod metrics;
pub mod model;
mod reload;
mod security;
pub mod server;
mod shutdown;
pub mod store;
pub mod tls;
mod ui;
mod workers;

/// Code generated from `proto/`, in modules named after the proto packages
/// (generated code refers to `google.rpc` by its relative path).
mod proto {
    pub mod redq {
        pub mod v1 {
            tonic::include_proto!("redq.v1");
        }
    }
    pub mod google {
        pub mod rpc {
            tonic::include_proto!("google.rpc");
        }
    }
}

/// Code generated from `proto/redq/v1/*.proto`.
pub mod pb {
    pub use crate::proto::redq::v1::*;

    /// `google.rpc.Status`, sent per request on streaming RPCs.
    pub mod rpc {
        pub use crate::proto::google::rpc::*;
    }

    /// Encoded descriptors of redq's protos, served by gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("redq_descriptor");
}

/// `redq serve`: checks the configuration, binds the listeners and runs
/// until SIGTERM or SIGINT.
pub async fn serve(args: config::ServeArgs) -> Result<(), error::BoxError> {
    args.settings.limits.validate()?;
    let access = args.redis.access()?;
    let store = store::Store::new(&access, args.settings.redis_pool_size)
        .map_err(|e| format!("--redis-url: {e}"))?
        .with_replica_wait(args.settings.replica_wait());
    let grpc = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", args.listen))?;
    let http = tokio::net::TcpListener::bind(args.metrics_listen)
        .await
        .map_err(|e| format!("--metrics-listen {}: {e}", args.metrics_listen))?;
    server::run(grpc, http, store, args.settings, shutdown::signal()).await
}
