//! The clients that open Redis connections: a pool's for one server, and
//! the cluster client with its timeouts.

use super::tcp_settings;
use redis::RedisResult;
use redis::aio::MultiplexedConnection;
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use std::time::Duration;

/// A bb8 pool's connections to one server, made by a client that may carry
/// TLS certificates (bb8-redis' manager takes only a URL).
#[derive(Clone)]
pub struct PoolManager(pub redis::Client);

impl bb8::ManageConnection for PoolManager {
    type Connection = MultiplexedConnection;
    type Error = redis::RedisError;

    async fn connect(&self) -> RedisResult<MultiplexedConnection> {
        self.0.get_multiplexed_async_connection().await
    }

    async fn is_valid(&self, conn: &mut MultiplexedConnection) -> RedisResult<()> {
        let _: String = redis::cmd("PING").query_async(conn).await?;
        Ok(())
    }

    fn has_broken(&self, _: &mut MultiplexedConnection) -> bool {
        false
    }
}

/// The cluster client, with explicit timeouts: the builder has no response
/// timeout by default, and waits at least 1.28 s between retries. A request
/// with its retries and redirections (MOVED, ASK during a migration) takes at
/// most 15 s.
pub fn cluster_client(seeds: &[String]) -> RedisResult<ClusterClient> {
    cluster_builder(seeds).build()
}

pub(super) fn cluster_builder(seeds: &[String]) -> ClusterClientBuilder {
    ClusterClientBuilder::new(seeds.to_vec())
        .tcp_settings(tcp_settings())
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(5))
        .overall_response_timeout(Some(Duration::from_secs(15)))
        .retries(6)
        .min_retry_wait(50)
        .max_retry_wait(1000)
}

/// A cluster connection that connects in the background: a server must
/// start, and report NOT_SERVING, while Redis is still unreachable.
pub fn lazy_cluster_connection(
    client: &ClusterClient,
    response_timeout: Duration,
) -> ClusterConnection {
    client.get_pending_async_connection_with_config(
        ClusterConfig::new()
            .set_connection_timeout(Duration::from_secs(2))
            .set_response_timeout(response_timeout),
    )
}
