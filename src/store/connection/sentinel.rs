//! Sentinel: the master's address from the Sentinels, a connection to it,
//! and a new one after a failover.

use super::tcp_settings;
use super::topology::SentinelTarget;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, Pipeline, RedisFuture, RedisResult, Value,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Finds the master through the Sentinels, and connects to it.
pub struct SentinelConnector {
    client: tokio::sync::Mutex<SentinelClient>,
    master: String,
    /// Bumped on each `+switch-master` the Sentinels announce: connections
    /// made before it ask for the master again.
    generation: AtomicU64,
    listening: AtomicBool,
}

impl SentinelConnector {
    pub fn new(target: &SentinelTarget) -> RedisResult<Self> {
        let sentinels = target
            .sentinels
            .iter()
            .map(|(host, port)| ConnectionAddr::Tcp(host.clone(), *port));
        let mut builder =
            SentinelClientBuilder::new(sentinels, &target.master, SentinelServerType::Master)?
                .set_client_to_redis_db(target.db)
                .set_client_to_redis_tcp_settings(tcp_settings())
                .set_client_to_sentinel_tcp_settings(tcp_settings());
        if let Some(username) = &target.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = &target.password {
            builder = builder.set_client_to_redis_password(password);
        }
        Ok(Self {
            client: tokio::sync::Mutex::new(builder.build()?),
            master: target.master.clone(),
            generation: AtomicU64::new(0),
            listening: AtomicBool::new(false),
        })
    }

    /// The name of the master the Sentinels are asked for.
    pub fn master_name(&self) -> &str {
        &self.master
    }

    /// A client for the server the Sentinels call master now; the first
    /// call starts listening for the Sentinels' `+switch-master`.
    pub async fn master(self: &Arc<Self>) -> RedisResult<redis::Client> {
        if !self.listening.swap(true, Ordering::Relaxed) {
            tokio::spawn(listen_for_switches(Arc::downgrade(self)));
        }
        self.client.lock().await.async_get_client().await
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }
}

/// Follows the Sentinels' `+switch-master` announcements, so that a failover
/// moves every connection at once rather than each at its next error. Ends
/// with the connector.
async fn listen_for_switches(connector: std::sync::Weak<SentinelConnector>) {
    use futures::StreamExt;
    let mut retry = Duration::from_millis(100);
    loop {
        let Some(strong) = connector.upgrade() else {
            return;
        };
        let sentinel = strong.client.lock().await.async_get_sentinel_client().await;
        let master = strong.master.clone();
        drop(strong);
        let subscribed = match sentinel {
            Ok(client) => match client.get_async_pubsub().await {
                Ok(mut pubsub) => pubsub.subscribe("+switch-master").await.map(|()| pubsub),
                Err(err) => Err(err),
            },
            Err(err) => Err(err),
        };
        match subscribed {
            Ok(mut pubsub) => {
                retry = Duration::from_millis(100);
                let mut messages = pubsub.on_message();
                while let Some(message) = messages.next().await {
                    let payload: String = message.get_payload().unwrap_or_default();
                    // "<master name> <old ip> <old port> <new ip> <new port>"
                    let mut fields = payload.split_whitespace();
                    if fields.next() == Some(master.as_str()) {
                        let Some(connector) = connector.upgrade() else {
                            return;
                        };
                        connector.generation.fetch_add(1, Ordering::Relaxed);
                        let to: Vec<&str> = fields.skip(2).collect();
                        tracing::info!(master = %master, to = %to.join(":"), "sentinel: the master moved");
                    }
                }
            }
            Err(err) => tracing::debug!(error = ?err, "sentinel: cannot follow +switch-master"),
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(Duration::from_secs(5));
    }
}

/// A connection to the master a Sentinel names, which asks again after an
/// error that a failover causes (the old master answers READONLY, blocked
/// reads get UNBLOCKED, or the connection breaks). The failed call is not
/// retried: a retry could write twice; the caller sees UNAVAILABLE.
#[derive(Clone)]
pub struct SentinelConnection {
    connector: Arc<SentinelConnector>,
    config: AsyncConnectionConfig,
    /// The connection, and the connector's generation it was made in.
    current: Arc<std::sync::Mutex<Option<(u64, MultiplexedConnection)>>>,
}

impl SentinelConnection {
    pub fn new(connector: Arc<SentinelConnector>, response_timeout: Duration) -> Self {
        Self {
            connector,
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(2)))
                .set_response_timeout(Some(response_timeout)),
            current: Arc::default(),
        }
    }

    async fn connection(&self) -> RedisResult<MultiplexedConnection> {
        let generation = self.connector.generation();
        if let Some((made, conn)) = self.current.lock().expect("sentinel lock").clone()
            && made == generation
        {
            return Ok(conn);
        }
        let master = self.connector.master().await?;
        let conn = master
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        *self.current.lock().expect("sentinel lock") = Some((generation, conn.clone()));
        Ok(conn)
    }

    /// Forgets the master after an error a failover causes.
    fn after<T>(&self, result: &RedisResult<T>) {
        if let Err(err) = result
            && failed_over(err)
        {
            self.current.lock().expect("sentinel lock").take();
        }
    }
}

/// Whether `err` means the server is no longer (reachable as) the master.
fn failed_over(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || matches!(
            err.code(),
            Some("READONLY" | "UNBLOCKED" | "MASTERDOWN" | "LOADING")
        )
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            let result = conn.req_packed_command(cmd).await;
            self.after(&result);
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            self.after(&result);
            result
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
