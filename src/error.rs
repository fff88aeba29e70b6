//! The domain error type and its one mapping to gRPC status codes.

use tonic::{Code, Status};

/// Everything that can go wrong in the broker, sorted by what a client can do about it.
/// Clone, so that one failed write can answer every request it carried.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The request is wrong; `field` names the offending part of it.
    #[error("{field}: {reason}")]
    InvalidArgument { field: String, reason: String },
    /// The named thing does not exist.
    #[error("{0} not found")]
    NotFound(String),

    /// The request is valid, but not in the state the named field needs.
    #[error("{field}: {reason}")]
    FailedPrecondition { field: String, reason: String },
    /// The named thing exists already.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// A limit stops the request (Redis near its memory limit).
    #[error("{0}")]
    ResourceExhausted(String),
    /// The caller no longer holds the lease on these deliveries (their ack ids).
    #[error("{}", lease_lost_message(.0))]
    LeaseLost(Vec<String>),
    /// Redis cannot be reached; the call is safe to retry.
    #[error("redis unavailable")]
    Unavailable(#[source] redis::RedisError),
    /// No Redis connection could be taken from the pool in time.
    #[error("redis connection pool exhausted or unreachable")]
    PoolTimeout,
    /// `--durability replicated`: no replica confirmed the write in time.
    /// It may still have happened; a retry with the same dedupe_id is safe.
    #[error(
        "no replica confirmed the write in time; it may still have happened (retry with the same dedupe_id)"
    )]
    NotReplicated,
    /// The server is shutting down; the call is safe to retry on another replica.
    #[error("server is shutting down")]
    ShuttingDown,
    /// Redis answered something redq did not expect: a bug or a foreign write.
    #[error("redis error")]
    Redis(#[source] redis::RedisError),
    /// Data in Redis that redq cannot decode.
    #[error("corrupt data: {0}")]
    Corrupt(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Any error, for what ends the process or a CLI command with a message
/// (start-up, the client subcommands, the benchmarks): the domain's own
/// errors use [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Error {
    /// Redis (or the node or shard this call needed) cannot be reached:
    /// a retry may succeed. Never a client's mistake, never a bug.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable(_) | Error::PoolTimeout)
    }

    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// Lost-lease ack ids named in a status message, at most: a status travels in
/// HTTP/2 trailers, which clients cap (often at 8 or 16 KiB).
const LOST_IDS_NAMED: usize = 3;

/// A short message for lost leases: the count and the first few ack ids.
fn lease_lost_message(ack_ids: &[String]) -> String {
    let named = ack_ids[..ack_ids.len().min(LOST_IDS_NAMED)].join(", ");
    let more = match ack_ids.len().saturating_sub(LOST_IDS_NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!(
        "ack_ids: the lease is lost for {} of them (redelivered, nacked or acked since; the others were applied): {named}{more}",
        ack_ids.len()
    )
}

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        // Redis at maxmemory with noeviction refuses writes; the memory
        // guard should have paused publishing before that.
        if err.code() == Some("OOM") {
            return Error::ResourceExhausted("redis is out of memory".into());
        }
        if means_unreachable(&err) {
            Error::Unavailable(err)
        } else {
            Error::Redis(err)
        }
    }
}

/// Whether a Redis error means that Redis, or the one node or shard the
/// command needed, cannot be reached now (the call is safe to retry), as
/// opposed to Redis refusing the command (a bug, or a foreign write, worth an
/// error log). On a cluster one shard down must not look like a server fault.
fn means_unreachable(err: &redis::RedisError) -> bool {
    use redis::ErrorKind as Kind;
    match err.kind() {
        // Connection refused, reset or closed, a timeout, no connection to
        // the node that owns a slot, or no node at all.
        Kind::Io | Kind::ClusterConnectionNotFound => true,
        // A Sentinel that knows no master for the name (yet), or no replica.
        Kind::MasterNameNotFoundBySentinel | Kind::NoValidReplicasFoundBySentinel => true,
        // A reply of Redis, alone or inside a pipeline or a transaction that
        // Redis aborted (MULTI/EXEC sent to a node that redirects it).
        Kind::Server(_) | Kind::Extension => match err.clone().into_server_errors() {
            Some(replies) => replies
                .iter()
                .any(|(_, reply)| reply_means_unreachable(reply.code())),
            None => err.code().is_some_and(reply_means_unreachable),
        },
        // Whatever else makes redis-rs drop the connection (a reply it could
        // not parse, a failed AUTH after a reconnect): the next try uses a
        // new one.
        _ => {
            err.is_timeout()
                || err.is_connection_dropped()
                || err.is_connection_refusal()
                || err.is_unrecoverable_error()
        }
    }
}

/// Error replies that say the node cannot serve the key now, rather than
/// that the command is wrong: a node loading its data, a slot migrating or
/// without a master, a cluster that lost coverage, a master that lost its
/// link, a write that reached a master a failover demoted, a redirect the
/// cluster client did not follow (the topology is changing), too few
/// replicas for `min-replicas-to-write`, a blocked read ended by a failover.
fn reply_means_unreachable(code: &str) -> bool {
    matches!(
        code,
        "LOADING"
            | "TRYAGAIN"
            | "CLUSTERDOWN"
            | "MASTERDOWN"
            | "READONLY"
            | "MOVED"
            | "ASK"
            | "NOREPLICAS"
            | "UNBLOCKED"
    )
}

impl From<bb8::RunError<redis::RedisError>> for Error {
    fn from(err: bb8::RunError<redis::RedisError>) -> Self {
        match err {
            bb8::RunError::User(err) => err.into(),
            bb8::RunError::TimedOut => Error::PoolTimeout,
        }
    }
}

impl From<Error> for Status {
    fn from(err: Error) -> Self {
        match &err {
            Error::InvalidArgument { .. } => Status::invalid_argument(err.to_string()),
            Error::NotFound(_) => Status::not_found(err.to_string()),
            Error::AlreadyExists(_) => Status::already_exists(err.to_string()),
            Error::ResourceExhausted(_) => Status::resource_exhausted(err.to_string()),
            Error::LeaseLost(_) | Error::FailedPrecondition { .. } => {
                Status::failed_precondition(err.to_string())
            }
            Error::ShuttingDown | Error::NotReplicated => Status::unavailable(err.to_string()),
            Error::Unavailable(_) | Error::PoolTimeout => {
                tracing::warn!(error = ?err, "redis unavailable");
                Status::unavailable("redis is unavailable, retry later")
            }
            Error::Redis(_) | Error::Corrupt(_) => {
                tracing::error!(error = ?err, "internal error");
                Status::new(Code::Internal, "internal error")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_mistakes_keep_their_field() {
        let status = Status::from(Error::invalid("messages[3].payload", "is empty"));
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "messages[3].payload: is empty");
    }

    #[test]
    fn lost_leases_are_failed_precondition() {
        let status = Status::from(Error::LeaseLost(vec!["1-0/1/c".into()]));
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert!(status.message().contains("1-0/1/c"));
    }

    #[test]
    fn lost_lease_messages_stay_short() {
        let ids: Vec<String> = (0..10_000)
            .map(|i| format!("{i}-0/1/{}", "c".repeat(200)))
            .collect();
        let status = Status::from(Error::LeaseLost(ids));
        assert!(status.message().len() < 1024, "{}", status.message().len());
        assert!(status.message().contains("10000 of them"));
        assert!(status.message().contains("and 9997 more"));
    }

    #[test]
    fn connection_failures_are_unavailable_without_redis_text() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "secret detail");
        let status = Status::from(Error::from(redis::RedisError::from(io)));
        assert_eq!(status.code(), Code::Unavailable);
        assert!(!status.message().contains("secret detail"));
    }

    /// A Redis error of `kind`, as redis-rs builds it.
    fn redis_error(kind: redis::ErrorKind) -> Error {
        Error::from(redis::RedisError::from((kind, "detail from redis")))
    }

    #[test]
    fn every_unreachable_node_or_shard_is_unavailable() {
        use redis::{ErrorKind as Kind, ServerErrorKind as Server};
        use std::io::ErrorKind as Io;
        let io = [
            Io::ConnectionRefused,
            Io::ConnectionReset,
            Io::ConnectionAborted,
            Io::BrokenPipe,
            Io::UnexpectedEof,
            Io::NotConnected,
            Io::TimedOut,
            Io::NotFound,
            Io::Other,
        ];
        let mut errors: Vec<(String, Error)> = io
            .into_iter()
            .map(|kind| {
                let err = redis::RedisError::from(std::io::Error::new(kind, "detail"));
                (format!("io {kind:?}"), Error::from(err))
            })
            .collect();
        let kinds = [
            Kind::Io,
            Kind::ClusterConnectionNotFound,
            Kind::MasterNameNotFoundBySentinel,
            Kind::NoValidReplicasFoundBySentinel,
            Kind::Parse,
            Kind::Server(Server::BusyLoading),
            Kind::Server(Server::TryAgain),
            Kind::Server(Server::ClusterDown),
            Kind::Server(Server::MasterDown),
            Kind::Server(Server::ReadOnly),
            Kind::Server(Server::Moved),
            Kind::Server(Server::Ask),
        ];
        errors.extend(kinds.map(|kind| (format!("{kind:?}"), redis_error(kind))));
        for (name, err) in errors {
            assert!(err.is_unavailable(), "{name}: {err:?}");
            let status = Status::from(err);
            assert_eq!(status.code(), Code::Unavailable, "{name}");
            assert!(!status.message().contains("detail"), "{name}");
        }
    }

    #[test]
    fn replies_redis_rs_has_no_kind_for_are_sorted_by_their_code() {
        for (reply, code) in [
            (
                "NOREPLICAS Not enough good replicas to write.",
                Code::Unavailable,
            ),
            (
                "UNBLOCKED force unblock from blocking operation",
                Code::Unavailable,
            ),
            ("WRONGTYPE Operation against a key", Code::Internal),
            ("CLUSTERDOWN The cluster is down", Code::Unavailable),
            ("MOVED 7214 127.0.0.1:7001", Code::Unavailable),
            ("EXECABORT Transaction discarded", Code::Internal),
        ] {
            let err = redis::parse_redis_value(format!("-{reply}\r\n").as_bytes())
                .expect("an error reply parses")
                .extract_error()
                .expect_err("an error reply");
            assert_eq!(Status::from(Error::from(err)).code(), code, "{reply}");
        }
    }

    #[test]
    fn refusals_by_redis_are_internal() {
        use redis::{ErrorKind as Kind, ServerErrorKind as Server};
        for kind in [
            Kind::Client,
            Kind::UnexpectedReturnType,
            Kind::InvalidClientConfig,
            Kind::Server(Server::ResponseError),
            Kind::Server(Server::NoScript),
            Kind::Server(Server::CrossSlot),
            Kind::Server(Server::NoPerm),
        ] {
            let err = redis_error(kind);
            assert!(!err.is_unavailable(), "{kind:?}");
            assert_eq!(Status::from(err).code(), Code::Internal, "{kind:?}");
        }
    }

    #[test]
    fn redis_rejections_are_internal_without_redis_text() {
        let err = redis::RedisError::from((redis::ErrorKind::Client, "WRONGTYPE detail"));
        let status = Status::from(Error::from(err));
        assert_eq!(status.code(), Code::Internal);
        assert!(!status.message().contains("WRONGTYPE"));
    }
}
