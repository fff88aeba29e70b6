//! The connections behind a [`super::Store`], for each Redis topology: one
//! standalone server, a master found through Sentinels, or a Redis Cluster. Everything above takes a
//! [`Connection`] and sends commands and scripts through it; a cluster
//! connection routes each one to the owner of its key's slot (every script
//! declares its keys, all in one topic's hash tag) and follows `MOVED`/`ASK`.
//!
//! - `topology`: `--redis-url` and what it names (one server, a cluster,
//!   Sentinels), and the access settings (password, certificates).
//! - `clients`: the clients that open connections (a pool's, a cluster's).
//! - `sentinel`: finding the master through the Sentinels, and following
//!   a failover.

mod clients;
mod sentinel;
mod topology;

pub use clients::{PoolManager, cluster_client, lazy_cluster_connection};
pub use sentinel::{SentinelConnection, SentinelConnector};
pub use topology::{RedisAccess, SentinelTarget, Topology};

use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::io::tcp::TcpSettings;
use redis::{Cmd, IntoConnectionInfo, RedisResult, Value};
use std::sync::Arc;
use std::time::Duration;

/// Every connection to Redis or a Sentinel turns Nagle's algorithm off
/// (redis-rs leaves it on): a command written while an earlier one on the
/// multiplexed connection is unanswered would otherwise wait for the ACK of
/// the earlier segment before it leaves.
pub(super) fn tcp_settings() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}

/// A connection of either topology; cheap to clone.
#[derive(Clone)]
pub enum Connection {
    Single(ConnectionManager),
    /// A dedicated standalone connection (tools).
    Dedicated(MultiplexedConnection),
    Cluster(ClusterConnection),
    Sentinel(SentinelConnection),
}

/// Implements `ConnectionLike` for an enum each of whose variants holds a
/// connection, by handing every call to it.
macro_rules! delegate_connection_like {
    ($type:ty: $($variant:path),+) => {
        impl redis::aio::ConnectionLike for $type {
            fn req_packed_command<'a>(
                &'a mut self,
                cmd: &'a redis::Cmd,
            ) -> redis::RedisFuture<'a, redis::Value> {
                match self {
                    $($variant(conn) => conn.req_packed_command(cmd),)+
                }
            }

            fn req_packed_commands<'a>(
                &'a mut self,
                pipeline: &'a redis::Pipeline,
                offset: usize,
                count: usize,
            ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
                match self {
                    $($variant(conn) => conn.req_packed_commands(pipeline, offset, count),)+
                }
            }

            fn get_db(&self) -> i64 {
                match self {
                    $($variant(conn) => conn.get_db(),)+
                }
            }
        }
    };
}
pub(crate) use delegate_connection_like;

delegate_connection_like!(Connection: Connection::Single, Connection::Dedicated, Connection::Cluster, Connection::Sentinel);

impl Connection {
    /// `WAIT 1 <timeout>` on the connection (on a cluster, to the master of
    /// `key`'s slot, which took the write): how many replicas confirmed.
    pub async fn wait_for_replica(&mut self, key: &str, timeout: Duration) -> RedisResult<i64> {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(1).arg(timeout.as_millis() as u64);
        match self {
            Connection::Cluster(conn) => {
                let route = Route::with_key(key, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let reply = conn.route_command(cmd, routing).await?;
                Ok(redis::from_redis_value(reply)?)
            }
            _ => cmd.query_async(self).await,
        }
    }

    /// Every key matching `pattern` on every master, by a `SCAN` of each
    /// (a cursor belongs to one node, so a cluster is scanned node by node,
    /// never through the cluster connection's routing).
    pub async fn scan_every_master(&mut self, pattern: &str) -> RedisResult<Vec<String>> {
        let nodes = match self {
            Connection::Cluster(conn) => cluster_masters(conn)
                .await?
                .into_iter()
                .map(|(host, port)| Some(SingleNodeRoutingInfo::ByAddress { host, port }))
                .collect(),
            _ => vec![None],
        };
        let mut keys = Vec::new();
        for node in nodes {
            let mut cursor = 0u64;
            loop {
                let cmd = scan(cursor, pattern);
                let reply = match (&mut *self, &node) {
                    (Connection::Cluster(conn), Some(node)) => {
                        let routing = RoutingInfo::SingleNode(node.clone());
                        conn.route_command(cmd, routing).await?
                    }
                    _ => cmd.query_async(self).await?,
                };
                let (next, page): (u64, Vec<String>) = redis::from_redis_value(reply)?;
                keys.extend(page);
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(keys)
    }

    /// Runs `cmd` on every master (the one server when standalone) and
    /// returns each one's reply: for what is per node, not per key
    /// (`INFO`, `CONFIG GET`, `SCAN`).
    pub async fn on_every_master(&mut self, cmd: &Cmd) -> RedisResult<Vec<Value>> {
        match self {
            Connection::Cluster(conn) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let reply = conn.route_command(cmd.clone(), routing).await?;
                Ok(match reply {
                    Value::Map(pairs) => pairs.into_iter().map(|(_, v)| v).collect(),
                    Value::Array(items) => items,
                    other => vec![other],
                })
            }
            _ => Ok(vec![cmd.query_async(self).await?]),
        }
    }
}

/// A connection of its own to the Redis at `url`, of any topology, connected
/// now: for tools (`redq bench`'s raw-Redis baselines), not the server.
pub async fn connect(url: &str) -> RedisResult<Connection> {
    let invalid = |why: String| {
        redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad URL", why))
    };
    Ok(match Topology::parse(url).map_err(invalid)? {
        Topology::Standalone(url) => Connection::Dedicated(
            redis::Client::open(url.into_connection_info()?.set_tcp_settings(tcp_settings()))?
                .get_multiplexed_async_connection()
                .await?,
        ),
        Topology::Cluster(seeds) => {
            Connection::Cluster(cluster_client(&seeds)?.get_async_connection().await?)
        }
        Topology::Sentinel(target) => {
            let mut connection = SentinelConnection::new(
                Arc::new(SentinelConnector::new(&target)?),
                Duration::from_secs(5),
            );
            let _: String = redis::cmd("PING").query_async(&mut connection).await?;
            Connection::Sentinel(connection)
        }
    })
}

/// One `SCAN` page of keys matching `pattern`.
fn scan(cursor: u64, pattern: &str) -> Cmd {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(1000);
    cmd
}

/// The address of every master of a cluster, from `CLUSTER SLOTS` (each
/// range: start, end, then its master's host and port first).
async fn cluster_masters(conn: &mut ClusterConnection) -> RedisResult<Vec<(String, u16)>> {
    let ranges: Vec<Value> = redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await?;
    let mut masters = Vec::new();
    for range in ranges {
        let range: Vec<Value> = redis::from_redis_value(range)?;
        if let Some(master) = range.into_iter().nth(2) {
            let node: Vec<Value> = redis::from_redis_value(master)?;
            let mut node = node.into_iter();
            if let (Some(host), Some(port)) = (node.next(), node.next()) {
                let address = (
                    redis::from_redis_value(host)?,
                    redis::from_redis_value(port)?,
                );
                if !masters.contains(&address) {
                    masters.push(address);
                }
            }
        }
    }
    Ok(masters)
}
