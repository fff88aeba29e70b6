//! `--redis-url`: which topology it names, where its nodes are, and how
//! redq authenticates to them.

use super::clients::cluster_builder;
use super::sentinel::SentinelConnector;
use super::tcp_settings;
use redis::cluster::ClusterClient;
use redis::{ConnectionAddr, IntoConnectionInfo, RedisResult};

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
