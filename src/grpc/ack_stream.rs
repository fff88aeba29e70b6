//! The request side of a stream that carries acks, nacks and deadline
//! changes: redq's `StreamingSubscribe` and Pub/Sub's `StreamingPull`. The
//! ids of the requests that arrive while one batch is being applied are
//! applied together next, one script call per kind
//! ([`crate::broker::AckBatch`]); each API reads its own requests and
//! writes its own confirmations.

use crate::broker::{AckBatch, Broker, FlowControl};
use crate::error::{Error, Result};
use crate::model::AckConfirmation;
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

/// Ack ids waiting to be applied past which the server stops reading the stream.
const MAX_WAITING_IDS: usize = 50_000;

/// What one API's stream requests mean.
pub trait AckRequests: Send + 'static {
    type Request: Send + 'static;
    type Response: Send + 'static;

    /// Adds the request's ids to `batch` and applies what else it asks for
    /// (flow control); may answer it at once (a heartbeat).
    fn take(
        &mut self,
        request: Self::Request,
        batch: &mut AckBatch,
    ) -> Result<Option<Self::Response>>;

    /// The response that carries a batch's confirmation.
    fn confirmed(&mut self, confirmation: AckConfirmation) -> Self::Response;
}

/// Reads one stream's requests and applies their acks, until the client is
/// done or the responses are no longer read.
pub struct AckStream<R: AckRequests> {
    pub broker: Broker,
    /// The stream's topic and subscription (redq names).
    pub names: (String, String),
    pub control: Arc<FlowControl>,
    /// Confirmations, answers and the error that ends the stream.
    pub responses: mpsc::Sender<Result<R::Response, Status>>,
    pub requests: R,
}

/// A batch of acks being applied, with the confirmation to send, if asked for.
type Applying = BoxFuture<'static, Result<Option<AckConfirmation>>>;

/// Lets a batch being applied finish: it may carry another stream's fetch
/// (see `Carry`), whose deliveries would otherwise wait out their lease.
async fn finish(applying: Option<Applying>) {
    if let Some(applying) = applying {
        let _ = applying.await;
    }
}

impl<R: AckRequests> AckStream<R> {
    pub async fn run(mut self, first: R::Request, mut inbound: Streaming<R::Request>) {
        let mut batch = AckBatch::default();
        let mut applying: Option<Applying> = None;
        let mut open = true;
        if let Err(err) = self.take(first, &mut batch).await {
            self.end(err).await;
            return;
        }
        loop {
            if applying.is_none() && !batch.is_empty() {
                let mut next = std::mem::take(&mut batch);
                let batches = self.control.batches();
                batches.resolved(next.leases());
                if !next.acks.is_empty() {
                    next.finished = batches.take_finished(); // else for the next acks
                }
                let broker = self.broker.clone();
                let (topic, subscription) = self.names.clone();
                applying = Some(Box::pin(async move {
                    broker
                        .apply_ack_batch((topic.as_str(), subscription.as_str()), next)
                        .await
                }));
            }
            if !open && applying.is_none() {
                break;
            }
            tokio::select! {
                next = inbound.message(), if open && batch.ids() < MAX_WAITING_IDS => match next {
                    Ok(Some(request)) => {
                        if let Err(err) = self.take(request, &mut batch).await {
                            finish(applying).await;
                            self.end(err).await;
                            return;
                        }
                    }
                    // The client is done: no more deliveries (what was fetched
                    // and not sent is given back), apply what it sent, end.
                    Ok(None) | Err(_) => {
                        open = false;
                        self.control.stop();
                    }
                },
                applied = async { applying.as_mut().expect("guarded").await }, if applying.is_some() => {
                    applying = None;
                    match applied {
                        Ok(None) => {}
                        Ok(Some(confirmation)) => {
                            let response = self.requests.confirmed(confirmation);
                            let _ = self.responses.send(Ok(response)).await;
                        }
                        Err(err) => {
                            self.end(err).await;
                            return;
                        }
                    }
                }
                _ = self.responses.closed() => {
                    finish(applying).await;
                    break;
                }
            }
        }
        self.control.stop();
    }

    async fn take(&mut self, request: R::Request, batch: &mut AckBatch) -> Result<()> {
        if let Some(answer) = self.requests.take(request, batch)? {
            let _ = self.responses.send(Ok(answer)).await;
        }
        Ok(())
    }

    /// Ends the stream with `err`; its unacked messages are redelivered.
    async fn end(&self, err: Error) {
        let _ = self.responses.send(Err(err.into())).await;
        self.control.stop();
    }
}
