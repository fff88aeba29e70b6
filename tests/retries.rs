//! Retries and dead letters: Nack with a delay, exponential backoff after a plain
//! Nack or an expired lease, max_delivery_attempts sending a message exactly once
//! to the subscription's dead letters (invariant 6), ListDeadLetters paging, and
//! retry settings fixed by the Subscribe that creates the subscription.
//!
//! Every duration check is a lower bound measured from an instant taken before the
//! server could have started the wait (before the Nack call, or before the
//! Subscribe that started the first lease).

#![allow(clippy::needless_update)]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use redq::pb;
use tonic::{Code, Status};

const TOPIC: &str = "payments";
const SUB: &str = "charger";

/// Long enough that no lease expires during a test unless the test wants it to.
const NO_REDELIVERY: Duration = Duration::from_secs(300);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A message with a payload and one attribute, to check dead letters keep both.
fn tagged(payload: &str) -> pb::PublishMessage {
    pb::PublishMessage {
        payload: Bytes::from(payload.to_string()),
        attributes: HashMap::from([("origin".to_string(), payload.to_string())]),
        ..Default::default()
    }
}

/// Exactly one delivery, of message `id`, with `attempt`.
#[track_caller]
fn assert_delivery(got: &[pb::ReceivedMessage], id: &str, attempt: u32) {
    assert_eq!(ids_of(got), vec![id.to_string()], "deliveries: {got:?}");
    assert_eq!(got[0].delivery_attempt, attempt, "delivery: {:?}", got[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_with_delay_redelivers_not_before_the_delay() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let id = publish(&mut client, TOPIC, ["later please"])
        .await
        .remove(0);
    // The backoff (100 ms) is shorter than the requested delay: the delay wins.
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(NO_REDELIVERY).retry(ms(100), ms(100)),
    )
    .await;
    let first = expect_messages(&mut stream, 1).await;
    assert_delivery(&first, &id, 1);

    let delay = ms(1500);
    let nacked_at = Instant::now();
    nack_after(&mut client, TOPIC, SUB, ack_ids_of(&first), delay)
        .await
        .expect("nack with delay");
    let second = expect_messages(&mut stream, 1).await;
    let waited = nacked_at.elapsed();
    assert_delivery(&second, &id, 2);
    assert!(
        waited >= delay,
        "redelivered {waited:?} after a Nack with delay {delay:?}"
    );

    // A delay longer than the backoff, again.
    let nacked_at = Instant::now();
    nack_after(&mut client, TOPIC, SUB, ack_ids_of(&second), ms(800))
        .await
        .expect("second nack with delay");
    let third = expect_messages(&mut stream, 1).await;
    let waited = nacked_at.elapsed();
    assert_delivery(&third, &id, 3);
    assert!(
        waited >= ms(800),
        "redelivered {waited:?} after 800 ms delay"
    );

    ack(&mut client, TOPIC, SUB, ack_ids_of(&third))
        .await
        .expect("ack");
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_nack_backs_off_exponentially_up_to_the_maximum() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let id = publish(&mut client, TOPIC, ["flaky"]).await.remove(0);
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(NO_REDELIVERY).retry(ms(200), ms(800)),
    )
    .await;
    let mut got = expect_messages(&mut stream, 1).await;
    assert_delivery(&got, &id, 1);

    // minimum * 2^(attempt-1), capped at the maximum.
    let backoffs = [ms(200), ms(400), ms(800), ms(800)];
    for (i, backoff) in backoffs.into_iter().enumerate() {
        let attempt = i as u32 + 1;
        let nacked_at = Instant::now();
        nack(&mut client, TOPIC, SUB, ack_ids_of(&got))
            .await
            .unwrap_or_else(|s| panic!("nack attempt {attempt}: {s:?}"));
        got = expect_messages(&mut stream, 1).await;
        let waited = nacked_at.elapsed();
        eprintln!("attempt {attempt} nacked; redelivered after {waited:?} (backoff {backoff:?})");
        assert_delivery(&got, &id, attempt + 1);
        assert!(
            waited >= backoff,
            "attempt {attempt}: redelivered {waited:?} after the Nack, before its {backoff:?} backoff"
        );
    }
    ack(&mut client, TOPIC, SUB, ack_ids_of(&got))
        .await
        .expect("ack");
    assert_no_message_within(&mut stream, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_lease_is_redelivered_after_deadline_plus_backoff() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let id = publish(&mut client, TOPIC, ["slow consumer"])
        .await
        .remove(0);
    let deadline = ms(500);
    let (min, max) = (ms(1000), ms(1500));
    // No lease can start before this instant; each later one starts only after the
    // previous lease expired and its backoff passed, so the bounds add up.
    let before_first_lease = Instant::now();
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(deadline).retry(min, max),
    )
    .await;
    let first = expect_messages(&mut stream, 1).await;
    assert_delivery(&first, &id, 1);

    let second = expect_messages(&mut stream, 1).await;
    let at_second = before_first_lease.elapsed();
    assert_delivery(&second, &id, 2);
    assert!(
        at_second >= deadline + min,
        "second delivery {at_second:?} after the first lease could start; \
         its deadline {deadline:?} + backoff {min:?} had not passed"
    );

    // Attempt 2's backoff is min * 2, capped at max.
    let third = expect_messages(&mut stream, 1).await;
    let at_third = before_first_lease.elapsed();
    assert_delivery(&third, &id, 3);
    let bound = deadline + min + deadline + max;
    assert!(
        at_third >= bound,
        "third delivery {at_third:?} after the first lease could start, before {bound:?}"
    );
    ack(&mut client, TOPIC, SUB, ack_ids_of(&third))
        .await
        .expect("ack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nacked_max_attempts_times_lands_in_dead_letters_exactly_once() {
    const ATTEMPTS: u32 = 3;
    let TwoReplicas {
        redis: _redis,
        a: _a,
        b,
        mut client_a,
        mut client_b,
    } = two_replicas().await;
    let mut admin = b.admin().await;

    let published_before = now_ms();
    let messages: Vec<_> = (0..5).map(|i| tagged(&format!("poison-{i}"))).collect();
    let ids = publish_messages(&mut client_a, TOPIC, messages.clone())
        .await
        .message_ids;
    let by_id: HashMap<&String, &pb::PublishMessage> = ids.iter().zip(&messages).collect();
    let backoff = ms(100);
    let opts = Sub::deadline(NO_REDELIVERY)
        .retry(backoff, backoff)
        .max_attempts(ATTEMPTS);
    // A second subscription that acks: its copy is unaffected.
    let mut happy = subscribe(
        &mut client_b,
        TOPIC,
        "auditor",
        Sub::deadline(NO_REDELIVERY),
    )
    .await;
    let mut streams = [
        subscribe(&mut client_a, TOPIC, SUB, opts.clone().consumer("on-a")).await,
        subscribe(&mut client_b, TOPIC, SUB, opts.consumer("on-b")).await,
    ];

    // Nack every delivery, alternating the replica that takes the Nack.
    let mut deliveries: HashMap<String, Vec<u32>> = HashMap::new();
    let total = ids.len() * ATTEMPTS as usize;
    let mut seen = 0;
    let deadline = Instant::now() + EVENTUALLY * 2;
    while seen < total && Instant::now() < deadline {
        let got = collect_timed(&mut streams, 1, ms(500), None).await;
        for (k, a) in got.iter().enumerate() {
            deliveries
                .entry(a.id())
                .or_default()
                .push(a.received.delivery_attempt);
            let client = if (seen + k) % 2 == 0 {
                &mut client_a
            } else {
                &mut client_b
            };
            nack(client, TOPIC, SUB, vec![a.received.ack_id.clone()])
                .await
                .unwrap_or_else(|s| panic!("nack {}: {s:?}", a.id()));
        }
        seen += got.len();
    }
    for id in &ids {
        assert_eq!(
            deliveries.get(id).cloned().unwrap_or_default(),
            (1..=ATTEMPTS).collect::<Vec<_>>(),
            "attempts of {id} (all deliveries: {deliveries:?})"
        );
    }
    // No delivery after the last attempt, for many backoffs.
    let late = collect_timed(&mut streams, usize::MAX, ms(2000), None).await;
    assert!(
        late.is_empty(),
        "delivered after {ATTEMPTS} attempts: {:?}",
        late.iter()
            .map(|a| (a.id(), a.received.delivery_attempt))
            .collect::<Vec<_>>()
    );

    let dead = wait_dead_letters(&mut admin, TOPIC, SUB, ids.len()).await;
    let dead_ids: Vec<String> = dead
        .iter()
        .map(|d| d.message.as_ref().map(|m| m.id.clone()).unwrap_or_default())
        .collect();
    assert_eq!(
        dead_ids.iter().collect::<HashSet<_>>(),
        ids.iter().collect::<HashSet<_>>(),
        "dead letters: {dead:?}"
    );
    assert_eq!(dead.len(), ids.len(), "each exactly once: {dead_ids:?}");
    let now = now_ms();
    for d in &dead {
        let m = d.message.as_ref().expect("dead letter carries the message");
        let original = by_id[&m.id];
        assert_eq!(m.payload, original.payload, "payload of {}", m.id);
        assert_eq!(m.attributes, original.attributes, "attributes of {}", m.id);
        assert_eq!(d.delivery_attempts, ATTEMPTS, "{d:?}");
        assert_eq!(d.reason, pb::DeadLetterReason::Nacked as i32, "{d:?}");
        assert!(!d.dead_letter_id.is_empty(), "{d:?}");
        let at = ts_ms(d.dead_lettered_at.as_ref().expect("dead_lettered_at"));
        assert!(
            (published_before..=now).contains(&at),
            "dead_lettered_at {at} outside [{published_before}, {now}]"
        );
    }
    let ids_of_dead: HashSet<&String> = dead.iter().map(|d| &d.dead_letter_id).collect();
    assert_eq!(ids_of_dead.len(), dead.len(), "distinct dead_letter_id");

    // Still exactly once a while later, and nothing for the other subscription.
    tokio::time::sleep(ms(500)).await;
    assert_eq!(
        all_dead_letters(&mut admin, TOPIC, SUB).await.len(),
        ids.len()
    );
    assert!(
        all_dead_letters(&mut admin, TOPIC, "auditor")
            .await
            .is_empty()
    );
    let audited = expect_messages(&mut happy, ids.len()).await;
    assert_eq!(
        ids_of(&audited).into_iter().collect::<HashSet<_>>(),
        ids.iter().cloned().collect()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_max_attempts_times_lands_in_dead_letters_exactly_once() {
    const ATTEMPTS: u32 = 2;
    let redis = RedisServer::start();
    // Two replicas with a consumer each, so two reclaimers race to handle the
    // last expiry.
    let a = TestServer::start(&redis.url(), &[]).await;
    let b = TestServer::start(&redis.url(), &[]).await;
    let mut client = a.client().await;
    let mut client_b = b.client().await;
    let mut admin = b.admin().await;

    let messages: Vec<_> = (0..3).map(|i| tagged(&format!("stuck-{i}"))).collect();
    let ids = publish_messages(&mut client, TOPIC, messages.clone())
        .await
        .message_ids;
    let by_id: HashMap<&String, &pb::PublishMessage> = ids.iter().zip(&messages).collect();
    let opts = Sub::deadline(ms(500))
        .retry(ms(100), ms(100))
        .max_attempts(ATTEMPTS);
    let mut streams = [
        subscribe(&mut client, TOPIC, SUB, opts.clone().consumer("on-a")).await,
        subscribe(&mut client_b, TOPIC, SUB, opts.consumer("on-b")).await,
    ];

    // Never acked: each message is delivered ATTEMPTS times, then dead-lettered.
    let total = ids.len() * ATTEMPTS as usize;
    let got = collect_timed(&mut streams, total, EVENTUALLY, None).await;
    let mut attempts: HashMap<String, Vec<u32>> = HashMap::new();
    for a in &got {
        attempts
            .entry(a.id())
            .or_default()
            .push(a.received.delivery_attempt);
    }
    for id in &ids {
        assert_eq!(
            attempts.get(id).cloned().unwrap_or_default(),
            (1..=ATTEMPTS).collect::<Vec<_>>(),
            "attempts of {id}: {attempts:?}"
        );
    }

    let dead = wait_dead_letters(&mut admin, TOPIC, SUB, ids.len()).await;
    // Several deadlines and backoffs later: no delivery, no second dead letter.
    let late = collect_timed(&mut streams, usize::MAX, ms(2500), None).await;
    assert!(
        late.is_empty(),
        "delivered after {ATTEMPTS} attempts: {:?}",
        late.iter()
            .map(|a| (a.id(), a.received.delivery_attempt))
            .collect::<Vec<_>>()
    );
    let dead_again = all_dead_letters(&mut admin, TOPIC, SUB).await;
    assert_eq!(dead_again.len(), ids.len(), "exactly once: {dead_again:?}");
    assert_eq!(dead.len(), ids.len(), "exactly once: {dead:?}");
    for d in &dead_again {
        let m = d.message.as_ref().expect("dead letter carries the message");
        let original = by_id
            .get(&m.id)
            .unwrap_or_else(|| panic!("unexpected dead letter {d:?}"));
        assert_eq!(m.payload, original.payload);
        assert_eq!(m.attributes, original.attributes);
        assert_eq!(d.delivery_attempts, ATTEMPTS, "{d:?}");
        assert_eq!(
            d.reason,
            pb::DeadLetterReason::DeadlineExceeded as i32,
            "{d:?}"
        );
        assert!(d.dead_lettered_at.is_some(), "{d:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_dead_letters_pages_oldest_first() {
    const N: usize = 25;
    let (_redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;

    let ids = publish(&mut client, TOPIC, payloads("dl", N)).await;
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(NO_REDELIVERY)
            .max_outstanding(N as u32)
            .max_attempts(1),
    )
    .await;
    let got = expect_messages(&mut stream, N).await;
    // One Nack per message, in publish order, so dead-letter order is known.
    let ack_id: HashMap<String, String> =
        got.iter().map(|m| (id_of(m), m.ack_id.clone())).collect();
    for id in &ids {
        nack(&mut client, TOPIC, SUB, vec![ack_id[id].clone()])
            .await
            .expect("nack");
    }
    wait_dead_letters(&mut admin, TOPIC, SUB, N).await;

    let mut pages = Vec::new();
    let mut token = String::new();
    loop {
        let page = list_dead_letters(&mut admin, TOPIC, SUB, 10, &token)
            .await
            .expect("ListDeadLetters page");
        assert!(page.dead_letters.len() <= 10, "page size: {page:?}");
        let last = page.next_page_token.is_empty();
        token = page.next_page_token.clone();
        pages.push(page.dead_letters);
        if last {
            break;
        }
        assert!(pages.len() < 10, "no last page after {} pages", pages.len());
    }
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes.iter().sum::<usize>(), N, "page sizes {sizes:?}");
    assert!(
        sizes[..sizes.len() - 1].iter().all(|&n| n == 10),
        "full pages before the last: {sizes:?}"
    );
    let listed: Vec<String> = pages
        .iter()
        .flatten()
        .map(|d| d.message.as_ref().map(|m| m.id.clone()).unwrap_or_default())
        .collect();
    assert_eq!(listed, ids, "oldest first, each once");
    let times: Vec<i64> = pages
        .iter()
        .flatten()
        .map(|d| ts_ms(d.dead_lettered_at.as_ref().expect("dead_lettered_at")))
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");

    // The default page size holds all 25, on one last page.
    let one = list_dead_letters(&mut admin, TOPIC, SUB, 0, "")
        .await
        .expect("default page size");
    assert_eq!(one.dead_letters.len(), N);
    assert!(one.next_page_token.is_empty(), "{:?}", one.next_page_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_delay_and_zero_deadline_skip_the_backoff() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let id = publish(&mut client, TOPIC, ["again"]).await.remove(0);
    // A 10-minute backoff: any redelivery within this test skipped it.
    let ten_minutes = Duration::from_secs(600);
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(NO_REDELIVERY).retry(ten_minutes, ten_minutes),
    )
    .await;
    let first = expect_messages(&mut stream, 1).await;
    assert_delivery(&first, &id, 1);

    modify_ack_deadline(&mut client, TOPIC, SUB, ack_ids_of(&first), Duration::ZERO)
        .await
        .expect("ModifyAckDeadline 0");
    let second = expect_messages(&mut stream, 1).await;
    assert_delivery(&second, &id, 2);

    nack_after(&mut client, TOPIC, SUB, ack_ids_of(&second), Duration::ZERO)
        .await
        .expect("Nack with zero delay");
    let third = expect_messages(&mut stream, 1).await;
    assert_delivery(&third, &id, 3);

    // A plain Nack waits out the subscription's 10-minute backoff.
    nack(&mut client, TOPIC, SUB, ack_ids_of(&third))
        .await
        .expect("plain Nack");
    assert_no_message_within(&mut stream, ms(2000)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_settings_come_from_the_subscribe_that_creates_the_subscription() {
    let (_redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;

    // The first Subscribe creates the subscription with a short backoff and two
    // attempts.
    let creator = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(NO_REDELIVERY)
            .retry(ms(300), ms(300))
            .max_attempts(2)
            .consumer("creator"),
    )
    .await;
    // A later Subscribe asks for a 10-minute backoff and many attempts: ignored.
    let ten_minutes = Duration::from_secs(600);
    let later = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(NO_REDELIVERY)
            .retry(ten_minutes, ten_minutes)
            .max_attempts(100)
            .consumer("later"),
    )
    .await;
    // Either stream may get the message; the subscription's settings are what count.
    let mut streams = [creator, later];

    let id = publish(&mut client, TOPIC, ["settled"]).await.remove(0);
    let first = collect_timed(&mut streams, 1, EVENTUALLY, None).await;
    let first: Vec<_> = first.into_iter().map(|a| a.received).collect();
    assert_delivery(&first, &id, 1);
    let nacked_at = Instant::now();
    nack(&mut client, TOPIC, SUB, ack_ids_of(&first))
        .await
        .expect("nack 1");
    let second = collect_timed(&mut streams, 1, EVENTUALLY, None).await;
    let second: Vec<_> = second.into_iter().map(|a| a.received).collect();
    assert_delivery(&second, &id, 2);
    assert!(
        nacked_at.elapsed() >= ms(300),
        "the creator's 300 ms backoff"
    );
    nack(&mut client, TOPIC, SUB, ack_ids_of(&second))
        .await
        .expect("nack 2");
    // The creator's max_delivery_attempts (2) applies: dead-lettered, not redelivered.
    let dead = wait_dead_letters(&mut admin, TOPIC, SUB, 1).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].delivery_attempts, 2);
    let late = collect_timed(&mut streams, usize::MAX, ms(1500), None).await;
    assert!(
        late.is_empty(),
        "delivered after the last attempt: {late:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_default_retry_settings_come_from_flags() {
    let redis = RedisServer::start();
    let server = TestServer::start(
        &redis.url(),
        &[
            "--retry-min-backoff",
            "100ms",
            "--retry-max-backoff",
            "200ms",
            "--max-delivery-attempts",
            "2",
        ],
    )
    .await;
    let mut client = server.client().await;
    let mut admin = server.admin().await;

    let id = publish(&mut client, TOPIC, ["defaults"]).await.remove(0);
    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::deadline(NO_REDELIVERY)).await;
    let first = expect_messages(&mut stream, 1).await;
    assert_delivery(&first, &id, 1);
    let nacked_at = Instant::now();
    nack(&mut client, TOPIC, SUB, ack_ids_of(&first))
        .await
        .expect("nack 1");
    let second = expect_messages(&mut stream, 1).await;
    assert_delivery(&second, &id, 2);
    assert!(nacked_at.elapsed() >= ms(100));
    nack(&mut client, TOPIC, SUB, ack_ids_of(&second))
        .await
        .expect("nack 2");
    let dead = wait_dead_letters(&mut admin, TOPIC, SUB, 1).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].delivery_attempts, 2);
    assert_no_message_within(&mut stream, ms(1000)).await;
}

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

/// The status a Subscribe call ends with, whether the server rejects the call
/// itself or fails the stream right away.
async fn subscribe_error(client: &mut Client, request: pb::SubscribeRequest) -> Result<(), Status> {
    let mut stream = match client.subscribe(request.clone()).await {
        Err(status) => return Err(status),
        Ok(resp) => resp.into_inner(),
    };
    match tokio::time::timeout(Duration::from_secs(5), stream.message()).await {
        Ok(Err(status)) => Err(status),
        other => panic!("Subscribe {request:?} was accepted: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_retry_settings_and_nack_delays_are_rejected_naming_the_field() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let inverted = Sub::deadline(NO_REDELIVERY).retry(ms(2000), ms(1000));
    assert_status(
        subscribe_error(&mut client, inverted.request(TOPIC, SUB)).await,
        Code::InvalidArgument,
        "retry_policy",
    );

    let id = publish(&mut client, TOPIC, ["x"]).await.remove(0);
    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::deadline(NO_REDELIVERY)).await;
    let got = expect_messages(&mut stream, 1).await;
    assert_delivery(&got, &id, 1);
    let negative = client
        .nack(pb::NackRequest {
            topic: TOPIC.to_string(),
            subscription: SUB.to_string(),
            ack_ids: ack_ids_of(&got),
            delay: Some(prost_types::Duration {
                seconds: -1,
                nanos: 0,
            }),
            ..Default::default()
        })
        .await;
    assert_status(negative, Code::InvalidArgument, "delay");

    // The rejected Nack left the lease alone: the owner still acks it.
    ack(&mut client, TOPIC, SUB, ack_ids_of(&got))
        .await
        .expect("ack after the rejected nack");
    assert_no_message_within(&mut stream, ms(1000)).await;
}
