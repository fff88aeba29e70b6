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
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use std::time::Duration;

/// Where Redis is, from `--redis-url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    /// `redis://`, `rediss://` or `unix://`: one server.
    Standalone(String),
    /// `redis+cluster://[user:password@]host:port[,host:port…]`: the seed
    /// nodes of a Redis Cluster, as `redis://` URLs.
    Cluster(Vec<String>),
}

impl Topology {
    /// Reads a `--redis-url`; the error says what is wrong without the URL
    /// (it may hold a password).
    pub fn parse(url: &str) -> Result<Self, String> {
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
        let (userinfo, hosts) = match rest.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, rest),
        };
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

/// The cluster client, with explicit timeouts: the builder has no response
/// timeout by default, and waits at least 1.28 s between retries.
pub fn cluster_client(seeds: &[String]) -> RedisResult<ClusterClient> {
    ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(5))
        .retries(6)
        .min_retry_wait(50)
        .max_retry_wait(1000)
        .build()
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

/// A connection of either topology; cheap to clone.
#[derive(Clone)]
pub enum Connection {
    Single(ConnectionManager),
    /// A dedicated standalone connection (blocking reads).
    Dedicated(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(conn) => conn.req_packed_command(cmd),
            Connection::Dedicated(conn) => conn.req_packed_command(cmd),
            Connection::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Connection::Dedicated(conn) => conn.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(conn) => conn.get_db(),
            Connection::Dedicated(conn) => conn.get_db(),
            Connection::Cluster(conn) => conn.get_db(),
        }
    }
}

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
        let err = Topology::parse("redis+cluster://u:secret@h:1/0").unwrap_err();
        assert!(!err.contains("secret"));
    }
}
