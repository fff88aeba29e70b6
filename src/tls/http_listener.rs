//! The HTTP port's listener for axum: TCP accepted in one task, each TLS
//! handshake in a task of its own, so that a slow client delays nobody.

use super::{Acceptor, ServerIo};
use std::io;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Handshakes that finished and wait for axum to take them.
const READY: usize = 64;

pub struct HttpListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(ServerIo, SocketAddr)>,
}

impl HttpListener {
    /// Starts accepting on `listener` (call it within the runtime).
    pub fn new(listener: TcpListener, acceptor: Acceptor) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (sender, ready) = mpsc::channel(READY);
        tokio::spawn(async move {
            loop {
                let (tcp, remote) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        tracing::debug!(error = %err, "accepting an HTTP connection failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (acceptor, ready) = (acceptor.clone(), sender.clone());
                tokio::spawn(async move {
                    match acceptor.accept(tcp, None).await {
                        Ok(io) => {
                            let _ = ready.send((io, remote)).await;
                        }
                        Err(err) => {
                            tracing::debug!(error = %err, %remote, "HTTP connection refused")
                        }
                    }
                });
                if sender.is_closed() {
                    return;
                }
            }
        });
        Ok(Self { local, ready })
    }
}

impl axum::serve::Listener for HttpListener {
    type Io = ServerIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (ServerIo, SocketAddr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accepting task only ends once the listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}
