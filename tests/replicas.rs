//! Replicas: several `redq serve` processes on one Redis share subscriptions —
//! flow control holds whichever replica receives the acks, and a replica killed
//! with SIGKILL loses nothing (its unacked messages go to another replica, and
//! every publish that returned OK is delivered).

#![allow(clippy::needless_update)]

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::*;
use redq::pb;

const TOPIC: &str = "events";
const SUB: &str = "indexer";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_outstanding_holds_when_acks_go_to_another_replica() {
    let TwoReplicas {
        redis: _redis,
        a: _a,
        b: _b,
        mut client_a,
        mut client_b,
    } = two_replicas().await;

    let opts = Sub::deadline(Duration::from_secs(300)).max_outstanding(5);
    let mut stream = subscribe(&mut client_a, TOPIC, SUB, opts).await;
    let ids = publish(&mut client_a, TOPIC, payloads("e", 20)).await;

    let first = expect_messages(&mut stream, 5).await;
    assert_eq!(
        first.len(),
        5,
        "at most max_outstanding at once: {:?}",
        ids_of(&first)
    );
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;

    // Acks through the other replica free room on this stream.
    ack(&mut client_b, TOPIC, SUB, ack_ids_of(&first))
        .await
        .expect("ack via B");
    let second = expect_messages(&mut stream, 5).await;
    assert_eq!(
        second.len(),
        5,
        "room for exactly 5 more: {:?}",
        ids_of(&second)
    );
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;

    let seen: HashSet<String> = ids_of(&first).into_iter().chain(ids_of(&second)).collect();
    assert_eq!(seen.len(), 10, "no message delivered twice");
    assert!(seen.iter().all(|id| ids.contains(id)));

    // Acking part of the window frees exactly that much.
    ack(&mut client_b, TOPIC, SUB, ack_ids_of(&second[..2]))
        .await
        .expect("ack 2 via B");
    let third = expect_messages(&mut stream, 2).await;
    assert_eq!(
        third.len(),
        2,
        "room for exactly 2 more: {:?}",
        ids_of(&third)
    );
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_messages_of_a_killed_replica_go_to_another() {
    let redis = RedisServer::start();
    let mut a = TestServer::start(&redis.url(), &[]).await;
    let b = TestServer::start(&redis.url(), &[]).await;
    let mut client_a = a.client().await;
    let mut client_b = b.client().await;

    let deadline = Duration::from_secs(1);
    let ids = publish(&mut client_a, TOPIC, payloads("e", 10)).await;
    let before_lease = Instant::now();
    let mut on_a = subscribe(&mut client_a, TOPIC, SUB, Sub::deadline(deadline)).await;
    let held = expect_messages(&mut on_a, 10).await;
    assert_eq!(
        ids_of(&held).into_iter().collect::<HashSet<_>>(),
        ids.iter().cloned().collect()
    );

    a.kill9();

    let mut on_b = subscribe(
        &mut client_b,
        TOPIC,
        SUB,
        Sub::deadline(Duration::from_secs(300)),
    )
    .await;
    let got = expect_messages(&mut on_b, 10).await;
    let elapsed = before_lease.elapsed();
    assert_eq!(
        ids_of(&got).into_iter().collect::<HashSet<_>>(),
        ids.iter().cloned().collect::<HashSet<_>>(),
        "every message held by the killed replica is redelivered"
    );
    assert_eq!(got.len(), 10, "each exactly once: {:?}", ids_of(&got));
    assert!(
        got.iter().all(|m| m.delivery_attempt >= 2),
        "attempts: {got:?}"
    );
    assert!(
        elapsed >= deadline,
        "redelivered after {elapsed:?}, before the {deadline:?} deadline"
    );

    ack(&mut client_b, TOPIC, SUB, ack_ids_of(&got))
        .await
        .expect("ack via B");
    assert_no_message_within(&mut on_b, deadline * 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_that_returned_ok_survive_kill9_of_the_replica() {
    let redis = RedisServer::start();
    let mut a = TestServer::start(&redis.url(), &[]).await;
    let b = TestServer::start(&redis.url(), &[]).await;
    let mut client_b = b.client().await;

    // The subscription exists before publishing starts, so it must see everything.
    let mut stream = subscribe(
        &mut client_b,
        TOPIC,
        SUB,
        Sub::deadline(Duration::from_secs(300)).max_outstanding(10_000),
    )
    .await;

    // Publish from several concurrent clients to A until A is killed mid-flight.
    let mut publishers = Vec::new();
    for p in 0..4 {
        let mut client = a.client().await;
        publishers.push(tokio::spawn(async move {
            let mut confirmed = Vec::new();
            for i in 0.. {
                let request = pb::PublishRequest {
                    topic: TOPIC.to_string(),
                    messages: vec![
                        message(format!("p{p}-{i}-a")),
                        message(format!("p{p}-{i}-b")),
                    ],
                    ..Default::default()
                };
                match tokio::time::timeout(EVENTUALLY, client.publish(request)).await {
                    Ok(Ok(resp)) => confirmed.extend(resp.into_inner().message_ids),
                    _ => break,
                }
            }
            confirmed
        }));
    }
    // Let some publishes through (bounded), then kill A while the others are in flight.
    let mut seen_first = Vec::new();
    let warmup = next_messages(&mut stream, 200, EVENTUALLY).await;
    seen_first.extend(warmup);
    assert!(
        !seen_first.is_empty(),
        "no publish went through A before the kill"
    );
    a.kill9();

    let mut confirmed = Vec::new();
    for p in publishers {
        confirmed.extend(p.await.expect("publisher task"));
    }
    let confirmed: HashSet<String> = confirmed.into_iter().collect();

    let mut delivered: HashSet<String> = ids_of(&seen_first).into_iter().collect();
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while !confirmed.is_subset(&delivered) && tokio::time::Instant::now() < deadline {
        let more = next_messages(&mut stream, confirmed.len(), Duration::from_millis(500)).await;
        delivered.extend(ids_of(&more));
    }
    eprintln!(
        "{} publishes confirmed by the killed replica, {} delivered",
        confirmed.len(),
        delivered.len()
    );
    let missing: Vec<_> = confirmed.difference(&delivered).collect();
    assert!(
        missing.is_empty(),
        "{} of {} confirmed publishes never delivered: {:?}",
        missing.len(),
        confirmed.len(),
        missing.iter().take(10).collect::<Vec<_>>()
    );
}

/// Each replica with streams of a topic keeps its place among the topic's
/// watchers, and the script that appends hints the others: a stream on one
/// replica gets what another publishes at once, not at the 5 s safety net.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_on_one_replica_wakes_the_streams_of_another_at_once() {
    const ROUNDS: usize = 10;
    let (replicas, mut stream, _) = stream_on_b_among_the_watchers().await;
    let TwoReplicas {
        redis,
        client_a: mut publisher,
        mut client_b,
        ..
    } = replicas;
    let hints_before = redis.calls_of("publish");
    let mut slowest = Duration::ZERO;
    for round in 0..ROUNDS {
        // Idle streams: the safety net is 5 s away.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let sent = Instant::now();
        publish(&mut publisher, TOPIC, [format!("m{round}")]).await;
        let got = next_messages(&mut stream, 1, Duration::from_secs(3)).await;
        assert_eq!(payloads_of(&got), [format!("m{round}")], "round {round}");
        slowest = slowest.max(sent.elapsed());
        ack(&mut client_b, TOPIC, SUB, ack_ids_of(&got))
            .await
            .expect("ack");
    }
    let hints = redis.calls_of("publish") - hints_before;
    println!("{ROUNDS} messages across replicas: slowest {slowest:?}, {hints} hints");
    assert!(
        slowest < Duration::from_secs(2),
        "slowest delivery {slowest:?}"
    );
    assert!(
        hints >= ROUNDS as u64,
        "{hints} hints for {ROUNDS} publishes"
    );
}

/// A replica that stopped renewing its place among a topic's watchers (it
/// died) is forgotten by the next script that appends, and hinted no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_whose_place_ran_out_is_forgotten_and_not_hinted() {
    let (redis, _server, mut client) = redis_server_and_client().await;
    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::default()).await;
    let watchers = watchers_once(&redis, 1).await;
    redis.cli(&["HSET", &watchers, "a-replica-that-died", "1"]);
    let hints_before = redis.calls_of("publish");
    publish(&mut client, TOPIC, ["m0"]).await;
    expect_messages(&mut stream, 1).await;
    assert_eq!(
        redis
            .cli(&["HEXISTS", &watchers, "a-replica-that-died"])
            .trim(),
        "0",
        "the dead replica's place"
    );
    publish(&mut client, TOPIC, ["m1"]).await;
    expect_messages(&mut stream, 1).await;
    assert_eq!(redis.calls_of("publish") - hints_before, 0, "hints sent");
    assert_eq!(redis.cli(&["HLEN", &watchers]).trim(), "1", "live watchers");
}

/// A replica whose place among a topic's watchers was lost (Redis lost its
/// data, or another replica forgot it after a long pause) takes it back at
/// its next renewal, and is hinted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_watch_was_lost_takes_it_back_and_is_hinted_again() {
    let (replicas, mut stream, watchers) = stream_on_b_among_the_watchers().await;
    let TwoReplicas {
        redis,
        client_a: mut publisher,
        ..
    } = replicas;
    redis.cli(&["DEL", &watchers]);
    let lost = Instant::now();
    watchers_once(&redis, 1).await;
    println!("place taken back after {:?}", lost.elapsed());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let hints_before = redis.calls_of("publish");
    let sent = Instant::now();
    publish(&mut publisher, TOPIC, ["after"]).await;
    let got = next_messages(&mut stream, 1, Duration::from_secs(3)).await;
    assert_eq!(payloads_of(&got), ["after"]);
    assert_eq!(redis.calls_of("publish") - hints_before, 1, "hints sent");
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "delivered after {:?}",
        sent.elapsed()
    );
}

/// A replica whose last stream of a topic ended leaves the topic's watchers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_leaves_the_watchers_of_a_topic_when_its_last_stream_ends() {
    let (redis, _server, mut client) = redis_server_and_client().await;
    let stream = subscribe(&mut client, TOPIC, SUB, Sub::default()).await;
    watchers_once(&redis, 1).await;
    drop(stream);
    watchers_once(&redis, 0).await;
}

/// Two replicas, a stream of `TOPIC` on b, and the key of the topic's
/// watchers once b is among them.
async fn stream_on_b_among_the_watchers()
-> (TwoReplicas, tonic::Streaming<pb::SubscribeResponse>, String) {
    let mut replicas = two_replicas().await;
    let stream = subscribe(&mut replicas.client_b, TOPIC, SUB, Sub::default()).await;
    let watchers = watchers_once(&replicas.redis, 1).await;
    (replicas, stream, watchers)
}

/// The key of `TOPIC`'s watchers, once `n` replicas are among them.
async fn watchers_once(redis: &RedisServer, n: usize) -> String {
    let watchers = format!("redq:{{{TOPIC}}}:watchers");
    let count = || redis.cli(&["HLEN", &watchers]).trim().parse::<usize>().ok();
    let deadline = Instant::now() + EVENTUALLY;
    while count() != Some(n) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(count(), Some(n), "replicas among the watchers");
    watchers
}
