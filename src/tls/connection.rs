//! One accepted connection, plain or TLS, and what handlers may learn of
//! it: the names of the client's certificate.

use super::ReloadingTls;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio_rustls::server::TlsStream;

/// Turns accepted TCP connections into [`ServerIo`]: as they are when the
/// port is plain, after a TLS handshake (within `handshake_timeout`) when
/// not.
#[derive(Clone)]
pub struct Acceptor {
    pub tls: Option<Arc<ReloadingTls>>,
    pub handshake_timeout: Duration,
}

impl Acceptor {
    pub fn plain() -> Self {
        Self {
            tls: None,
            handshake_timeout: Duration::from_secs(10),
        }
    }

    /// The connection, ready for HTTP/2 (or HTTP/1 on the HTTP port). A
    /// plaintext client on a TLS port, an untrusted client certificate or a
    /// handshake that does not finish in time is an error for this
    /// connection only.
    pub async fn accept(
        &self,
        tcp: TcpStream,
        permit: Option<OwnedSemaphorePermit>,
    ) -> io::Result<ServerIo> {
        let remote = tcp.peer_addr().ok();
        let Some(tls) = &self.tls else {
            return Ok(ServerIo {
                stream: Stream::Plain(tcp),
                info: ConnectionInfo {
                    remote,
                    certificate_names: None,
                },
                _permit: permit,
            });
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
        let stream = tokio::time::timeout(self.handshake_timeout, acceptor.accept(tcp))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
        let certificate_names = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| Arc::new(certificate_names(leaf)));
        Ok(ServerIo {
            stream: Stream::Tls(Box::new(stream)),
            info: ConnectionInfo {
                remote,
                certificate_names,
            },
            _permit: permit,
        })
    }
}

/// The names a client certificate answers to in the tokens file: `CN=…` of
/// its subject, and `DNS:…` and `URI:…` of its subject alternative names.
fn certificate_names(der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .map(|cn| format!("CN={cn}"))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::DNSName(dns) => {
                    names.push(format!("DNS:{dns}"))
                }
                x509_parser::extensions::GeneralName::URI(uri) => names.push(format!("URI:{uri}")),
                _ => {}
            }
        }
    }
    names
}

/// What a handler can learn of its call's connection (tonic puts it in the
/// request's extensions).
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    pub remote: Option<SocketAddr>,
    /// The client certificate's names, when it presented one.
    pub certificate_names: Option<Arc<Vec<String>>>,
}

/// An accepted connection; holds its place under `--max-connections` until
/// it closes.
pub struct ServerIo {
    stream: Stream,
    info: ConnectionInfo,
    _permit: Option<OwnedSemaphorePermit>,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl tonic::transport::server::Connected for ServerIo {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        self.info.clone()
    }
}

impl AsyncRead for ServerIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ServerIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
