//! Certificates made for a test (rcgen), tokens files, and clients that
//! speak TLS or carry a token.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// A test CA that signs server and client certificates.
pub struct Pki {
    pub dir: PathBuf,
    name: String,
    params: CertificateParams,
    key: KeyPair,
    pub ca_pem: String,
}

/// A certificate and its key, as PEM files.
#[derive(Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pair {
    pub fn identity(&self) -> Identity {
        Identity::from_pem(
            std::fs::read(&self.cert).unwrap(),
            std::fs::read(&self.key).unwrap(),
        )
    }
}

impl Pki {
    pub fn new(dir: &Path, name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let ca = params.self_signed(&key).unwrap();
        let pki = Self {
            dir: dir.to_owned(),
            name: name.to_owned(),
            params,
            key,
            ca_pem: ca.pem(),
        };
        std::fs::write(pki.ca_path(), &pki.ca_pem).unwrap();
        pki
    }

    pub fn ca_path(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// A server certificate for `localhost` and 127.0.0.1, written as `<file>.pem`/`<file>.key`.
    pub fn server(&self, file: &str) -> Pair {
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        params.distinguished_name.push(DnType::CommonName, file);
        self.sign(params, file)
    }

    /// A client certificate with subject CN=`cn`.
    pub fn client(&self, cn: &str) -> Pair {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        self.sign(params, &format!("client-{cn}"))
    }

    fn sign(&self, params: CertificateParams, file: &str) -> Pair {
        let key = KeyPair::generate().unwrap();
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        let pair = Pair {
            cert: self.dir.join(format!("{file}.pem")),
            key: self.dir.join(format!("{file}.key")),
        };
        std::fs::write(&pair.cert, cert.pem()).unwrap();
        std::fs::write(&pair.key, key.serialize_pem()).unwrap();
        pair
    }
}

/// A TLS channel to `addr` that trusts `ca_pem`, presenting `identity`.
pub async fn tls_channel(
    addr: SocketAddr,
    ca_pem: &str,
    identity: Option<Identity>,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    if let Some(identity) = identity {
        tls = tls.identity(identity);
    }
    Endpoint::from_shared(format!("https://localhost:{}", addr.port()))
        .unwrap()
        .tls_config(tls)?
        .connect_timeout(std::time::Duration::from_secs(5))
        .connect()
        .await
}

/// `message` with `authorization: Bearer <token>`.
pub fn with_token<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

/// Hex SHA-256 of a token, as the tokens file holds it.
pub fn sha256_hex(token: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(token.as_bytes()))
}

/// Writes a tokens file of `(name, token, grants)` entries.
pub fn write_tokens(path: &Path, entries: &[(&str, &str, serde_json::Value)]) {
    let tokens: Vec<serde_json::Value> = entries
        .iter()
        .map(|(name, token, grants)| {
            serde_json::json!({"name": name, "sha256": sha256_hex(token), "grants": grants})
        })
        .collect();
    let json = serde_json::json!({ "tokens": tokens }).to_string();
    // Written aside and renamed, as an operator (or Kubernetes) would.
    let staged = path.with_extension("staged");
    std::fs::write(&staged, json).unwrap();
    std::fs::rename(staged, path).unwrap();
}
