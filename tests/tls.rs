//! TLS on the gRPC and HTTP ports: plain TLS, mTLS, ALPN, certificates
//! replaced without a restart, a bad new pair ignored, handshakes that
//! never finish, and plaintext clients on a TLS port.

#![allow(clippy::needless_update)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::security::{Pair, Pki, tls_channel};
use common::*;
use redq::pb;
use redq::pb::queue_service_client::QueueServiceClient;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;

fn args<'a>(pair: &'a Pair, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--tls-cert",
        pair.cert.to_str().unwrap(),
        "--tls-key",
        pair.key.to_str().unwrap(),
    ];
    args.extend(extra);
    args
}

async fn publish_over(channel: tonic::transport::Channel) -> Result<(), tonic::Status> {
    QueueServiceClient::new(channel)
        .publish(pb::PublishRequest {
            topic: "secure".into(),
            messages: vec![message("hi")],
            dedupe_id: String::new(),
        })
        .await
        .map(|_| ())
}

/// A raw TLS connection (rustls), trusting `ca_pem`, offering `alpn`.
async fn raw_tls(
    port: u16,
    ca_pem: &str,
    alpn: &[&[u8]],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    TlsConnector::from(Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
}

use rustls_pki_types::pem::PemObject;

/// The serial number of the certificate a new connection gets.
async fn served_serial(port: u16, ca_pem: &str) -> Vec<u8> {
    let stream = raw_tls(port, ca_pem, &[b"h2"])
        .await
        .expect("TLS handshake");
    let leaf = stream.get_ref().1.peer_certificates().unwrap()[0].clone();
    let (_, cert) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    cert.raw_serial().to_vec()
}

#[tokio::test]
async fn tls_serves_grpc_with_alpn_h2_and_refuses_plaintext_clients() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "main");
    let pair = pki.server("server");
    let server = TestServer::start(&redis.url(), &args(&pair, &[])).await;
    let channel = tls_channel(server.grpc_addr, &pki.ca_pem, None)
        .await
        .expect("TLS channel");
    publish_over(channel).await.expect("publish over TLS");

    let stream = raw_tls(server.grpc_addr.port(), &pki.ca_pem, &[b"h2", b"http/1.1"])
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    // A client that offers only HTTP/1.1 has nothing to talk to here.
    assert!(
        raw_tls(server.grpc_addr.port(), &pki.ca_pem, &[b"http/1.1"])
            .await
            .is_err()
    );

    // A plaintext gRPC client fails; the server goes on serving TLS ones.
    let plain = tonic::transport::Endpoint::from_shared(server.grpc_url())
        .unwrap()
        .connect()
        .await;
    if let Ok(channel) = plain {
        assert!(publish_over(channel).await.is_err());
    }
    let channel = tls_channel(server.grpc_addr, &pki.ca_pem, None)
        .await
        .unwrap();
    publish_over(channel)
        .await
        .expect("still serving TLS clients");
}

#[tokio::test]
async fn mtls_refuses_clients_without_a_trusted_certificate() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "main");
    let other = Pki::new(dir.path(), "other");
    let pair = pki.server("server");
    let ca = pki.ca_path();
    let server = TestServer::start(
        &redis.url(),
        &args(&pair, &["--tls-client-ca", ca.to_str().unwrap()]),
    )
    .await;
    let trusted = pki.client("billing").identity();
    let untrusted = other.client("billing").identity();
    let refused = |result: Result<tonic::transport::Channel, _>| async move {
        match result {
            Err(_) => true,
            Ok(channel) => publish_over(channel).await.is_err(),
        }
    };
    assert!(refused(tls_channel(server.grpc_addr, &pki.ca_pem, None).await).await);
    assert!(refused(tls_channel(server.grpc_addr, &pki.ca_pem, Some(untrusted)).await).await);
    let channel = tls_channel(server.grpc_addr, &pki.ca_pem, Some(trusted))
        .await
        .expect("mTLS channel");
    publish_over(channel)
        .await
        .expect("a trusted client certificate");
}

#[tokio::test]
async fn a_new_certificate_is_served_to_new_connections_and_a_bad_one_is_ignored() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "main");
    let pair = pki.server("server");
    let server =
        TestServer::start(&redis.url(), &args(&pair, &["--reload-interval", "200ms"])).await;
    let port = server.grpc_addr.port();
    let first = served_serial(port, &pki.ca_pem).await;
    let old = tls_channel(server.grpc_addr, &pki.ca_pem, None)
        .await
        .unwrap();
    publish_over(old.clone()).await.unwrap();

    // Replaced by rename, as Kubernetes swaps a Secret volume.
    let next = pki.server("next");
    std::fs::rename(&next.cert, &pair.cert).unwrap();
    std::fs::rename(&next.key, &pair.key).unwrap();
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    let second = loop {
        let serial = served_serial(port, &pki.ca_pem).await;
        if serial != first {
            break serial;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new certificate was not loaded\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    publish_over(old)
        .await
        .expect("a connection made before the reload keeps working");

    // A key that does not match its certificate: the pair in use stays.
    let mismatched = pki.server("mismatched");
    std::fs::copy(&mismatched.key, &pair.key).unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(served_serial(port, &pki.ca_pem).await, second);
    assert!(server.log().contains("does not load"), "{}", server.log());
    let (_, metrics) = http_get_with_body(server.metrics_addr, "/metrics").await;
    assert!(
        metrics.contains("redq_reload_failures_total{file=\"grpc_tls\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("redq_tls_certificate_expiry_seconds{port=\"grpc\"}"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_handshake_that_never_finishes_is_closed() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "main");
    let pair = pki.server("server");
    let server = TestServer::start(
        &redis.url(),
        &args(&pair, &["--tls-handshake-timeout", "1s"]),
    )
    .await;
    let mut silent = TcpStream::connect(server.grpc_addr).await.unwrap();
    let mut buf = [0u8; 16];
    let closed = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "a silent client is closed after the handshake timeout: {closed:?}"
    );
    // Meanwhile, and after, others are served.
    let channel = tls_channel(server.grpc_addr, &pki.ca_pem, None)
        .await
        .unwrap();
    publish_over(channel).await.unwrap();
}

#[tokio::test]
async fn the_http_port_serves_tls_without_client_certificates() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "main");
    let pair = pki.server("http");
    let ca = pki.ca_path();
    let server = TestServer::start(
        &redis.url(),
        &[
            "--http-tls-cert",
            pair.cert.to_str().unwrap(),
            "--http-tls-key",
            pair.key.to_str().unwrap(),
            "--http-tls-client-ca",
            ca.to_str().unwrap(),
        ],
    )
    .await;
    server.wait_serving().await;
    let mut stream = raw_tls(server.metrics_addr.port(), &pki.ca_pem, &[b"http/1.1"])
        .await
        .expect("TLS on the HTTP port, no client certificate");
    stream
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

#[tokio::test]
async fn the_cli_talks_to_a_tls_server() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "main");
    let pair = pki.server("server");
    let ca = pki.ca_path();
    let client = pki.client("cli");
    let server = TestServer::start(
        &redis.url(),
        &args(&pair, &["--tls-client-ca", ca.to_str().unwrap()]),
    )
    .await;
    let url = format!("https://localhost:{}", server.grpc_addr.port());
    let out = std::process::Command::new(redq_bin())
        .args(["publish", "secure", "hello", "--server", &url])
        .args(["--tls-ca", ca.to_str().unwrap()])
        .args(["--tls-cert", client.cert.to_str().unwrap()])
        .args(["--tls-key", client.key.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
