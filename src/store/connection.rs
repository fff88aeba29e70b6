//! The connections behind a [`super::Store`], for each Redis topology: one
//! standalone server, or a Redis Cluster. Everything above takes a
//! [`Connection`] and sends commands and scripts through it; a cluster
//! connection routes each one to the owner of its key's slot (every script
//! declares its keys, all in one topic's hash tag) and follows `MOVED`/`ASK`.

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::io::tcp::TcpSettings;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, IntoConnectionInfo, Pipeline, RedisFuture,
    RedisResult, Value,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Every connection to Redis or a Sentinel turns Nagle's algorithm off
/// (redis-rs leaves it on): a command written while an earlier one on the
/// multiplexed connection is unanswered would otherwise wait for the ACK of
/// the earlier segment before it leaves.
fn tcp_settings() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}

/// Where Redis is, from `--redis-url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    /// `redis://`, `rediss://` or `unix://`: one server.
    Standalone(String),
    /// `redis+cluster://[user:password@]host:port[,host:port…]`: the seed
    /// nodes of a Redis Cluster, as `redis://` URLs.
    Cluster(Vec<String>),
    /// `redis+sentinel://[user:password@]host:port[,host:port…]/<master>[/db]`:
    /// the Sentinels that know which server is the master.
    Sentinel(SentinelTarget),
}

/// The Sentinels to ask, for which master; the credentials are the master's.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelTarget {
    pub sentinels: Vec<(String, u16)>,
    pub master: String,
    pub db: i64,
    pub username: Option<String>,
    pub password: Option<String>,
}

impl std::fmt::Debug for SentinelTarget {
    /// Without the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelTarget")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

/// Splits `[user:password@]rest` (the password may contain `@`: the last one counts).
fn split_userinfo(rest: &str) -> (Option<&str>, &str) {
    match rest.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, rest),
    }
}

fn parse_sentinel(rest: &str) -> Result<SentinelTarget, String> {
    let (userinfo, rest) = split_userinfo(rest);
    let mut parts = rest.trim_end_matches('/').split('/');
    let hosts = parts.next().unwrap_or_default();
    let master = parts
        .next()
        .filter(|m| !m.is_empty())
        .ok_or("a sentinel URL ends with /<master-name>")?
        .to_owned();
    let db = match parts.next() {
        None => 0,
        Some(db) => db
            .parse()
            .map_err(|_| "the database after the master name is a number")?,
    };
    let sentinels = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|host| {
            let (name, port) = host.rsplit_once(':').unwrap_or((host, "26379"));
            let port = port.parse().map_err(|_| "a sentinel's port is a number")?;
            Ok((name.to_owned(), port))
        })
        .collect::<Result<Vec<_>, String>>()?;
    if sentinels.is_empty() {
        return Err("a sentinel URL names at least one host:port".into());
    }
    let (username, password) = match userinfo.map(|u| u.split_once(':').unwrap_or((u, ""))) {
        Some((user, password)) => (
            Some(user.to_owned()).filter(|u| !u.is_empty()),
            Some(password.to_owned()).filter(|p| !p.is_empty()),
        ),
        None => (None, None),
    };
    Ok(SentinelTarget {
        sentinels,
        master,
        db,
        username,
        password,
    })
}

impl Topology {
    /// Whether Redis runs on this machine: every server the URL names is on
    /// a loopback address or a Unix socket (for Sentinel: every Sentinel).
    pub fn on_this_machine(&self) -> bool {
        match self {
            Topology::Standalone(url) => url_on_this_machine(url),
            Topology::Cluster(seeds) => seeds.iter().all(|seed| url_on_this_machine(seed)),
            Topology::Sentinel(target) => {
                target.sentinels.iter().all(|(host, _)| is_loopback(host))
            }
        }
    }

    /// Reads a `--redis-url`; the error says what is wrong without the URL
    /// (it may hold a password).
    pub fn parse(url: &str) -> Result<Self, String> {
        if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            return parse_sentinel(rest).map(Topology::Sentinel);
        }
        let Some(rest) = url
            .strip_prefix("redis+cluster://")
            .map(|rest| ("redis", rest))
            .or_else(|| {
                url.strip_prefix("rediss+cluster://")
                    .map(|rest| ("rediss", rest))
            })
        else {
            return Ok(Topology::Standalone(url.to_owned()));
        };
        let (scheme, rest) = rest;
        let rest = rest.trim_end_matches('/');
        let (userinfo, hosts) = split_userinfo(rest);
        let seeds: Vec<String> = hosts
            .split(',')
            .filter(|host| !host.is_empty())
            .map(|host| match userinfo {
                Some(userinfo) => format!("{scheme}://{userinfo}@{host}"),
                None => format!("{scheme}://{host}"),
            })
            .collect();
        if seeds.is_empty() {
            return Err("a cluster URL names at least one host:port".into());
        }
        if hosts.contains('/') {
            return Err("a cluster has no database number: drop the /db".into());
        }
        Ok(Topology::Cluster(seeds))
    }
}

fn url_on_this_machine(url: &str) -> bool {
    match url.into_connection_info().map(|info| info.addr().clone()) {
        Ok(ConnectionAddr::Unix(_)) => true,
        Ok(ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. }) => {
            is_loopback(&host)
        }
        Ok(_) | Err(_) => false,
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// How to reach Redis: `--redis-url`, and what proves redq to it and it to
/// redq (`--redis-password-file`, `--redis-ca-file`, Redis mTLS).
#[derive(Clone)]
pub struct RedisAccess {
    pub url: String,
    /// Overrides a password in the URL.
    pub password: Option<String>,
    /// For `rediss://` URLs: a private CA, a client certificate.
    pub certificates: Option<redis::TlsCertificates>,
}

impl std::fmt::Debug for RedisAccess {
    /// Without the URL or the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisAccess").finish_non_exhaustive()
    }
}

impl RedisAccess {
    pub fn url(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            password: None,
            certificates: None,
        }
    }

    /// A client for one server's `url` (of the topology), with the password
    /// and, for `rediss://`, the certificates.
    pub fn client(&self, url: &str) -> RedisResult<redis::Client> {
        let mut info = url.into_connection_info()?.set_tcp_settings(tcp_settings());
        if let Some(password) = &self.password {
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        match &self.certificates {
            Some(certificates) if url.starts_with("rediss://") => {
                redis::Client::build_with_tls(info, certificates.clone())
            }
            _ => redis::Client::open(info),
        }
    }

    /// The cluster client of `seeds`, with the password and certificates.
    pub fn cluster_client(&self, seeds: &[String]) -> RedisResult<ClusterClient> {
        let mut builder = cluster_builder(seeds);
        if let Some(password) = &self.password {
            builder = builder.password(password.clone());
        }
        if let Some(certificates) = &self.certificates {
            builder = builder.certs(certificates.clone());
        }
        builder.build()
    }

    /// The Sentinels of `target`, with the master's password.
    pub fn sentinel(&self, target: &SentinelTarget) -> RedisResult<SentinelConnector> {
        let mut target = target.clone();
        if self.password.is_some() {
            target.password = self.password.clone();
        }
        SentinelConnector::new(&target)
    }
}

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

fn cluster_builder(seeds: &[String]) -> ClusterClientBuilder {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_name_their_seeds() {
        assert_eq!(
            Topology::parse("redis+cluster://10.0.0.1:7000,10.0.0.2:7001"),
            Ok(Topology::Cluster(vec![
                "redis://10.0.0.1:7000".into(),
                "redis://10.0.0.2:7001".into()
            ]))
        );
        assert_eq!(
            Topology::parse("rediss+cluster://user:secret@h:7000/"),
            Ok(Topology::Cluster(vec![
                "rediss://user:secret@h:7000".into()
            ]))
        );
        assert_eq!(
            Topology::parse("redis://127.0.0.1:6379/2"),
            Ok(Topology::Standalone("redis://127.0.0.1:6379/2".into()))
        );
        assert!(Topology::parse("redis+cluster://").is_err());
        let Ok(Topology::Sentinel(target)) =
            Topology::parse("redis+sentinel://:s3cret@10.0.0.1:26379,10.0.0.2/mymaster/2")
        else {
            panic!("a sentinel URL");
        };
        assert_eq!(
            target.sentinels,
            [
                ("10.0.0.1".to_owned(), 26379),
                ("10.0.0.2".to_owned(), 26379)
            ]
        );
        assert_eq!((target.master.as_str(), target.db), ("mymaster", 2));
        assert_eq!(target.password.as_deref(), Some("s3cret"));
        assert!(!format!("{target:?}").contains("s3cret"));
        assert!(Topology::parse("redis+sentinel://h:26379").is_err());
        let err = Topology::parse("redis+cluster://u:secret@h:1/0").unwrap_err();
        assert!(!err.contains("secret"));
    }

    #[test]
    fn redis_on_loopback_or_a_unix_socket_is_on_this_machine() {
        let on_this_machine = |url: &str| Topology::parse(url).unwrap().on_this_machine();
        for url in [
            "redis://127.0.0.1:6379",
            "redis://localhost",
            "rediss://user:pw@127.0.0.2:6380/1",
            "redis://[::1]:6379",
            "unix:///tmp/redis.sock",
            "redis+cluster://127.0.0.1:7000,localhost:7001",
            "redis+sentinel://127.0.0.1:26379/mymaster",
        ] {
            assert!(on_this_machine(url), "{url}");
        }
        for url in [
            "redis://10.0.0.1:6379",
            "redis://redis.default.svc:6379",
            "redis+cluster://127.0.0.1:7000,10.0.0.2:7001",
            "redis+sentinel://127.0.0.1:26379,sentinel-1:26379/mymaster",
        ] {
            assert!(!on_this_machine(url), "{url}");
        }
    }
}
