//! Idempotent publish: a `dedupe_id` seen on the topic within the dedupe window
//! returns the original message id with `duplicate` set and is not delivered again
//! (across calls, within one batch, and through ScheduleDelayed); after the window
//! the same dedupe_id publishes a new message.

#![allow(clippy::needless_update)]

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use redq::pb;

const TOPIC: &str = "orders";
const SUB: &str = "billing";

const NO_REDELIVERY: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn republish_within_window_returns_the_original_id_and_is_delivered_once() {
    let TwoReplicas {
        redis: _redis,
        a: _server,
        b: _other,
        client_a: mut client,
        client_b: mut other_client,
    } = two_replicas().await;

    let first = publish_messages(
        &mut client,
        TOPIC,
        vec![deduped_message("order 17", "order-17")],
    )
    .await;
    assert_eq!(first.duplicates, vec![false]);
    let id = first.message_ids[0].clone();

    // A retry with the same dedupe_id (even a different payload, through another
    // replica) is the same message.
    let again = publish_messages(
        &mut other_client,
        TOPIC,
        vec![deduped_message("order 17, retried", "order-17")],
    )
    .await;
    assert_eq!(again.message_ids, vec![id.clone()]);
    assert_eq!(again.duplicates, vec![true]);

    // The same dedupe_id on another topic is another message.
    let elsewhere = publish_messages(
        &mut client,
        "other-orders",
        vec![deduped_message("order 17", "order-17")],
    )
    .await;
    assert_eq!(elsewhere.duplicates, vec![false]);

    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::deadline(NO_REDELIVERY)).await;
    let got = expect_messages(&mut stream, 1).await;
    assert_eq!(ids_of(&got), vec![id]);
    assert_eq!(
        got[0].message.as_ref().map(|m| m.payload.clone()),
        Some("order 17".into()),
        "the first publish is the one delivered"
    );
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_within_one_batch_are_published_once() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let resp = publish_messages(
        &mut client,
        TOPIC,
        vec![
            deduped_message("a", "d1"),
            deduped_message("b", "d2"),
            deduped_message("a again", "d1"),
            message("no dedupe id"),
            deduped_message("b again", "d2"),
            message("no dedupe id"),
        ],
    )
    .await;
    let ids = &resp.message_ids;
    assert_eq!(
        resp.duplicates,
        vec![false, false, true, false, true, false],
        "{resp:?}"
    );
    assert_eq!(ids[2], ids[0], "{resp:?}");
    assert_eq!(ids[4], ids[1], "{resp:?}");
    let distinct: HashSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), 4, "{resp:?}");

    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::deadline(NO_REDELIVERY)).await;
    let got = collect_timed(std::slice::from_mut(&mut stream), 4, EVENTUALLY, None).await;
    assert_exactly_once("batch with duplicates", &got, distinct);
    let payloads: HashSet<_> = got.iter().map(|a| a.message().payload.clone()).collect();
    assert!(
        payloads.contains(&b"a"[..]) && payloads.contains(&b"b"[..]),
        "the first of each dedupe_id is delivered: {payloads:?}"
    );
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_delayed_twice_is_scheduled_and_delivered_once() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::deadline(NO_REDELIVERY)).await;

    let due = Due::in_ms(800);
    let first = schedule(&mut client, TOPIC, deduped_message("remind", "r-1"), due).await;
    assert!(!first.duplicate, "{first:?}");
    let second = schedule(
        &mut client,
        TOPIC,
        deduped_message("remind", "r-1"),
        Due::After(Duration::from_millis(100)),
    )
    .await;
    assert!(second.duplicate, "{second:?}");
    assert_eq!(second.message_id, first.message_id);
    // Publish shares the topic's dedupe ids with ScheduleDelayed.
    let third = publish_messages(&mut client, TOPIC, vec![deduped_message("remind", "r-1")]).await;
    assert_eq!(third.message_ids, vec![first.message_id.clone()]);
    assert_eq!(third.duplicates, vec![true]);

    let got = collect_timed(std::slice::from_mut(&mut stream), 1, EVENTUALLY, None).await;
    assert_exactly_once("deduped schedule", &got, [&first.message_id]);
    // Due when first scheduled: the duplicates did not move it.
    got[0].assert_not_early();
    if let Due::At(at) = due {
        assert_eq!(got[0].deliver_at_ms(), unix_ms(at));
    }
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_window_the_same_dedupe_id_publishes_again() {
    let redis = RedisServer::start();
    let window = Duration::from_secs(1);
    let server = TestServer::start(&redis.url(), &["--dedupe-window", "1s"]).await;
    let mut client = server.client().await;

    let first = publish_messages(&mut client, TOPIC, vec![deduped_message("v1", "once")]).await;
    let scheduled = schedule(
        &mut client,
        TOPIC,
        deduped_message("s1", "sched-once"),
        Due::After(Duration::from_millis(10)),
    )
    .await;
    assert_eq!(first.duplicates, vec![false]);
    assert!(!scheduled.duplicate);

    // Waiting out the window is the behaviour under test, not a readiness guess.
    tokio::time::sleep(window + Duration::from_millis(500)).await;

    let second = publish_messages(&mut client, TOPIC, vec![deduped_message("v2", "once")]).await;
    assert_eq!(second.duplicates, vec![false], "{second:?}");
    assert_ne!(second.message_ids, first.message_ids);
    let rescheduled = schedule(
        &mut client,
        TOPIC,
        deduped_message("s2", "sched-once"),
        Due::After(Duration::from_millis(10)),
    )
    .await;
    assert!(!rescheduled.duplicate, "{rescheduled:?}");
    assert_ne!(rescheduled.message_id, scheduled.message_id);

    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::deadline(NO_REDELIVERY)).await;
    let want = [
        &first.message_ids[0],
        &second.message_ids[0],
        &scheduled.message_id,
        &rescheduled.message_id,
    ];
    let got = collect_timed(std::slice::from_mut(&mut stream), 4, EVENTUALLY, None).await;
    assert_exactly_once("published again after the window", &got, want);
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_dedupe_id_never_deduplicates() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let resp = publish_messages(
        &mut client,
        TOPIC,
        vec![
            pb::PublishMessage {
                payload: "same".into(),
                ..Default::default()
            },
            pb::PublishMessage {
                payload: "same".into(),
                ..Default::default()
            },
        ],
    )
    .await;
    assert_eq!(resp.duplicates, vec![false, false]);
    assert_ne!(resp.message_ids[0], resp.message_ids[1]);
}

/// A request-level dedupe id: a retried Publish is answered with the first
/// call's ids, all duplicates, and nothing is delivered twice, through
/// another replica and after a Redis restart from its AOF alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_request_with_its_dedupe_id_is_published_once() {
    let mut redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let server = TestServer::start(&redis.url(), &[]).await;
    let other = TestServer::start(&redis.url(), &[]).await;
    let mut client = server.client().await;
    let request = |dedupe_id: &str| pb::PublishRequest {
        topic: TOPIC.into(),
        messages: vec![message("x"), message("y")],
        dedupe_id: dedupe_id.into(),
    };
    let first = client
        .publish(request("batch-1"))
        .await
        .expect("publish")
        .into_inner();
    assert_eq!(first.duplicates, [false, false]);

    redis.restart();
    let mut other_client = other.client().await;
    // As a client would: retried until Redis is back.
    let mut attempts = 0;
    let retried = loop {
        match other_client.publish(request("batch-1")).await {
            Ok(response) => break response.into_inner(),
            Err(status) if status.code() == tonic::Code::Unavailable && attempts < 100 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("retry: {status:?}"),
        }
    };
    assert_eq!(retried.message_ids, first.message_ids);
    assert_eq!(retried.duplicates, [true, true]);
    assert_eq!(retried.deliver_at, first.deliver_at);

    let too_long = other_client.publish(request(&"d".repeat(257))).await;
    assert_status(too_long, tonic::Code::InvalidArgument, "dedupe_id");
    let fewer = pb::PublishRequest {
        messages: vec![message("x")],
        ..request("batch-1")
    };
    assert_status(
        other_client.publish(fewer).await,
        tonic::Code::InvalidArgument,
        "dedupe_id",
    );

    let mut stream = subscribe(&mut other_client, TOPIC, SUB, Sub::deadline(NO_REDELIVERY)).await;
    let got = expect_messages(&mut stream, 2).await;
    assert_eq!(ids_of(&got), first.message_ids);
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;
}

/// A request of 1,000 plain messages keeps its claim in a few bytes (its ids
/// are runs of one millisecond each), and a retry still answers each of the
/// 1,000 ids: through the append script, and through the other publish
/// script (the retry now has a scheduled message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_request_keeps_a_small_claim_that_answers_every_id() {
    let (redis, _server, mut client) = redis_server_and_client().await;
    let request = |messages| pb::PublishRequest {
        topic: "big".into(),
        messages,
        dedupe_id: "big-1".into(),
    };
    let plain: Vec<_> = (0..1000).map(|i| message(format!("m{i}"))).collect();
    let first = client
        .publish(request(plain.clone()))
        .await
        .expect("publish")
        .into_inner();
    assert!(first.duplicates.iter().all(|d| !d));

    let mut mixed = plain.clone();
    mixed[0] = scheduled_message("m0", Due::in_ms(60_000));
    // Through the append script, then through the other one.
    for retry in [plain, mixed] {
        let retried = client
            .publish(request(retry))
            .await
            .expect("retry")
            .into_inner();
        assert_eq!(retried.message_ids, first.message_ids);
        assert!(retried.duplicates.iter().all(|d| *d));
        assert_eq!(retried.deliver_at, first.deliver_at);
    }

    let redis_client = redis::Client::open(redis.url()).expect("redis url");
    let mut conn = redis_client
        .get_multiplexed_async_connection()
        .await
        .expect("redis connection");
    let claim: String = redis::cmd("GET")
        .arg("redq:{big}:dedupe-request:big-1")
        .query_async(&mut conn)
        .await
        .expect("the claim");
    println!("claim of 1,000 ids: {} bytes: {claim}", claim.len());
    // Written id by id it would take about 16,000 bytes.
    assert!(claim.len() < 500, "{claim}");

    // One message's claim is its id; a few appended in one millisecond are
    // one run from the first id (the script checks the first and last only).
    for (dedupe_id, count) in [("one", 1), ("few", 5)] {
        let messages = (0..count).map(|i| message(format!("s{i}"))).collect();
        let sent = client
            .publish(pb::PublishRequest {
                dedupe_id: dedupe_id.into(),
                ..request(messages)
            })
            .await
            .expect("publish")
            .into_inner();
        let claim: String = redis::cmd("GET")
            .arg(format!("redq:{{big}}:dedupe-request:{dedupe_id}"))
            .query_async(&mut conn)
            .await
            .expect("the claim");
        let ids = &sent.message_ids;
        let one_millisecond = ids
            .iter()
            .all(|id| id.split('-').next() == ids[0].split('-').next());
        if count == 1 {
            assert_eq!(claim, ids[0]);
        } else if one_millisecond {
            assert_eq!(claim, format!("{}+{}", ids[0], count - 1));
        }
    }
}
