//! The flags of TLS, authentication, Redis credentials and abuse limits.

use super::Secret;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// TLS on the gRPC and HTTP ports, tokens, and the limits that keep one
/// client from taking a replica down.
#[derive(Debug, Clone, Default, Args)]
pub struct Security {
    /// PEM certificate chain of the gRPC port; with --tls-key, turns TLS on.
    #[arg(long, env = "REDQ_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "REDQ_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates that sign client certificates: turns on mTLS.
    #[arg(long, env = "REDQ_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: whether every client must present a certificate.
    #[arg(long, env = "REDQ_TLS_CLIENT_AUTH", value_enum, default_value_t = ClientAuth::Required)]
    pub tls_client_auth: ClientAuth,
    /// PEM certificate chain of the HTTP port (/metrics, /healthz, /readyz).
    #[arg(long, env = "REDQ_HTTP_TLS_CERT", requires = "http_tls_key")]
    pub http_tls_cert: Option<PathBuf>,
    /// PEM private key of --http-tls-cert.
    #[arg(long, env = "REDQ_HTTP_TLS_KEY", requires = "http_tls_cert")]
    pub http_tls_key: Option<PathBuf>,
    /// PEM CA certificates for optional client certificates on the HTTP port
    /// (never required there, so that kubelet probes and Prometheus work).
    #[arg(long, env = "REDQ_HTTP_TLS_CLIENT_CA", requires = "http_tls_cert")]
    pub http_tls_client_ca: Option<PathBuf>,
    /// How long a TLS handshake may take before the connection is closed.
    #[arg(long, env = "REDQ_TLS_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = super::parse::parse_positive_duration)]
    pub tls_handshake_timeout: Duration,
    /// How often certificates and the tokens file are read again (they are
    /// also read at once on SIGHUP); a file that changed and is bad is
    /// ignored, keeping what was loaded before.
    #[arg(long, env = "REDQ_RELOAD_INTERVAL", default_value = "30s", value_parser = super::parse::parse_positive_duration)]
    pub reload_interval: Duration,
    /// JSON file of the tokens and their grants; without it the server is open.
    #[arg(long, env = "REDQ_AUTH_TOKENS_FILE")]
    pub auth_tokens_file: Option<PathBuf>,
    /// With --auth-tokens-file: gRPC reflection requires a valid token too.
    #[arg(long, env = "REDQ_AUTH_REFLECTION")]
    pub auth_reflection: bool,
    /// Most concurrent HTTP/2 streams (calls) on one gRPC connection,
    /// advertised in SETTINGS; more are refused with REFUSED_STREAM.
    #[arg(long, env = "REDQ_MAX_CONCURRENT_STREAMS", default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_streams: u32,
    /// Largest header list of a request, in bytes (metadata, token included).
    #[arg(long, env = "REDQ_MAX_HEADER_LIST_BYTES", default_value_t = 16 * 1024, value_parser = clap::value_parser!(u32).range(1024..))]
    pub max_header_list_bytes: u32,
    /// HTTP/2 PING interval on idle gRPC connections; a client that does not
    /// answer within --http2-keepalive-timeout is disconnected.
    #[arg(long, env = "REDQ_HTTP2_KEEPALIVE_INTERVAL", default_value = "60s", value_parser = super::parse::parse_positive_duration)]
    pub http2_keepalive_interval: Duration,
    #[arg(long, env = "REDQ_HTTP2_KEEPALIVE_TIMEOUT", default_value = "20s", value_parser = super::parse::parse_positive_duration)]
    pub http2_keepalive_timeout: Duration,
    /// Most open gRPC connections per replica; more are closed at once, and
    /// admitted again as others close.
    #[arg(long, env = "REDQ_MAX_CONNECTIONS", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// With --auth-tokens-file: most open Subscribe streams of one token on a
    /// replica (RESOURCE_EXHAUSTED beyond).
    #[arg(long, env = "REDQ_MAX_STREAMS_PER_TOKEN", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams_per_token: u32,
    /// With --auth-tokens-file: messages per second one token may publish on
    /// a replica, with bursts of as many (0: unlimited). Beyond it a publish
    /// fails with RESOURCE_EXHAUSTED and a RetryInfo saying when to retry.
    #[arg(long, env = "REDQ_PUBLISH_RATE_PER_TOKEN", default_value_t = 0)]
    pub publish_rate_per_token: u32,
}

/// Whether mTLS requires a client certificate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum ClientAuth {
    /// Every client presents a certificate signed by --tls-client-ca.
    #[default]
    Required,
    /// A certificate, when presented, must be signed by it.
    Optional,
}

/// `--redis-url`: the Redis that `serve` keeps messages in, and that `bench`
/// measures beside it (one `REDQ_REDIS_URL` points both at the same one).
#[derive(Debug, Clone, Args)]
pub struct RedisUrl {
    /// Redis to keep messages in: redis://, rediss://, unix://,
    /// redis+cluster://, rediss+cluster:// or redis+sentinel:// URL.
    #[arg(
        long,
        env = "REDQ_REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    pub redis_url: Secret,
}

/// Where the server's Redis is and how it proves itself and redq to it.
#[derive(Debug, Clone, Args)]
pub struct RedisArgs {
    #[command(flatten)]
    pub url: RedisUrl,
    /// PEM CA certificates that sign Redis' certificate (rediss:// URLs),
    /// instead of the system's.
    #[arg(long, env = "REDQ_REDIS_CA_FILE")]
    pub redis_ca_file: Option<PathBuf>,
    /// PEM client certificate for Redis mTLS (`tls-auth-clients yes`).
    #[arg(long, env = "REDQ_REDIS_CLIENT_CERT", requires = "redis_client_key")]
    pub redis_client_cert: Option<PathBuf>,
    /// PEM private key of --redis-client-cert.
    #[arg(long, env = "REDQ_REDIS_CLIENT_KEY", requires = "redis_client_cert")]
    pub redis_client_key: Option<PathBuf>,
    /// File holding Redis' password (one line), so that it is in neither the
    /// URL nor the process list; overrides a password in the URL.
    #[arg(long, env = "REDQ_REDIS_PASSWORD_FILE")]
    pub redis_password_file: Option<PathBuf>,
}

impl RedisArgs {
    /// The URL with the files it names read: an error names the flag.
    pub fn access(&self) -> Result<crate::store::connection::RedisAccess, String> {
        let read = |path: &PathBuf, flag: &str| {
            std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
        };
        let password = self
            .redis_password_file
            .as_ref()
            .map(|path| {
                let bytes = read(path, "--redis-password-file")?;
                let text = String::from_utf8(bytes)
                    .map_err(|_| "--redis-password-file: not UTF-8 text".to_owned())?;
                Ok::<_, String>(text.trim_end_matches(['\r', '\n']).to_owned())
            })
            .transpose()?;
        let root_cert = self
            .redis_ca_file
            .as_ref()
            .map(|path| read(path, "--redis-ca-file"))
            .transpose()?;
        let client_tls = match (&self.redis_client_cert, &self.redis_client_key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read(cert, "--redis-client-cert")?,
                client_key: read(key, "--redis-client-key")?,
            }),
            _ => None,
        };
        let certificates =
            (root_cert.is_some() || client_tls.is_some()).then_some(redis::TlsCertificates {
                client_tls,
                root_cert,
            });
        Ok(crate::store::connection::RedisAccess {
            url: self.url.redis_url.expose().to_owned(),
            password,
            certificates,
        })
    }
}
