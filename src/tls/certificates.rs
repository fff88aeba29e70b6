//! A server's certificate, key and client CA, loaded from PEM files into a
//! rustls configuration, and loaded again when their contents change.

use crate::config::ClientAuth;
use crate::metrics::SecurityMetrics;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

/// The PEM files of one port.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
    /// ALPN protocols offered, most preferred first.
    pub alpn: Vec<Vec<u8>>,
}

/// What a load produced: the configuration, when its certificate expires
/// (Unix seconds), and a hash of the files' contents.
struct Loaded {
    config: Arc<ServerConfig>,
    expires: i64,
    contents: [u8; 32],
}

/// The contents of the certificate, key and client CA files.
type Contents = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

impl TlsFiles {
    fn read(&self) -> Result<Contents, String> {
        let read =
            |path: &PathBuf| std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()));
        Ok((
            read(&self.cert)?,
            read(&self.key)?,
            self.client_ca.as_ref().map(read).transpose()?,
        ))
    }

    fn load(&self) -> Result<Loaded, String> {
        let (cert_pem, key_pem, ca_pem) = self.read()?;
        let contents = hash(&[&cert_pem, &key_pem, ca_pem.as_deref().unwrap_or_default()]);
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{}: {e}", self.cert.display()))?;
        let leaf = certs
            .first()
            .ok_or_else(|| format!("{}: no certificate", self.cert.display()))?;
        let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|e| format!("{}: {e}", self.cert.display()))?;
        let expires = parsed.validity().not_after.timestamp();
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| format!("{}: {e}", self.key.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = match (&ca_pem, &self.client_ca) {
            (Some(ca_pem), Some(ca_path)) => {
                let mut roots = rustls::RootCertStore::empty();
                for ca in CertificateDer::pem_slice_iter(ca_pem) {
                    let ca = ca.map_err(|e| format!("{}: {e}", ca_path.display()))?;
                    roots
                        .add(ca)
                        .map_err(|e| format!("{}: {e}", ca_path.display()))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = match self.client_auth {
                    ClientAuth::Required => verifier,
                    ClientAuth::Optional => verifier.allow_unauthenticated(),
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| format!("{}: {e}", ca_path.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| format!("{} and {}: {e}", self.cert.display(), self.key.display()))?;
        config.alpn_protocols = self.alpn.clone();
        Ok(Loaded {
            config: Arc::new(config),
            expires,
            contents,
        })
    }
}

fn hash(parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// The configuration new connections of a port get, replaced by
/// [`ReloadingTls::reload`] when the files changed and load; connections
/// already open keep theirs.
pub struct ReloadingTls {
    files: TlsFiles,
    /// `grpc` or `http`, for logs and metrics.
    port: &'static str,
    current: RwLock<Arc<ServerConfig>>,
    contents: Mutex<[u8; 32]>,
    metrics: SecurityMetrics,
}

impl ReloadingTls {
    /// Loads the files; an error names the file at fault.
    pub fn new(
        files: TlsFiles,
        port: &'static str,
        metrics: SecurityMetrics,
    ) -> Result<Self, String> {
        let loaded = files.load()?;
        metrics.certificate_expires(port, loaded.expires as f64);
        Ok(Self {
            files,
            port,
            current: RwLock::new(loaded.config),
            contents: Mutex::new(loaded.contents),
            metrics,
        })
    }

    pub fn config(&self) -> Arc<ServerConfig> {
        self.current.read().expect("tls lock").clone()
    }

    /// Loads the files again if their contents changed. A change that does
    /// not load (a key that does not match, a half-written file) keeps the
    /// configuration in use, and is logged and counted.
    pub fn reload(&self) {
        let unchanged = match self.files.read() {
            Ok((cert, key, ca)) => {
                hash(&[&cert, &key, ca.as_deref().unwrap_or_default()])
                    == *self.contents.lock().expect("tls lock")
            }
            Err(_) => false,
        };
        if unchanged {
            return;
        }
        match self.files.load() {
            Ok(loaded) => {
                *self.current.write().expect("tls lock") = loaded.config;
                *self.contents.lock().expect("tls lock") = loaded.contents;
                self.metrics
                    .certificate_expires(self.port, loaded.expires as f64);
                tracing::info!(port = self.port, "loaded a new TLS certificate");
            }
            Err(err) => {
                self.metrics.reload_failed(if self.port == "grpc" {
                    "grpc_tls"
                } else {
                    "http_tls"
                });
                tracing::warn!(port = self.port, error = %err, "a changed TLS certificate does not load; keeping the one in use");
            }
        }
    }
}
