//! Redis storage: one module per Redis structure, each command or script in
//! one place. Nothing above this module builds a key or sends a command.

pub mod dead_letters;
pub mod gauges;
pub mod keys;
pub mod leases;
pub mod scheduled;
mod scripts;
pub mod stream;
pub mod topics;

use crate::error::Result;
use bb8_redis::RedisConnectionManager;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::runtime::Handle;

pub use keys::TopicKeys;

/// Longest time a blocking read waits in Redis before returning empty.
pub const BLOCK: Duration = Duration::from_secs(5);

/// Longest wait for a reply on a shared connection. Scripts are short, but a
/// Redis busy with a large trim or promotion may take a while.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Handle on Redis, with three kinds of connection:
/// - one shared, auto-pipelined connection for the calls clients wait on
///   (publish, fetch, ack, nack, lease extension): concurrent calls are
///   written together and share round trips, with no checkout and no PING
///   per call, and it reconnects by itself;
/// - a pool for background loops and admin calls, whose larger replies and
///   longer scripts should not queue in front of client calls;
/// - dedicated connections for blocking reads and Pub/Sub.
#[derive(Clone)]
pub struct Store {
    shared: ConnectionManager,
    /// The shared connections of the server's workers, each with the
    /// runtime it lives on (see [`Store::with_own_shared_connection`]).
    worker_connections: Arc<Mutex<Vec<(Handle, ConnectionManager)>>>,
    pool: bb8::Pool<RedisConnectionManager>,
    client: Client,
}

fn shared_connection(client: &Client) -> redis::RedisResult<ConnectionManager> {
    ConnectionManager::new_lazy_with_config(
        client.clone(),
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2),
    )
}

async fn ping(mut connection: ConnectionManager) -> Result<()> {
    let _: String = redis::cmd("PING").query_async(&mut connection).await?;
    Ok(())
}

/// A pooled connection, returned to the pool on drop.
pub type PooledConnection<'a> = bb8::PooledConnection<'a, RedisConnectionManager>;

impl Store {
    /// Prepares connections to `url` without connecting: a server must start,
    /// and report NOT_SERVING, while Redis is still unreachable.
    pub fn new(url: &str, pool_size: u32) -> Result<Self, redis::RedisError> {
        let client = Client::open(url)?;
        let shared = shared_connection(&client)?;
        let manager = RedisConnectionManager::new(url)?;
        let pool = bb8::Pool::builder()
            .max_size(pool_size)
            .connection_timeout(Duration::from_secs(2))
            .build_unchecked(manager);
        Ok(Self {
            shared,
            worker_connections: Arc::default(),
            pool,
            client,
        })
    }

    /// This store with a shared connection of its own, for one of the
    /// server's single-threaded workers: the connection's tasks then run on
    /// the worker's thread, next to the calls that use it. Call it on the
    /// worker's runtime.
    pub fn with_own_shared_connection(&self) -> Result<Self> {
        let shared = shared_connection(&self.client)?;
        self.worker_connections
            .lock()
            .expect("worker connections lock")
            .push((Handle::current(), shared.clone()));
        Ok(Self {
            shared,
            ..self.clone()
        })
    }

    /// The shared connection for client calls; cheap to clone.
    pub(crate) fn shared(&self) -> ConnectionManager {
        self.shared.clone()
    }

    pub(crate) async fn connection(&self) -> Result<PooledConnection<'_>> {
        Ok(self.pool.get().await?)
    }

    /// A connection of its own for blocking reads: they would stall every
    /// command multiplexed behind them, and its response timeout must
    /// outlast the block (redis-rs' default is 500 ms).
    pub async fn blocking_connection(&self) -> Result<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(BLOCK + Duration::from_secs(5)));
        Ok(self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?)
    }

    /// A Pub/Sub connection, used for the hints replicas send each other.
    pub async fn pubsub(&self) -> Result<redis::aio::PubSub> {
        Ok(self.client.get_async_pubsub().await?)
    }

    /// Round trip to Redis on the shared connection and on the pool, for
    /// health checks. A failed PING also makes the shared connection
    /// reconnect, so that once this passes again client calls work too.
    pub async fn ping(&self) -> Result<()> {
        ping(self.shared()).await?;
        let workers = self
            .worker_connections
            .lock()
            .expect("worker connections lock")
            .clone();
        for (runtime, connection) in workers {
            // On the worker's runtime, where a reconnect must spawn its
            // tasks; a worker that has stopped needs no connection.
            if let Ok(pinged) = runtime.spawn(ping(connection)).await {
                pinged?;
            }
        }
        let mut conn = self.connection().await?;
        let _: String = redis::cmd("PING").query_async(&mut *conn).await?;
        Ok(())
    }

    /// Sends a hint to every replica.
    pub async fn publish_hint(&self, hint: &str) -> Result<()> {
        let mut conn = self.connection().await?;
        let _: i64 = redis::cmd("PUBLISH")
            .arg(keys::HINTS_CHANNEL)
            .arg(hint)
            .query_async(&mut *conn)
            .await?;
        Ok(())
    }

    /// Settings that decide whether Redis keeps what it acknowledged, as
    /// `(name, value, advice)` for each one that does not; empty when Redis
    /// will not say (CONFIG is often disabled on managed Redis).
    pub async fn durability_warnings(&self) -> Result<Vec<(String, String, &'static str)>> {
        let mut conn = self.connection().await?;
        let mut warnings = Vec::new();
        for (name, wanted, advice) in [
            (
                "appendonly",
                "yes",
                "acknowledged messages can be lost on a Redis restart",
            ),
            (
                "maxmemory-policy",
                "noeviction",
                "Redis may evict messages under memory pressure",
            ),
        ] {
            let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query_async(&mut *conn)
                .await;
            if let Ok([_, value]) = reply.as_deref()
                && value != wanted
            {
                warnings.push((name.to_owned(), value.clone(), advice));
            }
        }
        Ok(warnings)
    }
}
