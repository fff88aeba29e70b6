//! The client subcommands for humans: each talks gRPC to a running server.
//! Errors come back as one line: the gRPC status code's name and its message.

use crate::pb::admin_service_client::AdminServiceClient;
use crate::pb::queue_service_client::QueueServiceClient;
use crate::server::BoxError;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

/// Largest gRPC message a client sends or accepts (the server's limits apply too).
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// A channel to `server`, connected (so a wrong address fails here, in one line).
pub async fn connect(server: &str) -> Result<Channel, BoxError> {
    let endpoint = Endpoint::from_shared(server.to_string())
        .map_err(|e| format!("--server {server}: {}", chain(&e)))?
        .connect_timeout(Duration::from_secs(10));
    endpoint
        .connect()
        .await
        .map_err(|e| format!("cannot reach {server}: {}", chain(&e)).into())
}

/// A QueueService client on `channel` that accepts large batches.
pub fn queue_client(channel: Channel) -> QueueServiceClient<Channel> {
    QueueServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// An AdminService client on `channel` that accepts large pages.
pub fn admin_client(channel: Channel) -> AdminServiceClient<Channel> {
    AdminServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// A failed call as one line: `NOT_FOUND: subscription not found`.
pub fn status_error(status: Status) -> BoxError {
    let message = one_line(status.message());
    let code = code_name(status.code());
    if message.is_empty() {
        code.into()
    } else {
        format!("{code}: {message}").into()
    }
}

/// The canonical name of a gRPC status code, as grpcurl and the gRPC docs spell it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// An error and its sources joined by ": " (tonic's transport error alone says
/// only "transport error").
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        // Some errors repeat their source in their own message.
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    one_line(&text)
}

/// Collapses line breaks so every error stays on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_errors_are_one_line_with_the_code_name() {
        let err = status_error(Status::not_found("subscription not found"));
        assert_eq!(err.to_string(), "NOT_FOUND: subscription not found");
        let err = status_error(Status::invalid_argument("topic:\n  must match"));
        assert_eq!(err.to_string(), "INVALID_ARGUMENT: topic: must match");
        assert_eq!(
            status_error(Status::unavailable("")).to_string(),
            "UNAVAILABLE"
        );
    }
}
