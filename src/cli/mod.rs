//! The client subcommands for humans (`publish`, `subscribe`, `schedule`,
//! `schedules`, `cancel`, `topics`, `stats`, `dlq`): each talks gRPC to a running server and
//! prints to stdout. Errors come back as one line: the gRPC status code's name
//! and its message.

mod admin;
mod format;
pub(crate) use format::progress_bar;
mod messages;
mod schedules;
mod token;

pub use token::create_token;

use crate::config::{
    CancelArgs, ClientTls, DlqArgs, DlqCommand, PublishArgs, ScheduleArgs, SchedulesArgs,
    StatsArgs, SubscribeArgs, TopicsArgs,
};
use crate::error::BoxError;
use crate::pb::admin_service_client::AdminServiceClient;
use crate::pb::queue_service_client::QueueServiceClient;
use std::io::Write;
use std::time::Duration;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

/// Largest gRPC message a client sends or accepts (the server's limits apply too).
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// `redq publish`.
pub async fn publish(args: PublishArgs) -> Result<(), BoxError> {
    unless_stdout_closed(messages::publish(args).await)
}

/// `redq subscribe`.
pub async fn subscribe(args: SubscribeArgs) -> Result<(), BoxError> {
    unless_stdout_closed(messages::subscribe(args).await)
}

/// `redq schedule`.
pub async fn schedule(args: ScheduleArgs) -> Result<(), BoxError> {
    unless_stdout_closed(messages::schedule(args).await)
}

/// `redq schedules`.
pub async fn schedules(args: SchedulesArgs) -> Result<(), BoxError> {
    unless_stdout_closed(schedules::list(args).await)
}

/// `redq cancel`.
pub async fn cancel(args: CancelArgs) -> Result<(), BoxError> {
    unless_stdout_closed(messages::cancel(args).await)
}

/// `redq topics`.
pub async fn topics(args: TopicsArgs) -> Result<(), BoxError> {
    unless_stdout_closed(admin::topics(args).await)
}

/// `redq stats`.
pub async fn stats(args: StatsArgs) -> Result<(), BoxError> {
    unless_stdout_closed(admin::stats(args).await)
}

/// `redq dlq list|redrive|purge`.
pub async fn dlq(args: DlqArgs) -> Result<(), BoxError> {
    let result = match args.command {
        DlqCommand::List { target, json } => admin::dlq_list(target, json).await,
        DlqCommand::Redrive {
            target,
            ids,
            max_per_second,
        } => admin::dlq_redrive(target, ids, max_per_second).await,
        DlqCommand::Purge { target, ids, all } => admin::dlq_purge(target, ids, all).await,
    };
    unless_stdout_closed(result)
}

/// `redq subscribe | head` closes stdout early: that ends the command, it is no
/// failure (unacked messages are redelivered after their deadline).
fn unless_stdout_closed(result: Result<(), BoxError>) -> Result<(), BoxError> {
    result.or_else(|err| match err.downcast_ref::<std::io::Error>() {
        Some(io) if io.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        _ => Err(err),
    })
}

/// What every client call goes through: the channel, and the interceptor
/// that adds the token.
pub type ClientChannel = InterceptedService<Channel, Credentials>;

/// Adds `authorization: Bearer <token>` to every call, when there is a token.
#[derive(Clone)]
pub struct Credentials {
    authorization: Option<MetadataValue<Ascii>>,
}

impl Interceptor for Credentials {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(value) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// A channel to `server`, connected (so a wrong address fails here, in one
/// line); TLS for `https://`, with the CA and client certificate of `tls`.
pub async fn connect(server: &str, tls: &ClientTls) -> Result<ClientChannel, BoxError> {
    let mut endpoint = Endpoint::from_shared(server.to_string())
        .map_err(|e| format!("--server {server}: {}", chain(&e)))?
        .connect_timeout(Duration::from_secs(10));
    if server.starts_with("https://") {
        let mut config = ClientTlsConfig::new();
        if let Some(ca) = &tls.tls_ca {
            let pem = std::fs::read(ca).map_err(|e| format!("--tls-ca {}: {e}", ca.display()))?;
            config = config.ca_certificate(Certificate::from_pem(pem));
        } else {
            config = config.with_enabled_roots();
        }
        if let (Some(cert), Some(key)) = (&tls.tls_cert, &tls.tls_key) {
            let read = |path: &std::path::PathBuf, flag: &str| {
                std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
            };
            config = config.identity(Identity::from_pem(
                read(cert, "--tls-cert")?,
                read(key, "--tls-key")?,
            ));
        }
        endpoint = endpoint
            .tls_config(config)
            .map_err(|e| format!("--server {server}: {}", chain(&e)))?;
    }
    let authorization = tls
        .token
        .as_ref()
        .map(|token| {
            format!("Bearer {}", token.expose())
                .parse::<MetadataValue<Ascii>>()
                .map_err(|_| "--token: not a valid header value")
        })
        .transpose()?;
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("cannot reach {server}: {}", chain(&e)))?;
    Ok(InterceptedService::new(
        channel,
        Credentials { authorization },
    ))
}

/// A QueueService client on `channel` that accepts large batches.
pub fn queue_client(channel: ClientChannel) -> QueueServiceClient<ClientChannel> {
    QueueServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// An AdminService client on `channel` that accepts large pages.
pub fn admin_client(channel: ClientChannel) -> AdminServiceClient<ClientChannel> {
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

/// Writes `text` to stdout at once and flushes it (a pipe reader sees each
/// message as it arrives).
fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
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
