//! `PublishStream`: publishes the requests of one bidirectional stream, each
//! answered with its own id and result, so that one bad request does not end
//! the stream and a client sends no gRPC call per message. Requests are
//! written through the broker's per-topic batches: those that arrive while a
//! write is in flight (on this stream or others) are written together.

use super::convert;
use super::targets::Target;
use crate::auth::{Action, Authorizer, Caller};
use crate::broker::Broker;
use crate::config::Limits;
use crate::error::Error;
use crate::model::Published;
use crate::pb;
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

/// Unanswered requests a stream may have; past it the server stops reading
/// the stream, and HTTP/2 flow control holds the client back.
pub const MAX_UNANSWERED: usize = 1000;

pub type Responses = ReceiverStream<Result<pb::PublishStreamResponse, Status>>;

/// Serves one stream: reads requests while fewer than [`MAX_UNANSWERED`] wait
/// for their answer, and answers each as soon as it is written.
pub fn serve(
    broker: Broker,
    limits: Limits,
    (authorizer, caller): (Authorizer, Caller),
    mut inbound: Streaming<pb::PublishStreamRequest>,
) -> Responses {
    let (responses, receiver) = mpsc::channel(MAX_UNANSWERED);
    tokio::spawn(async move {
        let unanswered = Arc::new(Semaphore::new(MAX_UNANSWERED));
        loop {
            let permit = tokio::select! {
                permit = unanswered.clone().acquire_owned() => permit.expect("semaphore open"),
                _ = responses.closed() => return,
            };
            let next = tokio::select! {
                next = inbound.message() => next,
                _ = responses.closed() => return,
                _ = broker.shutdown().cancelled() => break,
            };
            let request = match next {
                Ok(Some(request)) => request,
                Ok(None) => return, // the client is done; answers in flight still go out
                Err(status) => {
                    tracing::debug!(?status, "publish stream broken by the client");
                    return;
                }
            };
            // Each request by the grants in force when it arrives.
            let allowed = authorizer.refresh(&caller).and_then(|caller| {
                authorizer.check(&caller, Action::Publish, request.target())?;
                authorizer.take_publish_rate(&caller, request.messages.len())
            });
            if let Err(status) = allowed {
                let _ = responses.send(Ok(failed(request.request_id, status))).await;
                continue;
            }
            let names_checked = request.check_names();
            let pb::PublishStreamRequest {
                request_id,
                topic,
                messages,
                dedupe_id,
            } = request;
            let checked =
                names_checked.and_then(|()| convert::publish_batch(messages, dedupe_id, &limits));
            let batch = match checked {
                Ok(batch) => batch,
                Err(err) => {
                    let _ = responses.send(Ok(failed(request_id, err.into()))).await;
                    continue;
                }
            };
            let reply = broker.publish_batched(&topic, batch);
            let responses = responses.clone();
            tokio::spawn(async move {
                let response = match reply.await {
                    Ok(Ok(published)) => answered(request_id, published),
                    Ok(Err(err)) => failed(request_id, err.into()),
                    Err(_dropped) => failed(request_id, Error::ShuttingDown.into()),
                };
                let _ = responses.send(Ok(response)).await;
                drop(permit);
            });
        }
        // Shutting down: answer what is in flight, then end the stream so
        // that the client reconnects elsewhere.
        let _ = unanswered.acquire_many(MAX_UNANSWERED as u32).await;
        let _ = responses.send(Err(Error::ShuttingDown.into())).await;
    });
    ReceiverStream::new(receiver)
}

fn answered(request_id: u64, published: Vec<Published>) -> pb::PublishStreamResponse {
    let pb::PublishResponse {
        message_ids,
        duplicates,
        deliver_at,
    } = convert::publish_response(published);
    pb::PublishStreamResponse {
        request_id,
        status: None,
        message_ids,
        duplicates,
        deliver_at,
    }
}

fn failed(request_id: u64, status: Status) -> pb::PublishStreamResponse {
    pb::PublishStreamResponse {
        request_id,
        status: Some(pb::rpc::Status {
            code: status.code() as i32,
            message: status.message().to_owned(),
            details: Vec::new(),
        }),
        message_ids: Vec::new(),
        duplicates: Vec::new(),
        deliver_at: Vec::new(),
    }
}
