//! TLS on the gRPC and HTTP ports: certificates read from PEM files and
//! replaced when the files change, optional client certificates (mTLS),
//! and the handshake done beside other connections, within a timeout.

mod certificates;
mod connection;
mod http_listener;

pub use certificates::{ReloadingTls, TlsFiles};
pub use connection::{Acceptor, ConnectionInfo, ServerIo};
pub use http_listener::HttpListener;

/// Installs the one crypto provider (ring) for everything that uses rustls
/// without naming one: two providers compiled in make rustls panic.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
