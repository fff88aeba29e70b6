//! Durability of scheduled and pending messages: a replica SIGKILLed in the middle
//! of promoting a large backlog loses and duplicates nothing (invariants 2 and 3),
//! and a Redis SIGKILLed and restarted from its AOF still delivers every scheduled
//! message and every unacked one.

#![allow(clippy::needless_update)]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use common::*;
use tonic_health::pb::health_check_response::ServingStatus;

const TOPIC: &str = "ledger";

const NO_REDELIVERY: Duration = Duration::from_secs(300);

/// Generous bound for a backlog's delivery; only keeps a broken server from hanging.
const PATIENCE: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_during_backlog_promotion_loses_and_duplicates_nothing() {
    const N: usize = 20_000;
    const BATCH: usize = 1000;
    let redis = RedisServer::start();
    let mut a = TestServer::start(&redis.url(), &[]).await;
    let b = TestServer::start(&redis.url(), &[]).await;
    let mut client_b = b.client().await;

    let subs = ["archive", "index"];
    let opts = Sub::deadline(NO_REDELIVERY).max_outstanding(10_000);
    let mut first = subscribe(&mut client_b, TOPIC, subs[0], opts.clone()).await;
    let mut second = subscribe(&mut client_b, TOPIC, subs[1], opts).await;

    // The whole backlog falls due at one instant, scheduled through B (so killing A
    // cannot fail a scheduling call), by four concurrent publishers.
    let due_ms = now_ms() + 5000;
    let mut tasks = Vec::new();
    for p in 0..4 {
        let mut client = b.client().await;
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for batch in (p..N / BATCH).step_by(4) {
                let messages = (0..BATCH)
                    .map(|i| {
                        scheduled_message(
                            format!("entry-{}", batch * BATCH + i),
                            Due::At(at_ms(due_ms)),
                        )
                    })
                    .collect();
                ids.extend(
                    publish_messages(&mut client, TOPIC, messages)
                        .await
                        .message_ids,
                );
            }
            ids
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.extend(t.await.expect("scheduling task"));
    }
    let expected: HashSet<String> = ids.into_iter().collect();
    assert_eq!(expected.len(), N, "distinct ids");
    eprintln!("scheduled {N} messages; due in {} ms", due_ms - now_ms());

    // Kill A right around the due time, while the replicas promote the backlog.
    let kill_at = at_ms(due_ms + rand::random_range(0..200));
    let mut ack_first = client_b.clone();
    let mut ack_second = client_b.clone();
    let (got_first, got_second, delivered_before_kill) = tokio::join!(
        collect_timed(
            std::slice::from_mut(&mut first),
            N,
            PATIENCE,
            Some(AckTo {
                client: &mut ack_first,
                topic: TOPIC,
                subscription: subs[0],
            }),
        ),
        collect_timed(
            std::slice::from_mut(&mut second),
            N,
            PATIENCE,
            Some(AckTo {
                client: &mut ack_second,
                topic: TOPIC,
                subscription: subs[1],
            }),
        ),
        async {
            if let Ok(wait) = kill_at.duration_since(SystemTime::now()) {
                tokio::time::sleep(wait).await;
            }
            a.kill9();
            SystemTime::now()
        },
    );
    let before_kill = got_first
        .iter()
        .chain(&got_second)
        .filter(|arrival| arrival.at < delivered_before_kill)
        .count();
    eprintln!(
        "A killed {} ms after the due time; {before_kill} of {} deliveries had arrived by then",
        unix_ms(delivered_before_kill) - due_ms,
        2 * N
    );

    for (sub, got) in [(subs[0], &got_first), (subs[1], &got_second)] {
        for arrival in got {
            arrival.assert_not_early();
            assert_eq!(
                arrival.deliver_at_ms(),
                due_ms,
                "deliver_at of {}",
                arrival.id()
            );
        }
        assert_exactly_once(&format!("subscription {sub}"), got, &expected);
    }
    let late = tokio::join!(
        collect_timed(
            std::slice::from_mut(&mut first),
            usize::MAX,
            Duration::from_secs(2),
            None
        ),
        collect_timed(
            std::slice::from_mut(&mut second),
            usize::MAX,
            Duration::from_secs(2),
            None
        ),
    );
    assert!(
        late.0.is_empty() && late.1.is_empty(),
        "delivered again after all were acked: {:?} {:?}",
        late.0.iter().map(Arrival::id).take(10).collect::<Vec<_>>(),
        late.1.iter().map(Arrival::id).take(10).collect::<Vec<_>>()
    );
}

/// Subscribes, retrying while the server is still reconnecting to Redis, and
/// collects deliveries until `done` (resubscribing if the stream fails).
async fn collect_across_reconnects(
    server: &TestServer,
    subscription: &str,
    opts: Sub,
    mut done: impl FnMut(&[Arrival]) -> bool,
) -> Vec<Arrival> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut got: Vec<Arrival> = Vec::new();
    while !done(&got) && tokio::time::Instant::now() < deadline {
        let mut client = server.client().await;
        let mut stream = match client.subscribe(opts.request(TOPIC, subscription)).await {
            Ok(resp) => resp.into_inner(),
            Err(status) => {
                eprintln!("subscribe after the Redis restart: {status:?}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        loop {
            if done(&got) {
                break;
            }
            match tokio::time::timeout_at(deadline, stream.message()).await {
                Err(_elapsed) => break,
                Ok(Ok(Some(resp))) => {
                    let at = SystemTime::now();
                    got.extend(resp.messages.into_iter().map(|received| Arrival {
                        at,
                        stream: 0,
                        received,
                    }));
                }
                Ok(Ok(None)) => break,
                Ok(Err(status)) => {
                    eprintln!("stream after the Redis restart: {status:?}; resubscribing");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    break;
                }
            }
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_from_aof_delivers_scheduled_and_unacked_messages() {
    const SUB: &str = "reconciler";
    let mut redis = RedisServer::start_with(&["--appendfsync", "always"]);
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut client = server.client().await;

    // Scheduled a few seconds ahead, through both paths.
    let due_ms = now_ms() + 5000;
    let mut scheduled: HashMap<String, i64> = HashMap::new();
    let batch = publish_messages(
        &mut client,
        TOPIC,
        (0..25)
            .map(|i| scheduled_message(format!("later-{i}"), Due::At(at_ms(due_ms + i))))
            .collect(),
    )
    .await;
    for (i, id) in batch.message_ids.into_iter().enumerate() {
        scheduled.insert(id, due_ms + i as i64);
    }
    for i in 25..50 {
        let resp = schedule(
            &mut client,
            TOPIC,
            message(format!("later-{i}")),
            Due::At(at_ms(due_ms + i)),
        )
        .await;
        scheduled.insert(resp.message_id, due_ms + i);
    }

    // Delivered now and never acked: pending in the consumer group.
    let pending_ids = publish(&mut client, TOPIC, payloads("now", 20)).await;
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(Duration::from_secs(1)).max_outstanding(100),
    )
    .await;
    let held = expect_messages(&mut stream, 20).await;
    assert_eq!(
        ids_of(&held).into_iter().collect::<HashSet<_>>(),
        pending_ids.iter().cloned().collect()
    );
    drop(stream);
    assert!(
        now_ms() < due_ms,
        "the scheduled messages fell due before Redis was killed; the test needs a longer lead"
    );

    redis.kill();
    server
        .wait_health(QUEUE_SERVICE, ServingStatus::NotServing)
        .await;
    redis.launch();
    server.wait_serving().await;

    let all: HashSet<String> = scheduled.keys().chain(&pending_ids).cloned().collect();
    let got = collect_across_reconnects(
        &server,
        SUB,
        Sub::deadline(NO_REDELIVERY).max_outstanding(100),
        |got| {
            let seen: HashSet<String> = got.iter().map(Arrival::id).collect();
            all.is_subset(&seen)
        },
    )
    .await;
    assert_exactly_once("after the Redis restart", &got, &all);
    for arrival in &got {
        let id = arrival.id();
        if let Some(due) = scheduled.get(&id) {
            arrival.assert_not_early();
            assert_eq!(arrival.deliver_at_ms(), *due, "deliver_at of {id}");
        } else {
            assert!(
                arrival.received.delivery_attempt >= 2,
                "unacked message redelivered with a higher attempt: {:?}",
                arrival.received
            );
        }
    }
}
