//! Tokens and grants: every RPC allowed, denied or unauthenticated by the
//! action it needs; lists filtered; revocation ending streams; health open;
//! reflection behind --auth-reflection; client certificates as identities;
//! the per-token limits; tokens never in logs.

#![allow(clippy::needless_update)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::security::{Pki, tls_channel, with_token, write_tokens};
use common::*;
use redq::pb;
use serde_json::json;
use tonic::Code;

const PUBLISHER: &str = "redq_publisher-secret-0001";
const BILLING: &str = "redq_billing-secret-0002";
const VIEWER: &str = "redq_viewer-secret-0003";
const BROWSER: &str = "redq_browser-secret-0004";
const MANAGER: &str = "redq_manager-secret-0005";
const OPS: &str = "redq_ops-secret-0006";

fn grants(file: &Path) {
    write_tokens(
        file,
        &[
            (
                "orders-writer",
                PUBLISHER,
                json!([{"topics": ["orders", "orders.>"], "actions": ["publish"]}]),
            ),
            (
                "billing",
                BILLING,
                json!([{"topics": ["orders"], "subscriptions": ["billing"], "actions": ["subscribe"]}]),
            ),
            (
                "viewer",
                VIEWER,
                json!([{"topics": ["orders"], "actions": ["view"]}]),
            ),
            (
                "browser",
                BROWSER,
                json!([{"topics": ["orders"], "actions": ["browse"]}]),
            ),
            (
                "manager",
                MANAGER,
                json!([{"topics": ["orders"], "actions": ["manage"]}]),
            ),
            ("ops", OPS, json!([{"topics": [">"], "actions": ["admin"]}])),
        ],
    );
}

struct Secured {
    _redis: RedisServer,
    _dir: tempfile::TempDir,
    tokens: std::path::PathBuf,
    server: TestServer,
}

async fn secured(extra: &[&str]) -> Secured {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    grants(&tokens);
    let mut args = vec!["--auth-tokens-file", tokens.to_str().unwrap()];
    args.extend(extra);
    let server = TestServer::start(&redis.url(), &args).await;
    server.wait_serving().await;
    Secured {
        _redis: redis,
        _dir: dir,
        tokens,
        server,
    }
}

/// Calls `rpc` on topic `orders` (subscription `billing`) with `token`;
/// returns the status code (OK included).
async fn call(server: &TestServer, rpc: &str, token: Option<&str>) -> Code {
    let mut q = server.client().await;
    let mut a = server.admin().await;
    let (topic, sub) = ("orders".to_owned(), "billing".to_owned());
    let ack_ids = vec!["1-0/1/c".to_owned()];
    let result: Result<(), tonic::Status> = match rpc {
        "Publish" => q
            .publish(with_token(
                pb::PublishRequest {
                    topic,
                    messages: vec![message("m")],
                    dedupe_id: String::new(),
                },
                token,
            ))
            .await
            .map(|_| ()),
        "ScheduleDelayed" => q
            .schedule_delayed(with_token(
                pb::ScheduleDelayedRequest {
                    topic,
                    message: Some(message("m")),
                    delay: Some(pb_duration(Duration::from_secs(60))),
                    ..Default::default()
                },
                token,
            ))
            .await
            .map(|_| ()),
        "CancelScheduled" => q
            .cancel_scheduled(with_token(
                pb::CancelScheduledRequest {
                    topic,
                    message_id: "1-0".into(),
                },
                token,
            ))
            .await
            .map(|_| ()),
        "RescheduleDelayed" => q
            .reschedule_delayed(with_token(
                pb::RescheduleDelayedRequest {
                    topic,
                    message_id: "1-0".into(),
                    delay: Some(pb_duration(Duration::from_secs(5))),
                    ..Default::default()
                },
                token,
            ))
            .await
            .map(|_| ()),
        "Subscribe" => q
            .subscribe(with_token(
                Sub::deadline(Duration::from_secs(30)).request(&topic, &sub),
                token,
            ))
            .await
            .map(|_| ()),
        "StreamingSubscribe" => {
            let first = pb::StreamingSubscribeRequest {
                subscribe: Some(Sub::deadline(Duration::from_secs(30)).request(&topic, &sub)),
                ..Default::default()
            };
            match q
                .streaming_subscribe(with_token(
                    futures::stream::iter([first]).chain(futures::stream::pending()),
                    token,
                ))
                .await
            {
                Ok(mut responses) => match tokio::time::timeout(
                    Duration::from_millis(300),
                    responses.get_mut().message(),
                )
                .await
                {
                    Ok(Err(status)) => Err(status),
                    _ => Ok(()),
                },
                Err(status) => Err(status),
            }
        }
        "Ack" => q
            .ack(with_token(
                pb::AckRequest {
                    topic,
                    subscription: sub,
                    ack_ids,
                },
                token,
            ))
            .await
            .map(|_| ()),
        "Nack" => q
            .nack(with_token(
                pb::NackRequest {
                    topic,
                    subscription: sub,
                    ack_ids,
                    ..Default::default()
                },
                token,
            ))
            .await
            .map(|_| ()),
        "ModifyAckDeadline" => q
            .modify_ack_deadline(with_token(
                pb::ModifyAckDeadlineRequest {
                    topic,
                    subscription: sub,
                    ack_ids,
                    ack_deadline: Some(pb_duration(Duration::from_secs(10))),
                },
                token,
            ))
            .await
            .map(|_| ()),
        "PublishStream" => {
            let request = pb::PublishStreamRequest {
                request_id: 1,
                topic,
                messages: vec![message("m")],
                dedupe_id: String::new(),
            };
            match q
                .publish_stream(with_token(futures::stream::iter([request]), token))
                .await
            {
                Ok(responses) => {
                    let mut responses = responses.into_inner();
                    match responses.message().await {
                        Ok(Some(pb::PublishStreamResponse {
                            status: Some(status),
                            ..
                        })) => Err(tonic::Status::new(Code::from(status.code), status.message)),
                        Ok(_) => Ok(()),
                        Err(status) => Err(status),
                    }
                }
                Err(status) => Err(status),
            }
        }
        "GetTopic" => a
            .get_topic(with_token(pb::GetTopicRequest { name: topic }, token))
            .await
            .map(|_| ()),
        "CreateTopic" => a
            .create_topic(with_token(
                pb::CreateTopicRequest {
                    name: topic,
                    settings: None,
                },
                token,
            ))
            .await
            .map(|_| ()),
        "UpdateTopic" => a
            .update_topic(with_token(
                pb::UpdateTopicRequest {
                    name: topic,
                    settings: None,
                },
                token,
            ))
            .await
            .map(|_| ()),
        "GetSubscription" => a
            .get_subscription(with_token(
                pb::GetSubscriptionRequest { topic, name: sub },
                token,
            ))
            .await
            .map(|_| ()),
        "UpdateSubscription" => a
            .update_subscription(with_token(
                pb::UpdateSubscriptionRequest {
                    topic,
                    name: sub,
                    settings: None,
                },
                token,
            ))
            .await
            .map(|_| ()),
        "ListDeadLetters" => a
            .list_dead_letters(with_token(
                pb::ListDeadLettersRequest {
                    topic,
                    subscription: sub,
                    ..Default::default()
                },
                token,
            ))
            .await
            .map(|_| ()),
        "PurgeDeadLetters" => a
            .purge_dead_letters(with_token(
                pb::PurgeDeadLettersRequest {
                    topic,
                    subscription: sub,
                    dead_letter_ids: vec!["1-0".into()],
                },
                token,
            ))
            .await
            .map(|_| ()),
        "RedriveDeadLetters" => a
            .redrive_dead_letters(with_token(
                pb::RedriveDeadLettersRequest {
                    topic,
                    subscription: sub,
                    dead_letter_ids: vec!["1-0".into()],
                    ..Default::default()
                },
                token,
            ))
            .await
            .map(|_| ()),
        "Seek" => a
            .seek(with_token(
                pb::SeekRequest {
                    topic,
                    subscription: sub,
                    message_id: "1-0".into(),
                    ..Default::default()
                },
                token,
            ))
            .await
            .map(|_| ()),
        "PutSchedule" => a
            .put_schedule(with_token(
                pb::PutScheduleRequest {
                    schedule: Some(pb::Schedule {
                        topic,
                        name: "nightly".into(),
                        every: Some(pb_duration(Duration::from_secs(3600))),
                        message: Some(message("m")),
                        ..Default::default()
                    }),
                },
                token,
            ))
            .await
            .map(|_| ()),
        "GetSchedule" => a
            .get_schedule(with_token(
                pb::GetScheduleRequest {
                    topic,
                    name: "nightly".into(),
                },
                token,
            ))
            .await
            .map(|_| ()),
        "ListSchedules" => a
            .list_schedules(with_token(
                pb::ListSchedulesRequest {
                    topic,
                    ..Default::default()
                },
                token,
            ))
            .await
            .map(|_| ()),
        "DeleteSchedule" => a
            .delete_schedule(with_token(
                pb::DeleteScheduleRequest {
                    topic,
                    name: "nightly".into(),
                },
                token,
            ))
            .await
            .map(|_| ()),
        other => panic!("no such rpc {other}"),
    };
    match result {
        Ok(()) => Code::Ok,
        Err(status) => status.code(),
    }
}

use futures::StreamExt;

#[tokio::test]
async fn every_rpc_is_allowed_by_its_action_only() {
    let s = secured(&[]).await;
    // Each RPC and the one token (besides ops, with admin) whose action covers it.
    let matrix: &[(&str, &str)] = &[
        ("Publish", PUBLISHER),
        ("ScheduleDelayed", PUBLISHER),
        ("CancelScheduled", PUBLISHER),
        ("RescheduleDelayed", PUBLISHER),
        ("PublishStream", PUBLISHER),
        ("Subscribe", BILLING),
        ("StreamingSubscribe", BILLING),
        ("Ack", BILLING),
        ("Nack", BILLING),
        ("ModifyAckDeadline", BILLING),
        ("GetTopic", VIEWER),
        ("GetSubscription", VIEWER),
        ("ListDeadLetters", BROWSER),
        ("CreateTopic", MANAGER),
        ("UpdateTopic", MANAGER),
        ("UpdateSubscription", MANAGER),
        ("PurgeDeadLetters", MANAGER),
        ("RedriveDeadLetters", MANAGER),
        ("Seek", MANAGER),
        // A schedule holds the message it publishes: reading one needs manage too.
        ("PutSchedule", MANAGER),
        ("GetSchedule", MANAGER),
        ("ListSchedules", MANAGER),
        ("DeleteSchedule", MANAGER),
    ];
    let tokens = [PUBLISHER, BILLING, VIEWER, BROWSER, MANAGER, OPS];
    let mut wrong = Vec::new();
    for (rpc, allowed) in matrix {
        for token in tokens {
            let code = call(&s.server, rpc, Some(token)).await;
            let permitted = token == *allowed || token == OPS;
            // Allowed: whatever the call itself answers, never an auth code.
            let ok = if permitted {
                !matches!(code, Code::PermissionDenied | Code::Unauthenticated)
            } else {
                code == Code::PermissionDenied
            };
            if !ok {
                wrong.push(format!("{rpc} with {token}: {code:?}"));
            }
        }
        for token in [None, Some("redq_unknown")] {
            let code = call(&s.server, rpc, token).await;
            if code != Code::Unauthenticated {
                wrong.push(format!("{rpc} with {token:?}: {code:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}\n{}", s.server.log());
    // A denial names the action and the resource, and is the same whether
    // the topic exists or not.
    let mut q = s.server.client().await;
    let denied = q
        .publish(with_token(
            pb::PublishRequest {
                topic: "payroll".into(),
                messages: vec![message("m")],
                dedupe_id: String::new(),
            },
            Some(PUBLISHER),
        ))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(
        denied.message().contains("publish") && denied.message().contains("payroll"),
        "{denied:?}"
    );
    // `orders` does not cover `orders2`; `orders.>` covers `orders.eu`.
    for (topic, want) in [("orders2", Code::PermissionDenied), ("orders.eu", Code::Ok)] {
        let got = q
            .publish(with_token(
                pb::PublishRequest {
                    topic: topic.into(),
                    messages: vec![message("m")],
                    dedupe_id: String::new(),
                },
                Some(PUBLISHER),
            ))
            .await
            .map(|_| ())
            .err()
            .map_or(Code::Ok, |s| s.code());
        assert_eq!(got, want, "{topic}");
    }
    // Invalid input from a caller without the grant: denied before validated.
    let bad = q
        .publish(with_token(
            pb::PublishRequest {
                topic: "payroll".into(),
                messages: vec![],
                dedupe_id: String::new(),
            },
            Some(BILLING),
        ))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::PermissionDenied);
    // Health needs no token.
    assert_eq!(
        s.server.health_status("").await.unwrap(),
        tonic_health::pb::health_check_response::ServingStatus::Serving
    );
    // Tokens never reach the logs; names may.
    let log = s.server.log();
    for token in [PUBLISHER, BILLING, VIEWER, BROWSER, MANAGER, OPS] {
        assert!(!log.contains(token), "a token in the log:\n{log}");
    }
}

#[tokio::test]
async fn lists_show_only_what_the_caller_may_view() {
    let s = secured(&[]).await;
    let mut a = s.server.admin().await;
    for name in ["orders", "payroll"] {
        a.create_topic(with_token(
            pb::CreateTopicRequest {
                name: name.into(),
                settings: None,
            },
            Some(OPS),
        ))
        .await
        .unwrap();
    }
    let list = |token| {
        let mut a = a.clone();
        async move {
            a.list_topics(with_token(
                pb::ListTopicsRequest {
                    page_size: 100,
                    page_token: String::new(),
                },
                token,
            ))
            .await
            .map(|r| {
                r.into_inner()
                    .topics
                    .into_iter()
                    .map(|t| t.name)
                    .collect::<Vec<_>>()
            })
        }
    };
    assert_eq!(list(Some(OPS)).await.unwrap(), ["orders", "payroll"]);
    assert_eq!(list(Some(VIEWER)).await.unwrap(), ["orders"]);
    assert!(list(Some(PUBLISHER)).await.unwrap().is_empty());
    assert_eq!(list(None).await.unwrap_err().code(), Code::Unauthenticated);
    // Subscriptions of a topic the caller may not view: none, never NOT_FOUND.
    let subs = a
        .list_subscriptions(with_token(
            pb::ListSubscriptionsRequest {
                topic: "nonexistent".into(),
            },
            Some(VIEWER),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(subs.subscriptions.is_empty());
}

#[tokio::test]
async fn a_revoked_token_ends_its_streams_and_a_bad_file_changes_nothing() {
    let s = secured(&["--reload-interval", "1h"]).await;
    let mut q = s.server.client().await;
    let mut stream = q
        .subscribe(with_token(
            Sub::deadline(Duration::from_secs(30)).request("orders", "billing"),
            Some(BILLING),
        ))
        .await
        .unwrap()
        .into_inner();
    // A file that does not parse: the old table stays, streams go on.
    std::fs::write(&s.tokens, "{ not json").unwrap();
    s.server.signal(libc::SIGHUP);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        s.server.log().contains("does not load"),
        "{}",
        s.server.log()
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), stream.message())
            .await
            .is_err(),
        "the stream goes on"
    );
    assert_ne!(
        call(&s.server, "Ack", Some(BILLING)).await,
        Code::Unauthenticated
    );
    let (_, metrics) = http_get_with_body(s.server.metrics_addr, "/metrics").await;
    assert!(
        metrics.contains("redq_reload_failures_total{file=\"tokens\"} 1"),
        "{metrics}"
    );

    // billing removed: its stream ends within moments of the SIGHUP.
    write_tokens(
        &s.tokens,
        &[("ops", OPS, json!([{"topics": [">"], "actions": ["admin"]}]))],
    );
    s.server.signal(libc::SIGHUP);
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the stream ends");
    assert_eq!(ended.unwrap_err().code(), Code::Unauthenticated);
    assert_eq!(
        call(&s.server, "Ack", Some(BILLING)).await,
        Code::Unauthenticated
    );
    assert!(
        s.server.log().contains("token=billing"),
        "the log names the token: {}",
        s.server.log()
    );
}

#[tokio::test]
async fn the_reload_interval_picks_up_a_changed_file() {
    let s = secured(&["--reload-interval", "200ms"]).await;
    let newcomer = "redq_newcomer-0007";
    assert_eq!(
        call(&s.server, "Publish", Some(newcomer)).await,
        Code::Unauthenticated
    );
    write_tokens(
        &s.tokens,
        &[(
            "newcomer",
            newcomer,
            json!([{"topics": ["orders"], "actions": ["publish"]}]),
        )],
    );
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while call(&s.server, "Publish", Some(newcomer)).await != Code::Ok {
        assert!(tokio::time::Instant::now() < deadline, "{}", s.server.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn reflection_needs_a_token_with_auth_reflection() {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_request::MessageRequest,
    };
    for (extra, without_token) in [(&[][..], true), (&["--auth-reflection"][..], false)] {
        let s = secured(extra).await;
        let mut reflection = ServerReflectionClient::new(s.server.channel().await);
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let answered = reflection
            .server_reflection_info(futures::stream::iter([request.clone()]))
            .await
            .is_ok();
        assert_eq!(answered, without_token, "{extra:?}");
        let with = reflection
            .server_reflection_info(with_token(
                futures::stream::iter([request]),
                Some(PUBLISHER),
            ))
            .await;
        assert!(with.is_ok(), "{extra:?}: any valid token");
    }
}

#[tokio::test]
async fn a_client_certificate_named_in_the_file_is_an_identity() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "main");
    let pair = pki.server("server");
    let ca = pki.ca_path();
    let tokens = dir.path().join("tokens.json");
    let file = json!({"tokens": [
        {"name": "billing-service", "client_cert": "CN=billing", "grants": [{"topics": ["orders"], "actions": ["publish"]}]}
    ]});
    std::fs::write(&tokens, file.to_string()).unwrap();
    let server = TestServer::start(
        &redis.url(),
        &[
            "--tls-cert",
            pair.cert.to_str().unwrap(),
            "--tls-key",
            pair.key.to_str().unwrap(),
            "--tls-client-ca",
            ca.to_str().unwrap(),
            "--auth-tokens-file",
            tokens.to_str().unwrap(),
        ],
    )
    .await;
    let publish = |channel, topic: &'static str| async move {
        redq::pb::queue_service_client::QueueServiceClient::new(channel)
            .publish(pb::PublishRequest {
                topic: topic.into(),
                messages: vec![message("m")],
                dedupe_id: String::new(),
            })
            .await
            .map(|_| ())
            .err()
            .map_or(Code::Ok, |s| s.code())
    };
    let billing = tls_channel(
        server.grpc_addr,
        &pki.ca_pem,
        Some(pki.client("billing").identity()),
    )
    .await
    .unwrap();
    assert_eq!(publish(billing.clone(), "orders").await, Code::Ok);
    assert_eq!(publish(billing, "payroll").await, Code::PermissionDenied);
    let stranger = tls_channel(
        server.grpc_addr,
        &pki.ca_pem,
        Some(pki.client("stranger").identity()),
    )
    .await
    .unwrap();
    assert_eq!(publish(stranger, "orders").await, Code::Unauthenticated);
}

#[tokio::test]
async fn per_token_limits_refuse_with_resource_exhausted() {
    let s = secured(&[
        "--max-streams-per-token",
        "2",
        "--publish-rate-per-token",
        "50",
    ])
    .await;
    let mut q = s.server.client().await;
    let open =
        |q: &mut redq::pb::queue_service_client::QueueServiceClient<tonic::transport::Channel>| {
            let mut q = q.clone();
            async move {
                q.subscribe(with_token(
                    Sub::deadline(Duration::from_secs(30)).request("orders", "billing"),
                    Some(BILLING),
                ))
                .await
            }
        };
    let first = open(&mut q).await.unwrap();
    let _second = open(&mut q).await.unwrap();
    assert_eq!(
        open(&mut q).await.unwrap_err().code(),
        Code::ResourceExhausted
    );
    drop(first);
    // A closed stream gives its place back.
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while open(&mut q).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let batch = |n: usize| pb::PublishRequest {
        topic: "orders".into(),
        messages: (0..n).map(|_| message("m")).collect(),
        dedupe_id: String::new(),
    };
    q.publish(with_token(batch(50), Some(PUBLISHER)))
        .await
        .expect("within the burst");
    let over = q
        .publish(with_token(batch(10), Some(PUBLISHER)))
        .await
        .unwrap_err();
    assert_eq!(over.code(), Code::ResourceExhausted);
    use tonic_types::StatusExt;
    let retry = over.get_details_retry_info().expect("a RetryInfo");
    assert!(
        retry
            .retry_delay
            .is_some_and(|d| d <= Duration::from_secs(1)),
        "{retry:?}"
    );
    // Each token has its own bucket.
    q.publish(with_token(batch(10), Some(OPS)))
        .await
        .expect("another token's rate");
    let (_, metrics) = http_get_with_body(s.server.metrics_addr, "/metrics").await;
    assert!(
        metrics.contains("redq_limited_total{reason=\"publish_rate\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("redq_limited_total{reason=\"streams_per_token\"}"),
        "{metrics}"
    );
}

#[tokio::test]
async fn token_create_prints_a_token_the_server_accepts() {
    let out = std::process::Command::new(redq_bin())
        .args([
            "token",
            "create",
            "--name",
            "cli-made",
            "--grant",
            "publish:orders.>",
            "--grant",
            "subscribe:orders:billing",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let token = text
        .lines()
        .find_map(|l| l.strip_prefix("token: "))
        .expect("a token line")
        .to_owned();
    assert!(token.starts_with("redq_") && token.len() > 40, "{token}");
    let entry: serde_json::Value = serde_json::from_str(
        text.lines()
            .find_map(|l| l.strip_prefix("entry: "))
            .unwrap(),
    )
    .unwrap();
    assert!(
        !entry.to_string().contains(&token),
        "the entry holds the hash only"
    );
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    std::fs::write(&tokens, json!({"tokens": [entry]}).to_string()).unwrap();
    let server = TestServer::start(
        &redis.url(),
        &["--auth-tokens-file", tokens.to_str().unwrap()],
    )
    .await;
    let mut q = server.client().await;
    q.publish(with_token(
        pb::PublishRequest {
            topic: "orders.eu".into(),
            messages: vec![message("m")],
            dedupe_id: String::new(),
        },
        Some(&token),
    ))
    .await
    .expect("the new token publishes");
    let bad = std::process::Command::new(redq_bin())
        .args(["token", "create", "--name", "x", "--grant", "fly:orders"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not an action"));
}
