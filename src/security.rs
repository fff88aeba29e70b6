//! Builds the server's security from its flags: the TLS acceptors of both
//! ports, the authorizer and what the reload loop watches.

use crate::auth::{Authorizer, TokenLimits, TokensFile};
use crate::config::Security;
use crate::metrics::SecurityMetrics;
use crate::reload::Reloadable;
use crate::tls::{Acceptor, ReloadingTls, TlsFiles};
use std::sync::Arc;

pub struct ServerSecurity {
    pub grpc: Acceptor,
    pub http: Acceptor,
    pub authorizer: Authorizer,
    pub reloadable: Reloadable,
}

impl ServerSecurity {
    /// Loads the certificates and the tokens file; an error names the flag
    /// and the file at fault.
    pub fn new(security: &Security, metrics: SecurityMetrics) -> Result<Self, String> {
        let mut reloadable = Reloadable::default();
        let mut acceptor = |cert: &Option<std::path::PathBuf>,
                            key: &Option<std::path::PathBuf>,
                            client_ca: &Option<std::path::PathBuf>,
                            port: &'static str|
         -> Result<Acceptor, String> {
            let tls = match (cert, key) {
                (Some(cert), Some(key)) => {
                    let files = TlsFiles {
                        cert: cert.clone(),
                        key: key.clone(),
                        client_ca: client_ca.clone(),
                        // Client certificates are never required on the HTTP
                        // port: kubelet probes and Prometheus have none.
                        client_auth: if port == "grpc" {
                            security.tls_client_auth
                        } else {
                            crate::config::ClientAuth::Optional
                        },
                        alpn: if port == "grpc" {
                            vec![b"h2".to_vec()]
                        } else {
                            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
                        },
                    };
                    let flag = if port == "grpc" {
                        "--tls-cert"
                    } else {
                        "--http-tls-cert"
                    };
                    let tls = Arc::new(
                        ReloadingTls::new(files, port, metrics.clone())
                            .map_err(|e| format!("{flag}: {e}"))?,
                    );
                    reloadable.tls.push(tls.clone());
                    Some(tls)
                }
                _ => None,
            };
            Ok(Acceptor {
                tls,
                handshake_timeout: security.tls_handshake_timeout,
            })
        };
        let grpc = acceptor(
            &security.tls_cert,
            &security.tls_key,
            &security.tls_client_ca,
            "grpc",
        )?;
        let http = acceptor(
            &security.http_tls_cert,
            &security.http_tls_key,
            &security.http_tls_client_ca,
            "http",
        )?;
        let limits = TokenLimits {
            max_streams: security.max_streams_per_token,
            publish_rate: security.publish_rate_per_token,
        };
        let authorizer = match &security.auth_tokens_file {
            Some(path) => {
                let (file, table) = TokensFile::load(path.clone(), metrics.clone())
                    .map_err(|e| format!("--auth-tokens-file: {e}"))?;
                reloadable.tokens = Some(file);
                Authorizer::new(Some(table), security.auth_reflection, limits, metrics)
            }
            None => {
                tracing::info!(
                    "no --auth-tokens-file: the server is open, every client may do everything"
                );
                Authorizer::open(metrics)
            }
        };
        Ok(Self {
            grpc,
            http,
            authorizer,
            reloadable,
        })
    }
}
