//! EPHEMERAL topics through the public API, on real Redis servers: live
//! fan-out to every open stream on every replica, patterns, a slow client
//! losing only its own messages (and told how many), one Redis subscription
//! per channel per replica, streams that outlive a Redis restart, scheduled
//! messages published when due, and per-topic grants on pattern streams.

mod common;

use common::metrics::scrape;
use common::security::{with_token, write_tokens};
use common::*;
use redq::pb;
use serde_json::json;
use std::collections::HashMap;
use std::time::Duration;
use tonic::Code;
use tonic::codec::Streaming;

async fn create_ephemeral(server: &TestServer, name: &str) {
    server
        .admin()
        .await
        .create_topic(pb::CreateTopicRequest {
            name: name.into(),
            settings: Some(pb::TopicSettings {
                kind: pb::TopicKind::Ephemeral.into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap_or_else(|s| panic!("create {name}: {s:?}"));
}

fn pattern_request(pattern: &str, subscription: &str) -> pb::SubscribeRequest {
    pb::SubscribeRequest {
        pattern: pattern.into(),
        ..Sub::default().request("", subscription)
    }
}

/// Reads until `received + dropped` reaches `total` (or the time runs out);
/// returns the messages and the dropped count.
async fn read_all(
    stream: &mut Streaming<pb::SubscribeResponse>,
    total: u64,
) -> (Vec<pb::ReceivedMessage>, u64) {
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    let (mut got, mut dropped) = (Vec::new(), 0);
    while (got.len() as u64) + dropped < total {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Ok(Ok(Some(response))) => {
                dropped += response.dropped;
                got.extend(response.messages);
            }
            Ok(other) => panic!("stream ended: {other:?}"),
            Err(_) => break,
        }
    }
    (got, dropped)
}

#[tokio::test]
async fn every_open_stream_on_every_replica_gets_every_message_once() {
    let replicas = two_replicas().await;
    create_ephemeral(&replicas.a, "presence").await;
    let (mut client_a, mut client_b) = (replicas.client_a.clone(), replicas.client_b.clone());
    // Nothing published before a stream opens reaches it.
    publish(&mut client_a, "presence", payloads("before", 3)).await;
    let mut streams = Vec::new();
    for i in 0..6 {
        let client = if i % 2 == 0 {
            &mut client_a
        } else {
            &mut client_b
        };
        streams.push(subscribe(client, "presence", &format!("screen-{i}"), Sub::default()).await);
    }
    let mut ids = publish(&mut client_b, "presence", payloads("live", 30)).await;
    // PublishStream too: its requests go through the replica's publish writers.
    let requests = (0..2).map(|i| pb::PublishStreamRequest {
        request_id: i,
        topic: "presence".into(),
        messages: payloads(&format!("streamed-{i}"), 5)
            .into_iter()
            .map(message)
            .collect(),
        dedupe_id: String::new(),
    });
    let mut answers = client_a
        .publish_stream(futures::stream::iter(requests.collect::<Vec<_>>()))
        .await
        .expect("PublishStream")
        .into_inner();
    while let Some(answer) = answers.message().await.expect("PublishStream answer") {
        assert!(answer.status.is_none(), "{answer:?}");
        ids.extend(answer.message_ids);
    }
    let mut expected = payloads("live", 30);
    expected.extend(payloads("streamed-0", 5));
    expected.extend(payloads("streamed-1", 5));
    for stream in &mut streams {
        let (got, dropped) = read_all(stream, 40).await;
        assert_eq!(dropped, 0);
        assert_eq!(ids_of(&got), ids, "every message once, in publish order");
        assert_eq!(payloads_of(&got), expected);
        for m in &got {
            assert_eq!(m.ack_id, "", "no ack on an EPHEMERAL topic");
            assert_eq!(m.delivery_attempt, 1);
            let message = m.message.as_ref().unwrap();
            assert_eq!(message.topic, "presence");
            assert!(message.publish_time.is_some());
        }
        assert_no_message_within(stream, Duration::from_millis(200)).await;
    }
    // Nothing was kept: no stream, no subscription.
    assert_eq!(
        replicas
            .redis
            .cli(&["EXISTS", "redq:{presence}:stream"])
            .trim(),
        "0"
    );
    let metrics = scrape(replicas.a.metrics_addr).await;
    let topic = [("topic", "presence")];
    assert_eq!(
        metrics.value("redq_ephemeral_delivered_total", &topic),
        120.0
    );
    // 3 before the streams opened, and the 10 of PublishStream.
    assert_eq!(metrics.value("redq_messages_published_total", &topic), 13.0);
}

#[tokio::test]
async fn a_pattern_stream_gets_the_matching_ephemeral_topics_created_before_or_after_it() {
    let (_redis, server, mut client) = redis_server_and_client().await;
    for topic in ["sensors.kitchen.temp", "sensors.kitchen.humidity"] {
        create_ephemeral(&server, topic).await;
    }
    // A STREAM topic that matches the pattern is never part of it.
    publish(&mut client, "sensors.cellar.temp", ["durable"]).await;
    let mut temp = client
        .subscribe(pattern_request("sensors.*.temp", "temps"))
        .await
        .expect("pattern stream")
        .into_inner();
    let mut all = client
        .subscribe(pattern_request("sensors.>", "all"))
        .await
        .expect("pattern stream")
        .into_inner();
    let mut none = client
        .subscribe(pattern_request("lights.*", "lights"))
        .await
        .expect("pattern stream")
        .into_inner();
    create_ephemeral(&server, "sensors.garage.temp").await;
    publish(&mut client, "sensors.kitchen.temp", ["k-t"]).await;
    publish(&mut client, "sensors.kitchen.humidity", ["k-h"]).await;
    publish(&mut client, "sensors.garage.temp", ["g-t"]).await;
    publish(&mut client, "sensors.cellar.temp", ["durable-2"]).await;

    let topics = |got: &[pb::ReceivedMessage]| -> Vec<(String, String)> {
        got.iter()
            .map(|m| {
                let message = m.message.as_ref().unwrap();
                (
                    message.topic.clone(),
                    String::from_utf8_lossy(&message.payload).into_owned(),
                )
            })
            .collect()
    };
    let (got, _) = read_all(&mut temp, 2).await;
    assert_eq!(
        topics(&got),
        [
            ("sensors.kitchen.temp".into(), "k-t".into()),
            ("sensors.garage.temp".into(), "g-t".into())
        ]
    );
    let (got, _) = read_all(&mut all, 3).await;
    assert_eq!(
        topics(&got),
        [
            ("sensors.kitchen.temp".into(), "k-t".into()),
            ("sensors.kitchen.humidity".into(), "k-h".into()),
            ("sensors.garage.temp".into(), "g-t".into())
        ]
    );
    for stream in [&mut temp, &mut all, &mut none] {
        assert_no_message_within(stream, Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn a_slow_client_loses_only_its_own_messages_and_is_told_how_many() {
    let (redis, server, mut client) = redis_server_and_client().await;
    create_ephemeral(&server, "ticks").await;
    let mut slow = subscribe(
        &mut server.client().await,
        "ticks",
        "slow",
        Sub::default().max_outstanding(10),
    )
    .await;
    // The fast stream reads while the slow one does not; payloads of 1 KiB
    // fill the slow stream's HTTP/2 window soon. The fast one's buffer holds
    // every burst.
    let total = 3000u64;
    let mut fast = subscribe(
        &mut client,
        "ticks",
        "fast",
        Sub::default().max_outstanding(total as u32),
    )
    .await;
    let reader = tokio::spawn(async move { read_all(&mut fast, total).await });
    let payload = vec![b'x'; 1024];
    for _ in 0..(total / 100) {
        publish(&mut client, "ticks", vec![payload.clone(); 100]).await;
    }
    let (fast_got, fast_dropped) = reader.await.unwrap();
    assert_eq!((fast_got.len() as u64, fast_dropped), (total, 0));

    let (slow_got, slow_dropped) = read_all(&mut slow, total).await;
    assert!(slow_dropped > 0, "the slow stream fell behind");
    assert_eq!(
        slow_got.len() as u64 + slow_dropped,
        total,
        "received + dropped = published while open"
    );
    // Redis kept the replica's connection: one subscriber, still there.
    assert_eq!(
        redis
            .cli(&["PUBSUB", "NUMSUB", "redq:ephemeral:ticks"])
            .lines()
            .nth(1),
        Some("1")
    );
    publish(&mut client, "ticks", ["after"]).await;
    let (after, _) = read_all(&mut slow, 1).await;
    assert_eq!(payloads_of(&after), ["after"]);
    let metrics = scrape(server.metrics_addr).await;
    let topic = [("topic", "ticks")];
    assert_eq!(
        metrics.value("redq_ephemeral_dropped_total", &topic),
        slow_dropped as f64
    );
}

#[tokio::test]
async fn a_replica_holds_one_redis_subscription_per_channel_or_pattern() {
    let (redis, server, mut client) = redis_server_and_client().await;
    create_ephemeral(&server, "cache.invalidate").await;
    let mut streams = Vec::new();
    for i in 0..100 {
        streams.push(
            subscribe(
                &mut client,
                "cache.invalidate",
                &format!("s{i}"),
                Sub::default(),
            )
            .await,
        );
    }
    let mut patterns = Vec::new();
    for i in 0..20 {
        patterns.push(
            client
                .subscribe(pattern_request("cache.*", &format!("p{i}")))
                .await
                .expect("pattern stream")
                .into_inner(),
        );
    }
    let numsub = || {
        redis
            .cli(&["PUBSUB", "NUMSUB", "redq:ephemeral:cache.invalidate"])
            .lines()
            .nth(1)
            .map(str::to_owned)
    };
    assert_eq!(numsub().as_deref(), Some("1"));
    // The hints channel has a pattern-free subscription of its own.
    assert_eq!(redis.cli(&["PUBSUB", "NUMPAT"]).trim(), "1");
    let ids = publish(&mut client, "cache.invalidate", ["k1"]).await;
    for stream in streams.iter_mut().chain(patterns.iter_mut()) {
        let (got, _) = read_all(stream, 1).await;
        assert_eq!(ids_of(&got), ids);
    }
    // The last stream of a channel or pattern gone, the replica unsubscribes.
    drop(streams);
    drop(patterns);
    eventually("the replica unsubscribes", || async {
        numsub().as_deref() == Some("0") && redis.cli(&["PUBSUB", "NUMPAT"]).trim() == "0"
    })
    .await;
}

#[tokio::test]
async fn streams_stay_open_across_a_redis_restart_and_get_what_is_published_after() {
    let (mut redis, server, mut client) = redis_server_and_client().await;
    create_ephemeral(&server, "alerts").await;
    let mut stream = subscribe(&mut client, "alerts", "pager", Sub::default()).await;
    publish(&mut client, "alerts", ["first"]).await;
    let (got, _) = read_all(&mut stream, 1).await;
    assert_eq!(payloads_of(&got), ["first"]);

    redis.restart();
    // Publishing works again once the replica is back on Redis (the topic's
    // kind, lost with Redis' data, is stored again by the replica); the
    // stream, still open, gets what is published once it subscribed again.
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no message after the restart within {EVENTUALLY:?}"
        );
        let published = client
            .publish(pb::PublishRequest {
                topic: "alerts".into(),
                messages: vec![message("again")],
                dedupe_id: String::new(),
            })
            .await;
        if published.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let got = next_messages(&mut stream, 1, Duration::from_millis(300)).await;
        if payloads_of(&got).iter().any(|p| p == "again") {
            break;
        }
    }
    assert_eq!(
        redis
            .cli(&["HGET", "redq:{alerts}:settings", "kind"])
            .trim(),
        "ephemeral"
    );
}

#[tokio::test]
async fn scheduled_messages_are_published_when_due() {
    let (redis, server, mut client) = redis_server_and_client().await;
    create_ephemeral(&server, "reminders").await;
    let mut stream = subscribe(&mut client, "reminders", "ui", Sub::default()).await;
    let scheduled = client
        .schedule_delayed(pb::ScheduleDelayedRequest {
            topic: "reminders".into(),
            message: Some(message("later")),
            delay: Some(pb_duration(Duration::from_millis(600))),
            deliver_at: None,
        })
        .await
        .expect("ScheduleDelayed")
        .into_inner();
    // Not promoted ahead of time: an EPHEMERAL topic has no stream to hold it.
    assert_no_message_within(&mut stream, Duration::from_millis(300)).await;
    let (got, _) = read_all(&mut stream, 1).await;
    assert_eq!(ids_of(&got), std::slice::from_ref(&scheduled.message_id));
    assert_eq!(
        redis.cli(&["EXISTS", "redq:{reminders}:stream"]).trim(),
        "0"
    );
    // A cancelled one never comes.
    let cancelled = client
        .schedule_delayed(pb::ScheduleDelayedRequest {
            topic: "reminders".into(),
            message: Some(message("never")),
            delay: Some(pb_duration(Duration::from_millis(300))),
            deliver_at: None,
        })
        .await
        .unwrap()
        .into_inner();
    let done = client
        .cancel_scheduled(pb::CancelScheduledRequest {
            topic: "reminders".into(),
            message_id: cancelled.message_id,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(done.cancelled);
    assert_no_message_within(&mut stream, Duration::from_millis(800)).await;
}

#[tokio::test]
async fn dedupe_ids_publish_once_within_the_window() {
    let (_redis, server, mut client) = redis_server_and_client().await;
    create_ephemeral(&server, "live").await;
    let mut stream = subscribe(&mut client, "live", "ui", Sub::default()).await;
    let request = |dedupe_id: &str, message_dedupe_id: &str| {
        let mut keyed = message("keyed");
        keyed.dedupe_id = message_dedupe_id.into();
        pb::PublishRequest {
            topic: "live".into(),
            messages: vec![message("plain"), keyed],
            dedupe_id: dedupe_id.into(),
        }
    };
    let first = client
        .publish(request("r1", "m1"))
        .await
        .unwrap()
        .into_inner();
    // A retry of the request publishes nothing and answers the same ids.
    let retry = client
        .publish(request("r1", "m1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(retry.message_ids, first.message_ids);
    // A message whose dedupe id was seen is not published again either.
    let again = client
        .publish(request("", "m1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.message_ids[1], first.message_ids[1]);
    let (got, _) = read_all(&mut stream, 3).await;
    assert_eq!(payloads_of(&got), ["plain", "keyed", "plain"]);
    assert_eq!(ids_of(&got)[..2], first.message_ids[..]);
    assert_no_message_within(&mut stream, Duration::from_millis(200)).await;
}

#[tokio::test]
async fn a_pattern_stream_gets_only_the_topics_its_token_may_subscribe_to() {
    const READER: &str = "redq_reader-secret-0001";
    const WRITER: &str = "redq_writer-secret-0002";
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    write_tokens(
        &tokens,
        &[
            (
                "reader",
                READER,
                // `sensors.*` lets the pattern `sensors.>` open (its `*`
                // covers the pattern's last segment), but not every topic
                // the pattern matches.
                json!([{"topics": ["sensors.*"], "subscriptions": ["ui"], "actions": ["subscribe"]}]),
            ),
            (
                "writer",
                WRITER,
                json!([{"topics": [">"], "actions": ["publish", "admin"]}]),
            ),
        ],
    );
    let server = TestServer::start(
        &redis.url(),
        &["--auth-tokens-file", tokens.to_str().unwrap()],
    )
    .await;
    server.wait_serving().await;
    let mut admin = server.admin().await;
    for topic in ["sensors.hall", "sensors.secret.temp", "other.temp"] {
        admin
            .create_topic(with_token(
                pb::CreateTopicRequest {
                    name: topic.into(),
                    settings: Some(pb::TopicSettings {
                        kind: pb::TopicKind::Ephemeral.into(),
                        ..Default::default()
                    }),
                },
                Some(WRITER),
            ))
            .await
            .expect("create");
    }
    let mut client = server.client().await;
    // A pattern outside the token's grants does not open.
    let refused = client
        .subscribe(with_token(pattern_request("*.temp", "ui"), Some(READER)))
        .await;
    assert_eq!(
        refused.map(drop).unwrap_err().code(),
        Code::PermissionDenied
    );
    let mut stream = client
        .subscribe(with_token(pattern_request("sensors.>", "ui"), Some(READER)))
        .await
        .expect("pattern stream within the grants")
        .into_inner();
    let mut per_topic = HashMap::new();
    for topic in ["sensors.secret.temp", "sensors.hall"] {
        let ids = client
            .publish(with_token(
                pb::PublishRequest {
                    topic: topic.into(),
                    messages: vec![message(topic)],
                    dedupe_id: String::new(),
                },
                Some(WRITER),
            ))
            .await
            .expect("publish")
            .into_inner()
            .message_ids;
        per_topic.insert(topic, ids);
    }
    let (got, _) = read_all(&mut stream, 1).await;
    assert_eq!(ids_of(&got), per_topic["sensors.hall"]);
    assert_no_message_within(&mut stream, Duration::from_millis(300)).await;
}
