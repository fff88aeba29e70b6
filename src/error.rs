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

impl Error {
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
        // Connection-level failures are retryable; anything Redis itself
        // rejected is a server fault worth a log line.
        if err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || err.is_unrecoverable_error()
            || matches!(
                err.kind(),
                redis::ErrorKind::Server(
                    redis::ServerErrorKind::BusyLoading
                        | redis::ServerErrorKind::TryAgain
                        | redis::ServerErrorKind::ClusterDown
                        | redis::ServerErrorKind::MasterDown
                )
            )
        {
            Error::Unavailable(err)
        } else {
            Error::Redis(err)
        }
    }
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

    #[test]
    fn redis_rejections_are_internal_without_redis_text() {
        let err = redis::RedisError::from((redis::ErrorKind::Client, "WRONGTYPE detail"));
        let status = Status::from(Error::from(err));
        assert_eq!(status.code(), Code::Internal);
        assert!(!status.message().contains("WRONGTYPE"));
    }
}
