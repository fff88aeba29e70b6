//! gRPC connections are served by worker threads, each running a
//! single-threaded tokio runtime (the model of actix-web): a connection, and
//! every task its calls spawn, stays on the thread it was given.
//!
//! Why not one multi-threaded runtime: on a few cores shared with Redis and
//! with clients, a task woken on another thread costs a futex and a context
//! switch, and tokio's LIFO slot runs the Redis and HTTP/2 writers right
//! after the one call that woke them, so that every call paid socket writes
//! of its own. On one thread the woken writers queue behind the other calls
//! that are ready, and what those calls send is written together. Measured
//! with `redq bench publish-unary` on 2 cores: 1.2 to 1.8 socket writes per
//! call became 0.07 to 0.4, and the server's CPU time per call fell from 30
//! to 14 µs (BENCHMARKS.md).

use crate::error::BoxError;
use crate::tls::{Acceptor, ServerIo};
use futures::{Stream, StreamExt};
use std::future::Future;
use std::io;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;

/// Connections handed to one worker, registered with its runtime as it
/// takes them, and ready (TLS handshake done) to serve.
pub type Incoming = std::pin::Pin<Box<dyn Stream<Item = io::Result<ServerIo>> + Send>>;

/// TLS handshakes one worker runs at once; a connection whose handshake
/// stalls waits out `--tls-handshake-timeout` without delaying the others.
const CONCURRENT_HANDSHAKES: usize = 256;

/// An accepted connection and its place under `--max-connections`.
pub struct Accepted {
    pub stream: std::net::TcpStream,
    pub permit: OwnedSemaphorePermit,
}

pub struct Workers {
    queues: Vec<mpsc::UnboundedSender<Accepted>>,
    next: usize,
    finished: Vec<oneshot::Receiver<Result<(), BoxError>>>,
}

impl Workers {
    /// Starts `count` worker threads; each runs `serve(incoming)` on a
    /// runtime of its own until it returns.
    pub fn start<F, Fut>(count: usize, acceptor: Acceptor, serve: F) -> io::Result<Self>
    where
        F: Fn(Incoming) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>>,
    {
        let serve = Arc::new(serve);
        let mut queues = Vec::with_capacity(count);
        let mut finished = Vec::with_capacity(count);
        for index in 0..count {
            let (queue, connections) = mpsc::unbounded_channel();
            let (done, done_rx) = oneshot::channel();
            let serve = serve.clone();
            let acceptor = acceptor.clone();
            std::thread::Builder::new()
                .name(format!("redq-worker-{index}"))
                .spawn(move || {
                    let result = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(BoxError::from)
                        .and_then(|runtime| {
                            runtime.block_on(serve(incoming(connections, acceptor)))
                        });
                    let _ = done.send(result);
                })?;
            queues.push(queue);
            finished.push(done_rx);
        }
        Ok(Self {
            queues,
            next: 0,
            finished,
        })
    }

    /// Hands an accepted connection to the next worker, round robin.
    pub fn assign(&mut self, connection: Accepted) {
        let queue = &self.queues[self.next];
        self.next = (self.next + 1) % self.queues.len();
        // A worker that has stopped is reported by `finished`.
        let _ = queue.send(connection);
    }

    /// Resolves when every worker has returned, or with the first error.
    pub fn finished(&mut self) -> impl Future<Output = Result<(), BoxError>> + use<> {
        let finished = std::mem::take(&mut self.finished);
        async move {
            futures::future::try_join_all(finished.into_iter().map(|done| async move {
                done.await
                    .unwrap_or_else(|_| Err("a worker thread panicked".into()))
            }))
            .await
            .map(|_| ())
        }
    }
}

fn incoming(connections: mpsc::UnboundedReceiver<Accepted>, acceptor: Acceptor) -> Incoming {
    let ready = UnboundedReceiverStream::new(connections)
        .map(move |accepted| {
            let acceptor = acceptor.clone();
            async move {
                // from_std registers the socket with the runtime that polls this stream.
                let tcp = TcpStream::from_std(accepted.stream)?;
                acceptor.accept(tcp, Some(accepted.permit)).await
            }
        })
        .buffer_unordered(CONCURRENT_HANDSHAKES)
        .filter_map(|connection| async move {
            match connection {
                Ok(connection) => Some(Ok(connection)),
                Err(err) => {
                    tracing::debug!(error = %err, "gRPC connection refused");
                    None
                }
            }
        });
    Box::pin(ready)
}
