//! redq's side of Redis security: `rediss://` with a private CA and a client
//! certificate (Redis mTLS), a least-privilege ACL user whose password comes
//! from a file, and secrets (the password, a token) never printed.

#![allow(clippy::needless_update)]

mod common;

use std::time::Duration;

use common::ports::start_on_free_ports;
use common::security::Pki;
use common::*;
use redq::pb;

/// What the README's ACL allows (docs/redis-acl-rules.txt).
fn acl_rules() -> Vec<String> {
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/redis-acl-rules.txt"
    ))
    .unwrap();
    rules.split_whitespace().map(str::to_owned).collect()
}

/// Publishes, schedules, consumes, acks, nacks and administers a topic: the
/// commands and scripts a replica runs.
async fn smoke(server: &TestServer) {
    server.wait_serving().await;
    let mut client = server.client().await;
    let mut admin = server.admin().await;
    publish(&mut client, "smoke", ["a", "b"]).await;
    let mut deduped = message("d");
    deduped.dedupe_id = "once".into();
    publish_messages(&mut client, "smoke", vec![deduped.clone()]).await;
    publish_messages(&mut client, "smoke", vec![deduped]).await;
    publish_messages(
        &mut client,
        "smoke",
        vec![scheduled_message(
            "later",
            Due::After(Duration::from_millis(300)),
        )],
    )
    .await;
    let mut stream = subscribe(
        &mut client,
        "smoke",
        "s",
        Sub::deadline(Duration::from_secs(30)),
    )
    .await;
    let got = expect_messages(&mut stream, 4).await;
    let (first, rest) = got.split_at(1);
    nack(&mut client, "smoke", "s", ack_ids_of(first))
        .await
        .unwrap();
    ack(&mut client, "smoke", "s", ack_ids_of(rest))
        .await
        .unwrap();
    let again = expect_messages(&mut stream, 1).await;
    ack(&mut client, "smoke", "s", ack_ids_of(&again))
        .await
        .unwrap();
    admin
        .get_subscription(pb::GetSubscriptionRequest {
            topic: "smoke".into(),
            name: "s".into(),
        })
        .await
        .unwrap();
    admin
        .list_topics(pb::ListTopicsRequest {
            page_size: 10,
            page_token: String::new(),
        })
        .await
        .unwrap();
    admin
        .list_dead_letters(pb::ListDeadLettersRequest {
            topic: "smoke".into(),
            subscription: "s".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    // EPHEMERAL: a topic stream and a pattern stream, a message due now and
    // one published when due.
    admin
        .create_topic(pb::CreateTopicRequest {
            name: "smoke.live".into(),
            settings: Some(pb::TopicSettings {
                kind: pb::TopicKind::Ephemeral.into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let mut live = subscribe(&mut client, "smoke.live", "screen", Sub::default()).await;
    let mut by_pattern = client
        .subscribe(pb::SubscribeRequest {
            pattern: "smoke.*".into(),
            ..Sub::default().request("", "screen")
        })
        .await
        .unwrap_or_else(|s| panic!("pattern stream: {s:?}\n{}", server.log()))
        .into_inner();
    publish_messages(
        &mut client,
        "smoke.live",
        vec![
            message("now"),
            scheduled_message("soon", Due::After(Duration::from_millis(200))),
        ],
    )
    .await;
    for stream in [&mut live, &mut by_pattern] {
        assert_eq!(
            payloads_of(&expect_messages(stream, 2).await),
            ["now", "soon"]
        );
    }
    let (_, metrics) = http_get_with_body(server.metrics_addr, "/metrics").await;
    assert!(metrics.contains("redq_messages_acked"), "{metrics}");
    // The dashboard's reads (its sampler's writes run every 10 s meanwhile).
    for path in [
        "/ui/api/overview",
        "/ui/api/topics",
        "/ui/api/topics/smoke",
        "/ui/api/topics/smoke/messages?id=1-0",
        "/ui/api/topics/smoke/messages",
        "/ui/api/topics/smoke/scheduled",
        "/ui/api/topics/smoke/subscriptions/s",
        "/ui/api/topics/smoke/subscriptions/s/dead-letters",
        "/ui/api/topics/smoke/subscriptions/s/history",
    ] {
        let (status, body) = http_get_with_body(server.metrics_addr, path).await;
        assert_eq!(status, 200, "{path}: {body}\n{}", server.log());
    }
    admin
        .delete_topic(pb::DeleteTopicRequest {
            name: "smoke".into(),
        })
        .await
        .unwrap_or_else(|s| panic!("DeleteTopic: {s:?}\n{}", server.log()));
}

/// What a LIST topic adds: its list pushed to and taken from, a blocking
/// move on an idle list, held elements given back when it is deleted.
async fn list_smoke(server: &TestServer, redis: &RedisServer) {
    let mut client = server.client().await;
    let mut admin = server.admin().await;
    admin
        .create_topic(pb::CreateTopicRequest {
            name: "jobs".into(),
            settings: Some(pb::TopicSettings {
                kind: pb::TopicKind::List.into(),
                list_key: "legacy:jobs".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap_or_else(|s| panic!("CreateTopic LIST: {s:?}\n{}", server.log()));
    let mut stream = subscribe(&mut client, "jobs", "s", Sub::default()).await;
    redis.cli(&["LPUSH", "legacy:jobs", "from-legacy"]);
    publish(&mut client, "jobs", ["from-redq"]).await;
    let got = expect_messages(&mut stream, 2).await;
    ack(&mut client, "jobs", "s", ack_ids_of(&got[..1]))
        .await
        .unwrap();
    admin
        .get_subscription(pb::GetSubscriptionRequest {
            topic: "jobs".into(),
            name: "s".into(),
        })
        .await
        .unwrap();
    admin
        .delete_topic(pb::DeleteTopicRequest {
            name: "jobs".into(),
        })
        .await
        .unwrap_or_else(|s| panic!("DeleteTopic LIST: {s:?}\n{}", server.log()));
    // The unacked one is back (the stream, left open, may move it once
    // more before it ends: then its end puts it back).
    let deadline = std::time::Instant::now() + EVENTUALLY;
    while redis.cli(&["LLEN", "legacy:jobs"]).trim() != "1" {
        assert!(
            std::time::Instant::now() < deadline,
            "held element not given back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(stream);
}

#[tokio::test]
async fn rediss_with_a_private_ca_and_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "redis");
    let redis_pair = pki.server("redis");
    let client = pki.client("redq");
    let ca = pki.ca_path();
    let (redis, port) = RedisServer::start_with_port(|port| {
        [
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            redis_pair.cert.to_str().unwrap(),
            "--tls-key-file",
            redis_pair.key.to_str().unwrap(),
            "--tls-ca-cert-file",
            ca.to_str().unwrap(),
            "--tls-auth-clients",
            "yes",
        ]
        .map(str::to_owned)
        .to_vec()
    });
    let url = format!("rediss://localhost:{port}");
    let server = TestServer::start(
        &url,
        &[
            "--redis-ca-file",
            ca.to_str().unwrap(),
            "--redis-client-cert",
            client.cert.to_str().unwrap(),
            "--redis-client-key",
            client.key.to_str().unwrap(),
        ],
    )
    .await;
    smoke(&server).await;
    // Without the client certificate Redis refuses redq: not serving.
    let refused = TestServer::start(&url, &["--redis-ca-file", ca.to_str().unwrap()]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_ne!(
        refused.health_status("").await.unwrap(),
        tonic_health::pb::health_check_response::ServingStatus::Serving
    );
    drop(redis);
}

#[tokio::test]
async fn the_least_privilege_acl_user_runs_everything_and_secrets_stay_secret() {
    const PASSWORD: &str = "s3cret-Redis-pw-4815";
    const TOKEN: &str = "redq_0123456789abcdef-secret-token";
    let dir = tempfile::tempdir().unwrap();
    let mut user = vec![
        "--user".to_owned(),
        "redq".into(),
        "on".into(),
        format!(">{PASSWORD}"),
    ];
    user.extend(acl_rules());
    // A LIST topic's list is a key of the user's, outside `redq:*`.
    user.push("~legacy:*".into());
    let (redis, port) = RedisServer::start_with_port(|port| {
        let mut args = vec!["--port".to_owned(), port.to_string()];
        args.extend(user.iter().cloned());
        args
    });
    let password_file = dir.path().join("redis-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    let server = TestServer::spawn(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--redis-url",
            &format!("redis://redq@127.0.0.1:{port}"),
            "--redis-password-file",
            password_file.to_str().unwrap(),
        ]
        .map(str::to_owned),
        &[("RUST_LOG", "debug")],
    )
    .await;
    smoke(&server).await;
    list_smoke(&server, &redis).await;
    tokio::time::sleep(Duration::from_secs(1)).await; // the background loops too
    let acl_log = std::process::Command::new("redis-cli")
        .arg("-s")
        .arg(redis.socket())
        .args(["ACL", "LOG"])
        .output()
        .unwrap();
    let acl_log = String::from_utf8_lossy(&acl_log.stdout);
    assert!(
        acl_log.trim().is_empty(),
        "commands the ACL refused:\n{acl_log}"
    );
    assert!(
        !server.log().contains(PASSWORD),
        "the password in a debug log"
    );

    // --help prints no secret taken from the environment.
    for (subcommand, var, secret) in [
        (
            "serve",
            "REDQ_REDIS_URL",
            format!("redis://redq:{PASSWORD}@127.0.0.1:1"),
        ),
        ("publish", "REDQ_TOKEN", TOKEN.to_owned()),
        (
            "bench",
            "REDQ_REDIS_URL",
            format!("redis://:{PASSWORD}@127.0.0.1:1"),
        ),
    ] {
        let out = std::process::Command::new(redq_bin())
            .args([subcommand, "--help"])
            .env(var, &secret)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(var), "{subcommand} --help names {var}");
        assert!(
            !text.contains(PASSWORD) && !text.contains(TOKEN),
            "{subcommand} --help shows a secret:\n{text}"
        );
    }
    // A server that cannot reach its Redis says so without the URL's password.
    let unreachable = TestServer::start(&format!("redis://redq:{PASSWORD}@127.0.0.1:1"), &[]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !unreachable.log().contains(PASSWORD),
        "{}",
        unreachable.log()
    );
    // A client with a token logs nothing of it either, even when refused.
    let out = std::process::Command::new(redq_bin())
        .args([
            "publish",
            "t",
            "m",
            "--server",
            &server.grpc_url(),
            "--token",
            TOKEN,
        ])
        .env("RUST_LOG", "debug")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains(TOKEN));
}

/// A Redis Cluster of 3 masters that speaks only TLS (clients, bus and
/// replication), with certificates of `pki`; killed on drop.
struct TlsCluster {
    nodes: Vec<std::process::Child>,
    ports: Vec<u16>,
}

impl TlsCluster {
    fn start(pki: &Pki, dir: &std::path::Path) -> Self {
        let node = pki.server("cluster-node");
        let ca = pki.ca_path();
        let cli = |args: &[&str]| {
            std::process::Command::new("redis-cli")
                .args(["--tls", "--cacert"])
                .arg(&ca)
                .args(args)
                .output()
                .unwrap()
        };
        let mut cluster = Self {
            nodes: Vec::new(),
            ports: Vec::new(),
        };
        for i in 0..3 {
            let node_dir = dir.join(format!("node-{i}"));
            let (ports, child) = start_on_free_ports(2, "a TLS cluster node", |ports| {
                let _ = std::fs::remove_dir_all(&node_dir);
                std::fs::create_dir_all(&node_dir).unwrap();
                let mut child = std::process::Command::new("redis-server")
                    .args(["--port", "0", "--tls-port", &ports[0].to_string()])
                    .args(["--cluster-port", &ports[1].to_string()])
                    .args([
                        "--tls-cluster",
                        "yes",
                        "--tls-replication",
                        "yes",
                        "--tls-auth-clients",
                        "no",
                    ])
                    .arg("--tls-cert-file")
                    .arg(&node.cert)
                    .arg("--tls-key-file")
                    .arg(&node.key)
                    .arg("--tls-ca-cert-file")
                    .arg(&ca)
                    .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
                    .args(["--save", "", "--appendonly", "no"])
                    .arg("--dir")
                    .arg(&node_dir)
                    .arg("--logfile")
                    .arg(node_dir.join("redis.log"))
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .expect("redis-server");
                let deadline = std::time::Instant::now() + Duration::from_secs(20);
                let ping = || cli(&["-p", &ports[0].to_string(), "PING"]).stdout;
                while !String::from_utf8_lossy(&ping()).contains("PONG") {
                    if let Ok(Some(status)) = child.try_wait() {
                        let log = std::fs::read_to_string(node_dir.join("redis.log"));
                        return Err(format!("exited with {status}: {}", log.unwrap_or_default()));
                    }
                    assert!(
                        std::time::Instant::now() < deadline,
                        "a TLS node did not start"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
                Ok(child)
            });
            cluster.nodes.push(child);
            cluster.ports.push(ports[0]);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let addrs: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let mut create = vec!["--cluster", "create"];
        create.extend(addrs.iter().map(String::as_str));
        create.push("--cluster-yes");
        let out = cli(&create);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        for port in &cluster.ports {
            while !String::from_utf8_lossy(
                &cli(&["-p", &port.to_string(), "CLUSTER", "INFO"]).stdout,
            )
            .contains("cluster_state:ok")
            {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the TLS cluster is not ok"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        cluster
    }
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            let _ = node.kill();
            let _ = node.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_cluster_with_a_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "cluster");
    let cluster = TlsCluster::start(&pki, dir.path());
    let ca = pki.ca_path();
    let url = format!("rediss+cluster://localhost:{}", cluster.ports[0]);
    let server = TestServer::start(&url, &["--redis-ca-file", ca.to_str().unwrap()]).await;
    smoke(&server).await;
    // Topics on every master, through the TLS connections to each.
    let mut client = server.client().await;
    for i in 0..12 {
        publish(&mut client, &format!("spread-{i}"), ["m"]).await;
    }
}
