//! Delivery: publish → subscribe → ack, fan-out across subscriptions, start
//! positions, and load-sharing between the consumers of one subscription.

#![allow(clippy::needless_update)]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use common::*;
use redq::pb;

const TOPIC: &str = "orders";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_subscribe_ack_round_trip() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let before = SystemTime::now();
    let sent: Vec<pb::PublishMessage> = (0..3)
        .map(|i| pb::PublishMessage {
            payload: Bytes::from(format!("payload-{i}")),
            attributes: HashMap::from([
                ("k".to_string(), format!("v{i}")),
                ("kind".to_string(), "test".to_string()),
            ]),
            ordering_key: format!("key-{i}"),
            ..Default::default()
        })
        .collect();
    let ids = client
        .publish(pb::PublishRequest {
            topic: TOPIC.to_string(),
            messages: sent.clone(),
            ..Default::default()
        })
        .await
        .expect("publish")
        .into_inner()
        .message_ids;
    let after = SystemTime::now();
    assert_eq!(ids.len(), 3, "one id per message");
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        3,
        "ids are distinct: {ids:?}"
    );
    assert!(ids.iter().all(|id| !id.is_empty()));

    let deadline = Duration::from_secs(1);
    let mut stream = subscribe(&mut client, TOPIC, "billing", Sub::deadline(deadline)).await;
    let got = expect_messages(&mut stream, 3).await;
    assert_eq!(
        got.len(),
        3,
        "exactly the published messages: {:?}",
        ids_of(&got)
    );

    // Ids come back in request order: the i-th id belongs to the i-th payload.
    for received in &got {
        let m = received.message.as_ref().expect("message set");
        let i = ids
            .iter()
            .position(|id| *id == m.id)
            .unwrap_or_else(|| panic!("unknown id {}", m.id));
        assert_eq!(m.payload, sent[i].payload, "payload of {}", m.id);
        assert_eq!(m.attributes, sent[i].attributes, "attributes of {}", m.id);
        assert_eq!(
            m.ordering_key, sent[i].ordering_key,
            "ordering_key of {}",
            m.id
        );
        assert_eq!(received.delivery_attempt, 1, "first delivery of {}", m.id);
        assert!(!received.ack_id.is_empty(), "ack_id of {}", m.id);
        let t = m.publish_time.expect("publish_time set");
        let published = UNIX_EPOCH + Duration::new(t.seconds as u64, t.nanos as u32);
        // A clock sanity window, not a speed check: same machine, same clock.
        let slack = Duration::from_secs(60);
        assert!(
            published + slack >= before && published <= after + slack,
            "publish_time {published:?} is not around the publish call ({before:?}..{after:?})"
        );
    }
    let ack_ids = ack_ids_of(&got);
    assert_eq!(
        ack_ids.iter().collect::<HashSet<_>>().len(),
        3,
        "ack ids are distinct"
    );

    ack(&mut client, TOPIC, "billing", ack_ids)
        .await
        .expect("ack");
    // Well past the 1 s deadline (and a reclaimer pass): acked messages stay acked.
    assert_no_message_within(&mut stream, deadline * 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subscription_gets_every_message() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let ids = publish(&mut client, TOPIC, payloads("m", 5)).await;
    let want: HashSet<String> = ids.iter().cloned().collect();

    let mut a = subscribe(&mut client, TOPIC, "sub-a", Sub::default()).await;
    let mut b = subscribe(&mut client, TOPIC, "sub-b", Sub::default()).await;
    let got_a = expect_messages(&mut a, 5).await;
    let got_b = expect_messages(&mut b, 5).await;
    assert_eq!(
        ids_of(&got_a).into_iter().collect::<HashSet<_>>(),
        want,
        "sub-a"
    );
    assert_eq!(
        ids_of(&got_b).into_iter().collect::<HashSet<_>>(),
        want,
        "sub-b"
    );
    assert_eq!(got_a.len(), 5, "sub-a got duplicates: {:?}", ids_of(&got_a));
    assert_eq!(got_b.len(), 5, "sub-b got duplicates: {:?}", ids_of(&got_b));

    // Acking on one subscription does not affect the other.
    ack(&mut client, TOPIC, "sub-a", ack_ids_of(&got_a))
        .await
        .expect("ack sub-a");
    let more = publish(&mut client, TOPIC, payloads("n", 2)).await;
    for (name, stream) in [("sub-a", &mut a), ("sub-b", &mut b)] {
        let got = expect_messages(stream, 2).await;
        assert_eq!(
            ids_of(&got).into_iter().collect::<HashSet<_>>(),
            more.iter().cloned().collect::<HashSet<_>>(),
            "{name} gets messages published after it was created"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_start_skips_earlier_messages() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let early = publish(&mut client, TOPIC, payloads("early", 3)).await;

    // The subscription exists once the Subscribe call has been answered.
    let mut latest = subscribe(&mut client, TOPIC, "from-now", Sub::default().latest()).await;
    let late = publish(&mut client, TOPIC, payloads("late", 2)).await;

    let got_latest = expect_messages(&mut latest, 2).await;
    assert_eq!(
        ids_of(&got_latest).into_iter().collect::<HashSet<_>>(),
        late.iter().cloned().collect::<HashSet<_>>(),
        "LATEST gets only messages published after it was created (early were {early:?})"
    );
    assert_no_message_within(&mut latest, Duration::from_secs(1)).await;

    // EARLIEST (explicit or by default) starts from the beginning of the topic.
    let mut earliest = subscribe(
        &mut client,
        TOPIC,
        "from-start",
        Sub {
            start: pb::StartPosition::Earliest,
            ..Default::default()
        },
    )
    .await;
    let got = expect_messages(&mut earliest, 5).await;
    let all: HashSet<String> = early.iter().chain(&late).cloned().collect();
    assert_eq!(ids_of(&got).into_iter().collect::<HashSet<_>>(), all);

    // `start` is ignored once the subscription exists: re-subscribing "from-now"
    // with EARLIEST does not rewind it to the early messages.
    ack(&mut client, TOPIC, "from-now", ack_ids_of(&got_latest))
        .await
        .expect("ack");
    drop(latest);
    let mut again = subscribe(
        &mut client,
        TOPIC,
        "from-now",
        Sub {
            start: pb::StartPosition::Earliest,
            ..Default::default()
        },
    )
    .await;
    assert_no_message_within(&mut again, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_of_one_subscription_share_messages_without_overlap() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let long = Duration::from_secs(120);
    let opts = |name: &str| Sub::deadline(long).max_outstanding(1000).consumer(name);
    let mut streams = vec![
        subscribe(&mut client, TOPIC, "workers", opts("worker-1")).await,
        subscribe(&mut client, TOPIC, "workers", opts("worker-2")).await,
    ];

    let mut ids = Vec::new();
    for batch in 0..4 {
        ids.extend(publish(&mut client, TOPIC, payloads(&format!("job{batch}"), 50)).await);
    }
    assert_eq!(ids.len(), 200);

    let got = collect_from_all(&mut streams, 200, EVENTUALLY).await;
    let one: Vec<String> = ids_of(&got[0]);
    let two: Vec<String> = ids_of(&got[1]);
    assert_eq!(
        one.len() + two.len(),
        200,
        "all 200 delivered within {EVENTUALLY:?}"
    );

    let set_one: HashSet<&String> = one.iter().collect();
    let set_two: HashSet<&String> = two.iter().collect();
    assert_eq!(set_one.len(), one.len(), "worker-1 got a message twice");
    assert_eq!(set_two.len(), two.len(), "worker-2 got a message twice");
    let both: Vec<_> = set_one.intersection(&set_two).collect();
    assert!(both.is_empty(), "both workers hold {both:?}");
    let union: HashSet<&String> = set_one.union(&set_two).copied().collect();
    assert_eq!(
        union,
        ids.iter().collect::<HashSet<_>>(),
        "union is everything published"
    );
    assert!(got.iter().flatten().all(|m| m.delivery_attempt == 1));

    // Nothing else shows up afterwards (no late duplicates).
    let extra = collect_from_all(&mut streams, 1, Duration::from_secs(1)).await;
    assert!(
        extra.iter().all(Vec::is_empty),
        "unexpected extra deliveries: {extra:?}"
    );
}

/// Many streams of one subscription on one replica: a backlog larger than any
/// one stream may hold reaches all of them (a stream that fills up passes the
/// turn on), each message exactly once; and a new message wakes one idle
/// stream, not every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_split_a_backlog_and_one_message_wakes_one_stream() {
    const STREAMS: usize = 40;
    const HOLDS: u32 = 25;
    let (redis, _server, mut client) = redis_server_and_client().await;

    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        let opts = Sub::deadline(Duration::from_secs(120)).max_outstanding(HOLDS);
        streams.push(subscribe(&mut client, TOPIC, "workers", opts).await);
    }
    let total = STREAMS * HOLDS as usize;
    let mut ids = Vec::new();
    for batch in 0..4 {
        ids.extend(
            publish(
                &mut client,
                TOPIC,
                payloads(&format!("b{batch}-"), total / 4),
            )
            .await,
        );
    }

    // Nothing is acked: only if every stream takes its share can all arrive.
    let got = collect_from_all(&mut streams, total, EVENTUALLY).await;
    let all: Vec<String> = got.iter().flat_map(|s| ids_of(s)).collect();
    assert_eq!(all.len(), total, "every message delivered once");
    assert_eq!(
        all.iter().collect::<HashSet<_>>(),
        ids.iter().collect::<HashSet<_>>()
    );
    assert!(got.iter().all(|s| s.len() == HOLDS as usize));
    for held in &got {
        ack(&mut client, TOPIC, "workers", ack_ids_of(held))
            .await
            .expect("ack");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Now all idle: each message should cost a fetch or two, not one per stream.
    let before = redis.calls_of("xreadgroup");
    const SINGLES: usize = 20;
    for i in 0..SINGLES {
        publish(&mut client, TOPIC, [format!("single-{i}")]).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = collect_from_all(&mut streams, SINGLES, EVENTUALLY).await;
    assert_eq!(got.iter().map(Vec::len).sum::<usize>(), SINGLES);
    let fetches = redis.calls_of("xreadgroup") - before;
    assert!(
        fetches < (SINGLES * STREAMS / 4) as u64,
        "{SINGLES} messages to {STREAMS} idle streams took {fetches} fetches"
    );
}

/// Bursts published while the streams are idle, one entry or several at a
/// time, reach them at once, not at the 5 s safety net.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_reach_idle_streams_before_the_safety_net() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        "bursts",
        Sub::deadline(Duration::from_secs(60)),
    )
    .await;

    for round in 0..24 {
        let n = 1 + (round / 2) % 4;
        if round % 2 == 0 {
            // One batch with dedupe ids: one script call, so that its
            // entries appear all at once.
            let messages = payloads(&format!("r{round}"), n)
                .into_iter()
                .enumerate()
                .map(|(i, payload)| pb::PublishMessage {
                    payload,
                    dedupe_id: format!("r{round}-{i}"),
                    ..Default::default()
                })
                .collect();
            let request = pb::PublishRequest {
                topic: TOPIC.to_string(),
                messages,
                dedupe_id: String::new(),
            };
            client.publish(request).await.expect("publish");
        } else {
            for i in 0..n {
                publish(&mut client, TOPIC, [format!("r{round}-{i}")]).await;
            }
        }
        let got = next_messages(&mut stream, n, Duration::from_secs(2)).await;
        assert_eq!(got.len(), n, "round {round}: {:?}", ids_of(&got));
        ack(&mut client, TOPIC, "bursts", ack_ids_of(&got))
            .await
            .expect("ack");
    }
}

/// A publish wakes the streams of its replica itself: a topic served by one
/// replica costs no Redis call per message to wake them (no `XREAD`, no hint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_served_by_one_replica_wakes_its_streams_without_redis() {
    const ROUNDS: usize = 10;
    let (redis, _server, mut client) = redis_server_and_client().await;
    let mut stream = subscribe(&mut client, TOPIC, "quiet", Sub::default()).await;
    publish(&mut client, TOPIC, ["first"]).await;
    let got = expect_messages(&mut stream, 1).await;
    ack(&mut client, TOPIC, "quiet", ack_ids_of(&got))
        .await
        .expect("ack");
    let before = |command: &str| redis.calls_of(command);
    let (xread, hints, fetches) = (before("xread"), before("publish"), before("xreadgroup"));
    for round in 0..ROUNDS {
        tokio::time::sleep(Duration::from_millis(50)).await;
        publish(&mut client, TOPIC, [format!("m{round}")]).await;
        let got = next_messages(&mut stream, 1, Duration::from_secs(3)).await;
        assert_eq!(payloads_of(&got), [format!("m{round}")], "round {round}");
        ack(&mut client, TOPIC, "quiet", ack_ids_of(&got))
            .await
            .expect("ack");
    }
    let fetches = redis.calls_of("xreadgroup") - fetches;
    println!("{ROUNDS} messages: {fetches} fetches");
    assert_eq!(redis.calls_of("xread") - xread, 0, "XREAD calls");
    assert_eq!(redis.calls_of("publish") - hints, 0, "hints sent");
    assert!(
        fetches <= 2 * ROUNDS as u64,
        "{fetches} fetches for {ROUNDS} messages"
    );
}

/// Connections are spread over `--workers` threads: streams, publishes and
/// acks on connections served by different workers still meet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_on_different_workers_share_topics() {
    const WORKERS: usize = 3;
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &["--workers", &WORKERS.to_string()]).await;
    // A thread names itself once it runs, so the count may take a moment.
    let worker_threads = || {
        std::fs::read_dir(format!("/proc/{}/task", server.pid()))
            .expect("server threads")
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|name| name.starts_with("redq-worker-"))
            .count()
    };
    let deadline = std::time::Instant::now() + EVENTUALLY;
    while worker_threads() < WORKERS && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(worker_threads(), WORKERS, "worker threads");

    // One connection each, assigned to the workers in turn.
    let mut clients = Vec::new();
    for _ in 0..WORKERS + 1 {
        clients.push(server.client().await);
    }
    let mut stream = subscribe(
        &mut clients[0],
        TOPIC,
        "spread",
        Sub::deadline(Duration::from_secs(60)).max_outstanding(10),
    )
    .await;
    let mut sent = Vec::new();
    for (i, client) in clients.iter_mut().enumerate().skip(1) {
        sent.extend(publish(client, TOPIC, payloads(&format!("c{i}"), 10)).await);
    }

    // The stream holds at most 10: only acks sent through the other
    // workers' connections make room for the rest.
    let mut received = Vec::new();
    while received.len() < sent.len() {
        let got = expect_messages(&mut stream, 1).await;
        let acker = 1 + received.len() % WORKERS;
        ack(&mut clients[acker], TOPIC, "spread", ack_ids_of(&got))
            .await
            .expect("ack");
        received.extend(ids_of(&got));
    }
    received.sort();
    sent.sort();
    assert_eq!(received, sent, "every message once");
}
