//! Leases: redelivery after the ack deadline (never before), lease extension with
//! ModifyAckDeadline, stale owners getting FAILED_PRECONDITION, and Nack.
//!
//! "Not before the deadline" is measured from an instant taken before the lease
//! could have started (before the Subscribe call or before the extending call), so
//! the lower bounds are correctness checks, not timing assumptions.

#![allow(clippy::needless_update)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use tonic::Code;

const TOPIC: &str = "tasks";
const SUB: &str = "workers";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacked_message_is_redelivered_after_deadline_not_before() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let ids = publish(&mut client, TOPIC, ["job"]).await;
    let deadline = Duration::from_secs(1);
    let before_lease = Instant::now();
    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::deadline(deadline)).await;

    let first = expect_messages(&mut stream, 1).await;
    assert_eq!(ids_of(&first), ids);
    assert_eq!(first[0].delivery_attempt, 1);

    // Not acked: the only stream of the subscription gets it again.
    let second = expect_messages(&mut stream, 1).await;
    let redelivered_at = before_lease.elapsed();
    assert_eq!(ids_of(&second), ids, "the same message comes back");
    assert_eq!(second[0].delivery_attempt, 2, "attempt one higher");
    assert!(
        redelivered_at >= deadline,
        "redelivered after {redelivered_at:?}, before the {deadline:?} ack deadline"
    );

    ack(&mut client, TOPIC, SUB, ack_ids_of(&second))
        .await
        .expect("ack redelivery");
    assert_no_message_within(&mut stream, deadline * 3).await;
}

/// The fetch that hands out a delivery tells its stream when the lease ends,
/// and the stream comes back then. Were that lost, only the safety-net
/// recheck (every 5 s) would bring the redelivery: the bound below sits
/// between the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_stream_gets_an_expired_lease_back_at_its_deadline_not_at_the_recheck() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let ids = publish(&mut client, TOPIC, ["job"]).await;
    let deadline = Duration::from_secs(1);
    let backoff = Duration::from_millis(100);
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(deadline).retry(backoff, backoff),
    )
    .await;
    let mut delivered = expect_messages(&mut stream, 1).await;
    let mut delivered_at = Instant::now();
    for attempt in 2..=4 {
        let again = expect_messages(&mut stream, 1).await;
        let waited = delivered_at.elapsed();
        delivered_at = Instant::now();
        assert_eq!(ids_of(&again), ids);
        assert_eq!(again[0].delivery_attempt, attempt, "{again:?}");
        let bound = deadline + backoff + Duration::from_millis(2500);
        assert!(
            waited < bound,
            "attempt {attempt} came {waited:?} after the last, past {bound:?}: \
             the stream waited for the recheck, not for the lease's end"
        );
        delivered = again;
    }
    ack(&mut client, TOPIC, SUB, ack_ids_of(&delivered))
        .await
        .expect("ack");
}

/// Acking what a fetch handed out alone takes that fetch's timer away too:
/// at a low rate most fetches hand out one message, and their timers would
/// otherwise stay in Redis for a whole lease, to be settled by a fetch then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acking_messages_one_by_one_leaves_no_timer_behind() {
    let (redis, _server, mut client) = redis_server_and_client().await;
    let deadline = Sub::deadline(Duration::from_secs(600));
    let mut stream = subscribe(&mut client, TOPIC, SUB, deadline).await;
    for n in 0..5 {
        publish(&mut client, TOPIC, [format!("job-{n}")]).await;
        let delivered = expect_messages(&mut stream, 1).await;
        ack(&mut client, TOPIC, SUB, ack_ids_of(&delivered))
            .await
            .expect("ack");
    }
    let timers = format!("redq:{{{TOPIC}}}:sub:{SUB}:timers");
    let left = redis.cli(&["ZRANGE", &timers, "0", "-1"]);
    assert_eq!(left.trim(), "", "timers left after every ack: {left}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_lease_is_not_redelivered_until_extension_stops() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let deadline = Duration::from_secs(1);
    let mut owner = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(deadline).consumer("owner"),
    )
    .await;
    let ids = publish(&mut client, TOPIC, ["long job"]).await;
    let got = expect_messages(&mut owner, 1).await;
    assert_eq!(ids_of(&got), ids);
    let ack_id = got[0].ack_id.clone();

    // A second consumer that would happily take the message if the lease lapsed.
    let other = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(deadline).consumer("other"),
    )
    .await;
    let mut streams = [owner, other];

    let extend_for = Duration::from_secs(3);
    let period = Duration::from_millis(250);
    let started = Instant::now();
    let mut last_extend = Instant::now();
    let mut extensions = 0;
    while started.elapsed() < extend_for {
        last_extend = Instant::now();
        modify_ack_deadline(&mut client, TOPIC, SUB, vec![ack_id.clone()], deadline)
            .await
            .expect("owner extends its lease");
        extensions += 1;
        let seen = collect_from_all(&mut streams, 1, period).await;
        assert!(
            seen.iter().all(Vec::is_empty),
            "redelivered while the lease was being extended (after {extensions} extensions, {:?}): {seen:?}",
            started.elapsed()
        );
    }

    // Stop extending: the lease lapses and someone gets it again.
    let again = collect_from_all(&mut streams, 1, EVENTUALLY).await;
    let redelivered_after = last_extend.elapsed();
    let again: Vec<_> = again.into_iter().flatten().collect();
    assert_eq!(
        ids_of(&again),
        ids,
        "redelivered once the extensions stopped"
    );
    assert_eq!(again[0].delivery_attempt, 2);
    assert!(
        redelivered_after >= deadline,
        "redelivered {redelivered_after:?} after the last extension, before its {deadline:?} lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_owner_cannot_extend_or_nack_after_redelivery() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let ids = publish(&mut client, TOPIC, ["contested"]).await;
    let mut a = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(Duration::from_millis(500)).consumer("a"),
    )
    .await;
    let got_a = expect_messages(&mut a, 1).await;
    assert_eq!(ids_of(&got_a), ids);
    let stale = got_a[0].ack_id.clone();
    // A stalls and goes away without acking; only B is left to receive it.
    drop(a);

    let mut b = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(Duration::from_secs(30)).consumer("b"),
    )
    .await;
    let got_b = expect_messages(&mut b, 1).await;
    assert_eq!(ids_of(&got_b), ids);
    assert!(got_b[0].delivery_attempt >= 2, "redelivery: {:?}", got_b[0]);
    let fresh = got_b[0].ack_id.clone();

    let extend = modify_ack_deadline(
        &mut client,
        TOPIC,
        SUB,
        vec![stale.clone()],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        extend.as_ref().map_err(|s| s.code()).err(),
        Some(Code::FailedPrecondition),
        "stale ModifyAckDeadline: {extend:?}"
    );
    let nacked = nack(&mut client, TOPIC, SUB, vec![stale.clone()]).await;
    assert_eq!(
        nacked.as_ref().map_err(|s| s.code()).err(),
        Some(Code::FailedPrecondition),
        "stale Nack: {nacked:?}"
    );

    modify_ack_deadline(
        &mut client,
        TOPIC,
        SUB,
        vec![fresh.clone()],
        Duration::from_secs(10),
    )
    .await
    .expect("the current owner extends");
    // The stale calls did not take the message away from B.
    assert_no_message_within(&mut b, Duration::from_secs(1)).await;
    ack(&mut client, TOPIC, SUB, vec![fresh])
        .await
        .expect("current owner acks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_redelivers_before_deadline_and_double_ack_is_ok() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let ids = publish(&mut client, TOPIC, ["retry me"]).await;
    // A deadline far beyond the wait below: a redelivery can only come from the Nack.
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(Duration::from_secs(300)),
    )
    .await;
    let first = expect_messages(&mut stream, 1).await;
    assert_eq!(ids_of(&first), ids);
    assert_eq!(first[0].delivery_attempt, 1);

    nack(&mut client, TOPIC, SUB, ack_ids_of(&first))
        .await
        .expect("nack");
    let second = expect_messages(&mut stream, 1).await;
    assert_eq!(ids_of(&second), ids);
    assert_eq!(second[0].delivery_attempt, 2, "nack → attempt + 1");

    ack(&mut client, TOPIC, SUB, ack_ids_of(&second))
        .await
        .expect("first ack");
    ack(&mut client, TOPIC, SUB, ack_ids_of(&second))
        .await
        .expect("acking twice is not an error");
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modify_ack_deadline_zero_gives_the_message_back() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let ids = publish(&mut client, TOPIC, ["hand back"]).await;
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(Duration::from_secs(300)),
    )
    .await;
    let first = expect_messages(&mut stream, 1).await;
    modify_ack_deadline(&mut client, TOPIC, SUB, ack_ids_of(&first), Duration::ZERO)
        .await
        .expect("zero deadline");
    let second = expect_messages(&mut stream, 1).await;
    assert_eq!(ids_of(&second), ids);
    assert_eq!(second[0].delivery_attempt, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_stream_gets_its_own_expired_leases_back() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let deadline = Duration::from_secs(1);
    let ids = publish(&mut client, TOPIC, ["a", "b", "c"]).await;
    let before_lease = Instant::now();
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(deadline)
            .max_outstanding(2)
            .retry(Duration::ZERO, Duration::ZERO),
    )
    .await;

    // Full at two; nothing acked, so only the ended leases can make room.
    let first = expect_messages(&mut stream, 2).await;
    assert_eq!(ids_of(&first), ids[..2]);
    assert_no_message_within(&mut stream, deadline / 2).await;

    let again = expect_messages(&mut stream, 2).await;
    let redelivered_at = before_lease.elapsed();
    assert!(
        redelivered_at >= deadline,
        "redelivered after {redelivered_at:?}, before the {deadline:?} ack deadline"
    );
    assert_eq!(ids_of(&again), ids[..2], "the held two come back first");
    assert!(again.iter().all(|m| m.delivery_attempt == 2));

    ack(&mut client, TOPIC, SUB, ack_ids_of(&again))
        .await
        .expect("ack redeliveries");
    let last = expect_messages(&mut stream, 1).await;
    assert_eq!(ids_of(&last), ids[2..]);
}

/// The ack script takes a batch timer away only when Redis agrees that it
/// covers nothing: named as finished while its consumer still holds an entry
/// of its range (a stream that lost count, say), it stays, and that entry's
/// lease still ends. Through the store, which is where a stream's word
/// reaches Redis.
#[tokio::test]
async fn a_batch_timer_named_finished_too_early_stays_until_its_last_entry_is_acked() {
    use redq::model::{
        GroupStart, Lease, NewMessage, PublishBatch, RetryPolicy, SubscriptionSettings,
    };
    use redq::store::leases::{AckRequest, ConsumerSpec};
    use redq::store::{Store, TopicKeys, connection::RedisAccess};

    let redis = RedisServer::start();
    let access = RedisAccess {
        url: redis.url(),
        password: None,
        certificates: None,
    };
    let store = Store::new(&access, 2).expect("store");
    let keys = TopicKeys::new(TOPIC);
    let settings = SubscriptionSettings {
        ack_deadline: None,
        retry: RetryPolicy {
            minimum_backoff: Duration::from_millis(10),
            maximum_backoff: Duration::from_millis(10),
            max_delivery_attempts: 0,
        },
        dead_lettering: true,
        message_ordering: false,
        max_blocked: 1000,
        filter: String::new(),
        limits: Default::default(),
    };
    store
        .ensure_subscription(&keys, SUB, GroupStart::Earliest, &settings)
        .await
        .expect("subscription");
    let messages = ["a", "b", "c"].map(|payload| NewMessage {
        payload: payload.into(),
        ..Default::default()
    });
    let request = PublishBatch {
        dedupe_id: String::new(),
        messages: messages.to_vec(),
    };
    store
        .publish(&keys, &[request], Duration::from_secs(60))
        .await
        .expect("publish");
    let spec = ConsumerSpec {
        keys: keys.clone(),
        group: SUB.into(),
        consumer: "c".into(),
        max_outstanding: 10,
        max_unacked_bytes: 0,
        lease: Duration::from_millis(500),
        max_message_bytes: 1 << 20,
        ordered: false,
    };
    let fetched = store.fetch(&spec, 10, 1 << 20).await.expect("fetch");
    assert_eq!(fetched.deliveries.len(), 3);
    let batch = fetched.batch.expect("a batch timer");
    assert_eq!(batch.covers, 3);
    let lease = |n: usize| Lease {
        entry_id: fetched.deliveries[n].0.id.clone(),
        consumer: "c".into(),
        attempt: 1,
    };
    let timers = format!("redq:{{{TOPIC}}}:sub:{SUB}:timers");
    let members = || redis.cli(&["ZRANGE", &timers, "0", "-1"]);
    let early = AckRequest {
        leases: vec![lease(0), lease(1)],
        listed: false,
        finished: vec![batch.timer.clone()],
    };
    assert_eq!(store.ack(&keys, SUB, &early).await.expect("ack").count, 2);
    assert!(members().contains("b/c/"), "c is held: {}", members());
    // Its lease ends: the timer the ack left hands it out again.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let again = store.fetch(&spec, 10, 1 << 20).await.expect("fetch");
    assert_eq!(again.deliveries.len(), 0, "parked for its 10 ms backoff");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let again = store.fetch(&spec, 10, 1 << 20).await.expect("fetch");
    let redelivered: Vec<_> = again
        .deliveries
        .iter()
        .map(|(e, n)| (e.id.clone(), *n))
        .collect();
    assert_eq!(redelivered, [(lease(2).entry_id, 2)]);
}
