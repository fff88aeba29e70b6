//! Ordered delivery per ordering key (README "Ordering"): a lock per key
//! inside the topic, shared by every stream and replica. Each scenario keeps
//! a history of deliveries and lease ends and checks it, and checks the lock
//! state in Redis afterwards.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::ordering::*;
use common::*;
use redq::pb;
use tonic::Code;

const TOPIC: &str = "orders";
const SUB: &str = "ordered";
const LONG: Duration = Duration::from_secs(60);

/// Opens an ordered Subscribe stream.
async fn subscribe_ordered(
    client: &mut Client,
    sub: &str,
    opts: Sub,
) -> tonic::Streaming<pb::SubscribeResponse> {
    client
        .subscribe(ordered(opts, TOPIC, sub))
        .await
        .unwrap_or_else(|s| panic!("subscribe {sub}: {s:?}"))
        .into_inner()
}

/// The (key, seq) of each delivery.
fn keys_of(ms: &[pb::ReceivedMessage]) -> Vec<(String, usize)> {
    ms.iter().map(key_and_seq).collect()
}

async fn ack_all(client: &mut Client, sub: &str, ms: &[pb::ReceivedMessage]) {
    ack(client, TOPIC, sub, ack_ids_of(ms)).await.expect("ack");
}

async fn stats(admin: &mut Admin, sub: &str) -> pb::SubscriptionStats {
    admin
        .get_subscription(pb::GetSubscriptionRequest {
            topic: TOPIC.into(),
            name: sub.into(),
        })
        .await
        .expect("get subscription")
        .into_inner()
        .stats
        .expect("stats")
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|k| format!("key-{k}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_of_random_consumers_on_three_replicas_keeps_every_key_in_order() {
    let key_count: usize = env_or("ORDERING_SOAK_KEYS", 1000);
    let per_key: usize = env_or("ORDERING_SOAK_MESSAGES", 20);
    let streams: usize = env_or("ORDERING_SOAK_STREAMS", 50);
    let redis = RedisServer::start();
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(TestServer::start(&redis.url(), &[]).await);
    }
    let mut client = replicas[0].client().await;
    // Leases long enough that a loaded machine reads most deliveries in time;
    // those it reads late are refused, and left out of the checks.
    let opts = Sub::deadline(Duration::from_secs(2))
        .retry(Duration::from_millis(50), Duration::from_millis(200))
        .max_attempts(5)
        .max_outstanding(20);
    // Create the subscription before publishing, so that it sees every message.
    drop(subscribe_ordered(&mut client, SUB, opts.clone()).await);
    let published = publish_keyed(&mut client, TOPIC, &keys(key_count), per_key, 500).await;
    let total = key_count * per_key;

    let history = History::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mix = Mix {
        nack: 4,
        nack_delay: 4,
        expire: 1,
        disconnect: 1,
    };
    let mut tasks = Vec::new();
    for i in 0..streams {
        let client = replicas[i % 3].client().await;
        tasks.push(tokio::spawn(random_consumer(
            client,
            ordered(opts.clone(), TOPIC, SUB),
            history.clone(),
            mix,
            0x9e37_79b9_7f4a_7c15 ^ (i as u64 * 7919),
            stop.clone(),
        )));
    }
    let mut admin = replicas[1].admin().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        let dead = stats(&mut admin, SUB).await.dead_letters as usize;
        let acked = history.acked().len();
        if acked + dead >= total {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "soak stuck: {acked} acked + {dead} dead-lettered of {total}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("consumer task");
    }
    let dead_lettered = dead_letter_ids(&mut admin, TOPIC, SUB).await;
    let deliveries = history.check(&published, &dead_lettered);
    let ended = |how: Done| {
        history
            .events()
            .iter()
            .filter(|e| matches!(e, Event::Ended { how: h, .. } if *h == how))
            .count()
    };
    let stale = history
        .events()
        .iter()
        .filter(|e| matches!(e, Event::Delivered { stale: true, .. }))
        .count();
    println!(
        "soak: {total} messages ({key_count} keys x {per_key}), {streams} streams on 3 replicas: \
         {deliveries} deliveries checked ({stale} read after their lease ended), {} acked, {} acks refused, \
         {} nacked, {} abandoned, {} dead-lettered, 0 lost, 0 duplicated",
        history.acked().len(),
        ended(Done::AckRefused),
        ended(Done::Nacked),
        ended(Done::Abandoned),
        dead_lettered.len()
    );
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
    let after = stats(&mut admin, SUB).await;
    assert_eq!((after.active_keys, after.blocked), (0, 0), "{after:?}");
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_message_of_a_key_at_a_time_across_streams_in_publish_order() {
    let (redis, _server, mut client) = redis_server_and_client().await;
    let mut streams = vec![
        subscribe_ordered(&mut client, SUB, Sub::deadline(LONG)).await,
        subscribe_ordered(&mut client, SUB, Sub::deadline(LONG)).await,
    ];
    publish_keyed(&mut client, TOPIC, &keys(2), 3, 10).await;
    // An unkeyed message flows beside them.
    publish(&mut client, TOPIC, ["free"]).await;

    let mut expected_seq = 0;
    loop {
        let want = if expected_seq == 0 { 3 } else { 2 };
        let got: Vec<pb::ReceivedMessage> =
            collect_from_all(&mut streams, want, Duration::from_secs(5))
                .await
                .into_iter()
                .flatten()
                .collect();
        assert_eq!(got.len(), want, "{:?}", ids_of(&got));
        let mut seen: Vec<(String, usize)> = got
            .iter()
            .filter(|m| !m.message.as_ref().unwrap().ordering_key.is_empty())
            .map(key_and_seq)
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            vec![
                ("key-0".into(), expected_seq),
                ("key-1".into(), expected_seq)
            ],
            "only the next message of each key"
        );
        assert_lock_state(&redis.url(), TOPIC, SUB).await;
        for stream in &mut streams {
            assert_no_message_within(stream, Duration::from_millis(200)).await;
        }
        ack_all(&mut client, SUB, &got).await;
        expected_seq += 1;
        if expected_seq == 3 {
            break;
        }
    }
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nacked_message_comes_back_before_the_rest_of_its_key() {
    let (redis, _server, mut client) = redis_server_and_client().await;
    let opts = Sub::deadline(LONG).retry(Duration::from_millis(100), Duration::from_millis(100));
    let mut stream = subscribe_ordered(&mut client, SUB, opts).await;
    publish_keyed(&mut client, TOPIC, &keys(1), 4, 10).await;

    // Nack with a delay, nack with the backoff, ModifyAckDeadline 0: each
    // time the same message comes back, as the next attempt.
    let m = expect_messages(&mut stream, 1).await;
    assert_eq!(keys_of(&m), [("key-0".into(), 0)]);
    client
        .nack(pb::NackRequest {
            topic: TOPIC.into(),
            subscription: SUB.into(),
            ack_ids: ack_ids_of(&m),
            delay: Some(pb_duration(Duration::from_millis(300))),
        })
        .await
        .expect("nack with delay");
    let m = expect_messages(&mut stream, 1).await;
    assert_eq!(keys_of(&m), [("key-0".into(), 0)]);
    assert_eq!(m[0].delivery_attempt, 2);
    nack(&mut client, TOPIC, SUB, ack_ids_of(&m))
        .await
        .expect("nack");
    let m = expect_messages(&mut stream, 1).await;
    assert_eq!((keys_of(&m)[0].1, m[0].delivery_attempt), (0, 3));
    modify_ack_deadline(&mut client, TOPIC, SUB, ack_ids_of(&m), Duration::ZERO)
        .await
        .expect("modify 0");
    let m = expect_messages(&mut stream, 1).await;
    assert_eq!((keys_of(&m)[0].1, m[0].delivery_attempt), (0, 4));
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
    ack_all(&mut client, SUB, &m).await;
    for seq in 1..4 {
        let m = expect_messages(&mut stream, 1).await;
        assert_eq!(keys_of(&m), [("key-0".into(), seq)]);
        assert_eq!(m[0].delivery_attempt, 1);
        ack_all(&mut client, SUB, &m).await;
    }
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_drops_its_stream_mid_key_hands_the_key_to_the_next() {
    let (redis, _server, mut client) = redis_server_and_client().await;
    let opts = Sub::deadline(Duration::from_secs(1));
    let mut first = subscribe_ordered(&mut client, SUB, opts.clone()).await;
    publish_keyed(&mut client, TOPIC, &keys(1), 3, 10).await;
    let m = expect_messages(&mut first, 1).await;
    ack_all(&mut client, SUB, &m).await;
    let held = expect_messages(&mut first, 1).await;
    assert_eq!(keys_of(&held), [("key-0".into(), 1)]);
    // It leaves holding the key's second message: the next consumer gets
    // that one again once its lease ends, before the third.
    drop(first);
    let mut second = subscribe_ordered(&mut client, SUB, opts).await;
    let again = expect_messages(&mut second, 1).await;
    assert_eq!(keys_of(&again), [("key-0".into(), 1)]);
    assert_eq!(again[0].delivery_attempt, 2);
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
    ack_all(&mut client, SUB, &again).await;
    let last = expect_messages(&mut second, 1).await;
    assert_eq!(keys_of(&last), [("key-0".into(), 2)]);
    assert_eq!(last[0].delivery_attempt, 1);
    ack_all(&mut client, SUB, &last).await;
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_ack_is_refused_and_does_not_release_the_key() {
    let (redis, _server, mut client) = redis_server_and_client().await;
    let opts = Sub::deadline(Duration::from_secs(1))
        .retry(Duration::from_millis(50), Duration::from_millis(50));
    let mut stream = subscribe_ordered(&mut client, SUB, opts).await;
    publish_keyed(&mut client, TOPIC, &keys(1), 2, 10).await;

    let first = expect_messages(&mut stream, 1).await;
    // Its lease runs out; the redelivery holds the key now.
    let again = expect_messages(&mut stream, 1).await;
    assert_eq!(keys_of(&again), [("key-0".into(), 0)]);
    assert_eq!(again[0].delivery_attempt, 2);
    let stale = ack(&mut client, TOPIC, SUB, ack_ids_of(&first)).await;
    assert_status(stale, Code::FailedPrecondition, "ack_ids");
    // The key is still held: the next message does not come.
    client
        .modify_ack_deadline(pb::ModifyAckDeadlineRequest {
            topic: TOPIC.into(),
            subscription: SUB.into(),
            ack_ids: ack_ids_of(&again),
            ack_deadline: Some(pb_duration(LONG)),
        })
        .await
        .expect("extend the current delivery");
    assert_no_message_within(&mut stream, Duration::from_millis(700)).await;
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
    // A stale nack and extension are refused too.
    assert_status(
        nack(&mut client, TOPIC, SUB, ack_ids_of(&first)).await,
        Code::FailedPrecondition,
        "ack_ids",
    );
    ack_all(&mut client, SUB, &again).await;
    let next = expect_messages(&mut stream, 1).await;
    assert_eq!(keys_of(&next), [("key-0".into(), 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_lets_the_next_follow_and_a_redriven_one_comes_after_the_rest() {
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    let opts = Sub::deadline(LONG)
        .retry(Duration::from_millis(50), Duration::from_millis(50))
        .max_attempts(2);
    let mut stream = subscribe_ordered(&mut client, SUB, opts).await;
    publish_keyed(&mut client, TOPIC, &keys(1), 3, 10).await;

    for attempt in 1..=2 {
        let m = expect_messages(&mut stream, 1).await;
        assert_eq!(keys_of(&m), [("key-0".into(), 0)]);
        assert_eq!(m[0].delivery_attempt, attempt);
        nack(&mut client, TOPIC, SUB, ack_ids_of(&m))
            .await
            .expect("nack");
    }
    // Dead-lettered after its second attempt: the next one follows.
    let m = expect_messages(&mut stream, 1).await;
    assert_eq!(keys_of(&m), [("key-0".into(), 1)]);
    let dead = dead_letter_ids(&mut admin, TOPIC, SUB).await;
    assert_eq!(dead.len(), 1);
    admin
        .redrive_dead_letters(pb::RedriveDeadLettersRequest {
            topic: TOPIC.into(),
            subscription: SUB.into(),
            ..Default::default()
        })
        .await
        .expect("redrive");
    ack_all(&mut client, SUB, &m).await;
    let m = expect_messages(&mut stream, 1).await;
    assert_eq!(keys_of(&m), [("key-0".into(), 2)], "the rest first");
    ack_all(&mut client, SUB, &m).await;
    let m = expect_messages(&mut stream, 1).await;
    assert_eq!(keys_of(&m), [("key-0".into(), 0)], "then the redriven one");
    ack_all(&mut client, SUB, &m).await;
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
    let after = stats(&mut admin, SUB).await;
    assert_eq!((after.active_keys, after.blocked), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_key_backlog_leaves_the_other_keys_prompt() {
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    let mut stream = subscribe_ordered(&mut client, SUB, Sub::deadline(LONG)).await;
    let backlog = env_or("ORDERING_HOT_BACKLOG", 50_000);
    let hot = vec!["hot".to_string()];
    publish_keyed(&mut client, TOPIC, &hot, backlog, 1000).await;
    let cold = publish_keyed(&mut client, TOPIC, &keys(20), 1, 100).await;

    // The hot key's first message, then every cold key's, while the hot
    // backlog waits blocked (taking none of the stream's room).
    let got = expect_messages(&mut stream, 21).await;
    let mut seen = keys_of(&got);
    seen.sort();
    let mut want: Vec<(String, usize)> = cold.keys().map(|k| (k.clone(), 0)).collect();
    want.push(("hot".into(), 0));
    want.sort();
    assert_eq!(seen, want);
    let s = stats(&mut admin, SUB).await;
    assert_eq!(s.blocked, backlog as u64 - 1, "{s:?}");
    assert_eq!(s.active_keys, 21);
    assert!(s.oldest_blocked_age.is_some());
    let (_, metrics) = http_get_with_body(server.metrics_addr, "/metrics").await;
    let gauge = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .and_then(|l| l.rsplit(' ').next())
            .map(|v| v.parse::<f64>().expect("gauge value"))
    };
    assert_eq!(
        gauge("redq_ordering_blocked_entries"),
        Some(backlog as f64 - 1.0)
    );
    assert_eq!(gauge("redq_ordering_active_keys"), Some(21.0));
    assert_eq!(gauge("redq_ordering_blocked_cap_reached"), Some(0.0));
    assert!(gauge("redq_ordering_oldest_blocked_age_seconds").is_some());
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
    // Acking the hot key's message hands the key on, one at a time.
    let hot_first: Vec<_> = got
        .iter()
        .filter(|m| key_and_seq(m).0 == "hot")
        .cloned()
        .collect();
    ack_all(&mut client, SUB, &hot_first).await;
    for seq in 1..4 {
        let m = expect_messages(&mut stream, 1).await;
        assert_eq!(keys_of(&m), [("hot".into(), seq)]);
        ack_all(&mut client, SUB, &m).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_blocked_cap_the_subscription_reads_no_new_entries() {
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    admin
        .create_subscription(pb::CreateSubscriptionRequest {
            topic: TOPIC.into(),
            name: SUB.into(),
            settings: Some(pb::SubscriptionSettings {
                message_ordering: Some(true),
                max_blocked: Some(5),
                ..Default::default()
            }),
        })
        .await
        .expect("create");
    let mut stream = subscribe_ordered(&mut client, SUB, Sub::deadline(LONG)).await;
    publish_keyed(&mut client, TOPIC, &["hot".to_string()], 20, 100).await;
    publish(&mut client, TOPIC, ["free"]).await;

    let first = expect_messages(&mut stream, 1).await;
    assert_eq!(keys_of(&first), [("hot".into(), 0)]);
    // The unkeyed message waits too: reading stopped at the cap.
    assert_no_message_within(&mut stream, Duration::from_millis(500)).await;
    let s = stats(&mut admin, SUB).await;
    assert!(s.at_blocked_cap, "{s:?}");
    assert!(s.blocked >= 5, "{s:?}");
    let text = redq_stats(&server);
    assert!(text.contains("AT BLOCKED CAP"), "{text}");
    // Releasing the key makes room: everything arrives, the key in order.
    let mut next = first;
    let mut seqs = vec![0];
    let mut free_seen = false;
    while seqs.len() < 20 || !free_seen {
        ack_all(&mut client, SUB, &next).await;
        next = expect_messages(&mut stream, 1).await;
        for m in &next {
            if m.message.as_ref().unwrap().ordering_key.is_empty() {
                free_seen = true;
            } else {
                seqs.push(key_and_seq(m).1);
            }
        }
    }
    ack_all(&mut client, SUB, &next).await;
    assert!(seqs.windows(2).all(|w| w[0] + 1 == w[1]), "{seqs:?}");
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
}

fn redq_stats(server: &TestServer) -> String {
    let out = std::process::Command::new(redq_bin())
        .args(["stats", TOPIC, "--server", &server.grpc_url()])
        .output()
        .expect("redq stats");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_messages_of_a_key_come_in_due_order() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &["--promote-ahead", "0s"]).await;
    let mut client = server.client().await;
    let mut stream = subscribe_ordered(&mut client, SUB, Sub::deadline(LONG)).await;
    // Published in reverse of their due order.
    let mut messages = Vec::new();
    for seq in (0..3).rev() {
        let mut m = keyed("k", seq);
        m.delay = Some(pb_duration(Duration::from_millis(300 + 200 * seq as u64)));
        messages.push(m);
    }
    client
        .publish(pb::PublishRequest {
            topic: TOPIC.into(),
            messages,
            dedupe_id: String::new(),
        })
        .await
        .expect("publish");
    let mut seen = Vec::new();
    for _ in 0..3 {
        let m = expect_messages(&mut stream, 1).await;
        seen.extend(keys_of(&m));
        // Hold the key a while: the next one is due meanwhile and must wait.
        tokio::time::sleep(Duration::from_millis(300)).await;
        ack_all(&mut client, SUB, &m).await;
    }
    assert_eq!(
        seen,
        vec![("k".into(), 0), ("k".into(), 1), ("k".into(), 2)]
    );
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_and_the_hard_cap_leave_no_key_stuck() {
    let redis = RedisServer::start();
    // Trims seldom enough that the first delivery (a few ms after the
    // publish) comes before the first trim, even on a busy machine.
    let server = TestServer::start(&redis.url(), &["--trim-interval", "1s"]).await;
    let mut client = server.client().await;
    let mut admin = server.admin().await;
    admin
        .create_topic(pb::CreateTopicRequest {
            name: TOPIC.into(),
            settings: Some(pb::TopicSettings {
                retention_max_age: Some(pb_duration(Duration::from_secs(3600))),
                hard_max_length: Some(3),
                ..Default::default()
            }),
        })
        .await
        .expect("create topic");
    let mut stream = subscribe_ordered(&mut client, SUB, Sub::deadline(LONG)).await;
    let published = publish_keyed(&mut client, TOPIC, &keys(1), 6, 10).await;
    let first = expect_messages(&mut stream, 1).await;
    assert_eq!(keys_of(&first), [("key-0".into(), 0)]);
    // The hard cap drops the oldest entries, the holder and blocked ones among them.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    ack_all(&mut client, SUB, &first).await;
    let m = expect_messages(&mut stream, 1).await;
    assert_eq!(
        keys_of(&m),
        [("key-0".into(), 3)],
        "the first left in the stream"
    );
    assert_lock_state(&redis.url(), TOPIC, SUB).await;

    // Seek back to it, with the key held: the ordering starts afresh.
    admin
        .seek(pb::SeekRequest {
            topic: TOPIC.into(),
            subscription: SUB.into(),
            message_id: published["key-0"][3].clone(),
            time: None,
        })
        .await
        .expect("seek");
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let m = expect_messages(&mut stream, 1).await;
        seen.extend(keys_of(&m));
        ack_all(&mut client, SUB, &m).await;
    }
    assert_eq!(
        seen,
        vec![
            ("key-0".into(), 3),
            ("key-0".into(), 4),
            ("key-0".into(), 5)
        ]
    );
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
    let s = stats(&mut admin, SUB).await;
    assert_eq!((s.active_keys, s.blocked), (0, 0), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unordered_subscriptions_of_the_same_topic_are_unaffected() {
    let (redis, _server, mut client) = redis_server_and_client().await;
    let mut ordered_stream = subscribe_ordered(&mut client, SUB, Sub::deadline(LONG)).await;
    let mut plain = subscribe(&mut client, TOPIC, "plain", Sub::deadline(LONG)).await;
    publish_keyed(&mut client, TOPIC, &keys(1), 5, 10).await;
    // The unordered subscription gets all five at once, unacked.
    let all = expect_messages(&mut plain, 5).await;
    assert_eq!(all.len(), 5);
    let one = expect_messages(&mut ordered_stream, 1).await;
    assert_no_message_within(&mut ordered_stream, Duration::from_millis(300)).await;
    assert_eq!(keys_of(&one), [("key-0".into(), 0)]);
    // And a stale ack on it is ignored, not refused, as always.
    ack(&mut client, TOPIC, "plain", ack_ids_of(&all))
        .await
        .expect("ack");
    ack(&mut client, TOPIC, "plain", ack_ids_of(&all))
        .await
        .expect("a stale ack on an unordered subscription is ignored");
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_is_fixed_at_creation_and_shown_by_the_admin_api() {
    let (_redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    drop(subscribe(&mut client, TOPIC, "plain", Sub::deadline(LONG)).await);
    let refused = client
        .subscribe(ordered(Sub::deadline(LONG), TOPIC, "plain"))
        .await;
    assert_status(refused, Code::FailedPrecondition, "enable_message_ordering");

    drop(subscribe_ordered(&mut client, SUB, Sub::deadline(LONG)).await);
    let got = admin
        .get_subscription(pb::GetSubscriptionRequest {
            topic: TOPIC.into(),
            name: SUB.into(),
        })
        .await
        .expect("get")
        .into_inner();
    let settings = got.settings.expect("settings");
    assert_eq!(settings.message_ordering, Some(true));
    assert_eq!(settings.max_blocked, Some(100_000));
    assert_eq!(
        settings.max_delivery_attempts,
        Some(10),
        "a finite default: a poison message blocks its key until dead-lettered"
    );
    let update = admin
        .update_subscription(pb::UpdateSubscriptionRequest {
            topic: TOPIC.into(),
            name: SUB.into(),
            settings: Some(pb::SubscriptionSettings {
                message_ordering: Some(false),
                ..Default::default()
            }),
        })
        .await;
    assert_status(update, Code::InvalidArgument, "settings.message_ordering");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_while_holding_keys_loses_no_key() {
    let redis = RedisServer::start();
    let mut doomed = TestServer::start(&redis.url(), &[]).await;
    let survivor = TestServer::start(&redis.url(), &[]).await;
    let mut client = survivor.client().await;
    let opts = Sub::deadline(Duration::from_secs(1));
    let mut doomed_client = doomed.client().await;
    let mut held = subscribe_ordered(&mut doomed_client, SUB, opts.clone()).await;
    publish_keyed(&mut client, TOPIC, &keys(5), 3, 100).await;
    let taken = expect_messages(&mut held, 5).await;
    assert_eq!(taken.len(), 5);
    doomed.kill9();

    // Its leases run out; the survivor gets every key, in order.
    let mut stream = subscribe_ordered(&mut client, SUB, opts).await;
    let mut per_key: HashMap<String, Vec<usize>> = HashMap::new();
    let mut count = 0;
    while count < 15 {
        let m = next_messages(&mut stream, 1, EVENTUALLY).await;
        assert!(!m.is_empty(), "stuck after {count}: {per_key:?}");
        for d in &m {
            let (key, seq) = key_and_seq(d);
            if per_key.get(&key).and_then(|s| s.last()) != Some(&seq) {
                per_key.entry(key).or_default().push(seq);
                count += 1;
            }
        }
        ack_all(&mut client, SUB, &m).await;
    }
    for (key, seqs) in &per_key {
        assert_eq!(seqs, &vec![0, 1, 2], "{key}");
    }
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_from_its_aof_mid_run_keeps_every_key() {
    let mut redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut client = server.client().await;
    let opts = Sub::deadline(Duration::from_secs(2))
        .retry(Duration::from_millis(50), Duration::from_millis(200));
    let mut stream = subscribe_ordered(&mut client, SUB, opts.clone()).await;
    let published = publish_keyed(&mut client, TOPIC, &keys(10), 4, 100).await;
    let first = expect_messages(&mut stream, 10).await;
    ack_all(&mut client, SUB, &first[..5]).await;
    // Let the AOF take the acks, then kill -9 and restart from it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.kill();
    redis.restart();
    server.wait_serving().await;
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
    // A stream that survived the restart but is no longer read would take
    // deliveries until they are dead-lettered: close it.
    drop(stream);

    let mut done: HashSet<String> = ids_of(&first[..5]).into_iter().collect();
    let mut last_seq: HashMap<String, usize> = HashMap::new();
    for m in &first[..5] {
        let (key, seq) = key_and_seq(m);
        last_seq.insert(key, seq);
    }
    let total: usize = published.values().map(Vec::len).sum();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    // One stream, opened again only when it fails (while the server finds
    // Redis again); what the first stream held comes back once its lease ends.
    let mut open: Option<tonic::Streaming<pb::SubscribeResponse>> = None;
    while done.len() < total {
        if tokio::time::Instant::now() > deadline {
            let missing: Vec<&String> = published
                .values()
                .flatten()
                .filter(|id| !done.contains(*id))
                .collect();
            panic!("stuck at {} of {total}: missing {missing:?}", done.len());
        }
        let Some(current) = open.as_mut() else {
            match client.subscribe(ordered(opts.clone(), TOPIC, SUB)).await {
                Ok(response) => open = Some(response.into_inner()),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
            continue;
        };
        let m = match tokio::time::timeout(Duration::from_secs(5), current.message()).await {
            Ok(Ok(Some(response))) => response.messages,
            Ok(_) => {
                open = None;
                continue;
            }
            Err(_) => continue,
        };
        for d in &m {
            let (key, seq) = key_and_seq(d);
            if done.contains(&id_of(d)) {
                continue; // redelivered: its ack did not reach Redis
            }
            if let Some(&last) = last_seq.get(&key) {
                assert!(seq >= last, "{key}/{seq} after {key}/{last}");
            }
            last_seq.insert(key, seq);
        }
        // One by one: an ack of a delivery that is no longer current is
        // refused (and the others of its call applied all the same).
        for d in &m {
            if ack(&mut client, TOPIC, SUB, vec![d.ack_id.clone()])
                .await
                .is_ok()
            {
                done.insert(id_of(d));
            }
        }
    }
    drop(open);
    assert_lock_state(&redis.url(), TOPIC, SUB).await;
}
