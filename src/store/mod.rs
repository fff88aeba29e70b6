//! Redis storage: one module per Redis structure, each command or script in
//! one place. Nothing above this module builds a key or sends a command.

pub mod browse;
pub mod connection;
pub mod dead_letters;
pub mod ephemeral;
pub mod gauges;
pub mod hints;
pub mod keys;
pub mod leases;
pub mod list;
pub mod ordering;
mod pubsub_records;
mod replies;
pub mod samples;
pub mod scheduled;
pub mod schedules;
mod scripts;
pub mod sessions;
pub mod stream;
pub mod subscriptions;
pub mod topics;

use crate::error::Result;
use connection::{
    Connection, PoolManager, RedisAccess, SentinelConnection, SentinelConnector, Topology,
};
use redis::Client;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::runtime::Handle;

pub use keys::TopicKeys;

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
/// - a dedicated connection for Pub/Sub.
///
/// On a Redis Cluster each of them is a cluster connection (multiplexed per
/// node, so there is no pool), which sends every command and script to the
/// master of its key's slot.
#[derive(Clone)]
pub struct Store {
    shared: Connection,
    /// With `--durability replicated`, how long writes wait for a replica.
    replica_wait: Option<Duration>,
    /// The shared connections of the server's workers, each with the
    /// runtime it lives on (see [`Store::with_own_shared_connection`]).
    worker_connections: Arc<Mutex<Vec<(Handle, Connection)>>>,
    /// This replica's name among a topic's watchers (see [`hints`]).
    replica: Arc<str>,
    /// Redis runs on this machine (see [`Topology::on_this_machine`]).
    redis_on_this_machine: bool,
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Standalone {
        client: Client,
        pool: bb8::Pool<PoolManager>,
    },
    Cluster {
        client: Box<ClusterClient>,
        /// For background loops and admin calls.
        background: ClusterConnection,
        seeds: Vec<String>,
        access: RedisAccess,
    },
    Sentinel {
        connector: Arc<SentinelConnector>,
        /// For background loops and admin calls.
        background: SentinelConnection,
    },
}

fn shared_connection(backend: &Backend) -> redis::RedisResult<Connection> {
    Ok(match backend {
        Backend::Standalone { client, .. } => {
            Connection::Single(ConnectionManager::new_lazy_with_config(
                client.clone(),
                ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(2)))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_number_of_retries(2),
            )?)
        }
        Backend::Cluster { client, .. } => Connection::Cluster(
            connection::lazy_cluster_connection(client, RESPONSE_TIMEOUT),
        ),
        Backend::Sentinel { connector, .. } => {
            Connection::Sentinel(SentinelConnection::new(connector.clone(), RESPONSE_TIMEOUT))
        }
    })
}

/// The health probe: a read of the topic registry's key, not a PING, so that
/// on a cluster it asks the master of the registry's slot. The server is
/// NOT_SERVING only while that slot is unreachable; a topic whose shard is
/// down fails its own calls with UNAVAILABLE, and the others keep serving.
async fn ping(mut connection: impl ConnectionLike) -> Result<()> {
    let _: i64 = redis::cmd("EXISTS")
        .arg(keys::TOPICS)
        .query_async(&mut connection)
        .await?;
    Ok(())
}

/// A connection for background loops and admin calls: from the pool when
/// standalone (returned on drop); the multiplexed background connection on a
/// cluster or behind Sentinel.
pub enum PooledConnection<'a> {
    Pooled(bb8::PooledConnection<'a, PoolManager>),
    Multiplexed(Connection),
}

connection::delegate_connection_like!(PooledConnection<'_>: PooledConnection::Pooled, PooledConnection::Multiplexed);

impl Store {
    /// Prepares connections to `url` without connecting: a server must start,
    /// and report NOT_SERVING, while Redis is still unreachable.
    pub fn new(access: &RedisAccess, pool_size: u32) -> Result<Self, redis::RedisError> {
        let topology = Topology::parse(&access.url).map_err(|why| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad URL", why))
        })?;
        let redis_on_this_machine = topology.on_this_machine();
        let backend = match topology {
            Topology::Standalone(url) => {
                let client = access.client(&url)?;
                let manager = PoolManager(client.clone());
                let pool = bb8::Pool::builder()
                    .max_size(pool_size)
                    .connection_timeout(Duration::from_secs(2))
                    .build_unchecked(manager);
                Backend::Standalone { client, pool }
            }
            Topology::Cluster(seeds) => {
                let client = Box::new(access.cluster_client(&seeds)?);
                let background = connection::lazy_cluster_connection(&client, RESPONSE_TIMEOUT);
                Backend::Cluster {
                    client,
                    background,
                    seeds,
                    access: access.clone(),
                }
            }
            Topology::Sentinel(target) => {
                let connector = Arc::new(access.sentinel(&target)?);
                let background = SentinelConnection::new(connector.clone(), RESPONSE_TIMEOUT);
                Backend::Sentinel {
                    connector,
                    background,
                }
            }
        };
        Ok(Self {
            shared: shared_connection(&backend)?,
            replica_wait: None,
            worker_connections: Arc::default(),
            replica: uuid::Uuid::new_v4().simple().to_string().into(),
            redis_on_this_machine,
            backend,
        })
    }

    /// Whether Redis runs on this machine, sharing its cores with redq.
    pub fn redis_on_this_machine(&self) -> bool {
        self.redis_on_this_machine
    }

    /// This store, acknowledging writes only once a replica has them when
    /// `replica_wait` is set (`--durability replicated`).
    pub fn with_replica_wait(self, replica_wait: Option<Duration>) -> Self {
        Self {
            replica_wait,
            ..self
        }
    }

    /// With `--durability replicated`: waits until a replica has the writes
    /// made so far on `conn` to `key`'s node (`WAIT 1`, on the same
    /// connection), at most the configured time.
    pub(crate) async fn replicated(&self, conn: &mut Connection, key: &str) -> Result<()> {
        let Some(timeout) = self.replica_wait else {
            return Ok(());
        };
        let replicas = conn.wait_for_replica(key, timeout).await?;
        if replicas < 1 {
            return Err(crate::error::Error::NotReplicated);
        }
        Ok(())
    }

    /// Connections of the pool, and how many are idle; None on a cluster.
    fn pool_statistics(&self) -> Option<(u32, u32)> {
        match &self.backend {
            Backend::Standalone { pool, .. } => {
                let state = pool.state();
                Some((state.connections, state.idle_connections))
            }
            Backend::Cluster { .. } | Backend::Sentinel { .. } => None,
        }
    }

    /// Where the health check asks (the topic registry's node), for
    /// operators: no credentials.
    pub fn registry_location(&self) -> String {
        match &self.backend {
            Backend::Standalone { client, .. } => {
                format!("redis at {}", client.get_connection_info().addr())
            }
            Backend::Cluster { .. } => {
                let slot = redis::cluster_routing::Slot::for_key(keys::TOPICS);
                format!("the cluster master of {} ({slot:?})", keys::TOPICS)
            }
            Backend::Sentinel { connector, .. } => {
                format!("the master the Sentinels name {}", connector.master_name())
            }
        }
    }

    /// What kind of Redis deployment this is: `standalone`, `sentinel` or `cluster`.
    pub fn topology_name(&self) -> &'static str {
        match self.backend {
            Backend::Standalone { .. } => "standalone",
            Backend::Sentinel { .. } => "sentinel",
            Backend::Cluster { .. } => "cluster",
        }
    }

    /// Whether Redis is a cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.backend, Backend::Cluster { .. })
    }

    /// This store with a shared connection of its own, for one of the
    /// server's single-threaded workers: the connection's tasks then run on
    /// the worker's thread, next to the calls that use it. Call it on the
    /// worker's runtime.
    pub fn with_own_shared_connection(&self) -> Result<Self> {
        let shared = shared_connection(&self.backend)?;
        self.worker_connections
            .lock()
            .expect("worker connections lock")
            .push((Handle::current(), shared.clone()));
        Ok(Self {
            shared,
            ..self.clone()
        })
    }

    /// This replica's name among a topic's watchers.
    pub(crate) fn replica(&self) -> &str {
        &self.replica
    }

    /// The shared connection for client calls; cheap to clone.
    pub(crate) fn shared(&self) -> Connection {
        self.shared.clone()
    }

    pub(crate) async fn connection(&self) -> Result<PooledConnection<'_>> {
        Ok(match &self.backend {
            Backend::Standalone { pool, .. } => PooledConnection::Pooled(pool.get().await?),
            Backend::Cluster { background, .. } => {
                PooledConnection::Multiplexed(Connection::Cluster(background.clone()))
            }
            Backend::Sentinel { background, .. } => {
                PooledConnection::Multiplexed(Connection::Sentinel(background.clone()))
            }
        })
    }

    /// A Pub/Sub connection, used for the hints replicas send each other. On
    /// a cluster, to any node that answers: a PUBLISH reaches every node.
    pub async fn pubsub(&self) -> Result<redis::aio::PubSub> {
        match &self.backend {
            Backend::Standalone { client, .. } => Ok(client.get_async_pubsub().await?),
            Backend::Cluster { seeds, access, .. } => {
                let mut last = None;
                for seed in seeds {
                    match access.client(seed)?.get_async_pubsub().await {
                        Ok(pubsub) => return Ok(pubsub),
                        Err(err) => last = Some(err),
                    }
                }
                Err(last.expect("a cluster has seeds").into())
            }
            // Subscribers on a replica get what is published on its master,
            // so a failover does not lose hints; a dead master breaks the
            // connection, and the listener asks the Sentinels again.
            Backend::Sentinel { connector, .. } => {
                Ok(connector.master().await?.get_async_pubsub().await?)
            }
        }
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
        ping(self.connection().await?).await
    }

    /// Settings that decide whether Redis keeps what it acknowledged, as
    /// `(name, value, advice)` for each one that does not; empty when Redis
    /// will not say (CONFIG is often disabled on managed Redis).
    pub async fn durability_warnings(&self) -> Result<Vec<(String, String, &'static str)>> {
        let mut conn = self.shared();
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
            // Per master: each node of a cluster has its own configuration.
            let replies = conn
                .on_every_master(redis::cmd("CONFIG").arg("GET").arg(name))
                .await
                .unwrap_or_default();
            for reply in replies {
                let reply: Result<Vec<String>, _> = redis::from_redis_value(reply);
                if let Ok([_, value]) = reply.as_deref()
                    && value != wanted
                    && !warnings.iter().any(|(n, v, _)| n == name && v == value)
                {
                    warnings.push((name.to_owned(), value.clone(), advice));
                }
            }
        }
        Ok(warnings)
    }
}
