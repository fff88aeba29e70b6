//! What Subscribe streams hold in the server is bounded by bytes, not only by
//! message count: clients that do not read cannot grow a replica past its
//! budgets (`max_outstanding_bytes` per stream, `--subscribe-buffer-bytes` in
//! all). Prints the server's resident memory; asserts only the documented
//! bound, never a time.

#![allow(clippy::needless_update)]

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use redq::pb;

const MIB: u64 = 1024 * 1024;
/// A 1 GiB backlog of 1 MiB messages (three per Publish).
const MESSAGES: usize = 1023;
const PAYLOAD: usize = 1024 * 1024 - 512;
const STREAMS: usize = 10;
/// The README's bound for this case: 10 streams at the default 10 MiB each,
/// and what the process needs besides.
const RSS_BOUND_MIB: u64 = 400;

fn rss_mib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib / 1024
}

#[tokio::test]
async fn streams_whose_clients_do_not_read_stay_within_their_byte_budget() {
    let (_redis, server, mut client) = redis_server_and_client().await;
    let payload = Bytes::from(vec![b'x'; PAYLOAD]);
    // Three per call: gRPC clients refuse messages over 4 MiB by default.
    for _ in 0..MESSAGES / 3 {
        let messages = (0..3).map(|_| message(payload.clone())).collect();
        publish_messages(&mut client, "big", messages).await;
    }
    let before = rss_mib(server.pid());

    // Ten streams, each on its own connection, whose clients never read.
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        let mut reader = pb::queue_service_client::QueueServiceClient::new(server.channel().await);
        let stream = reader
            .subscribe(Sub::deadline(Duration::from_secs(600)).request("big", "slow"))
            .await
            .expect("subscribe")
            .into_inner();
        streams.push((reader, stream));
    }
    // Wait until the streams stop taking deliveries (bounded, not timed).
    let mut admin = server.admin().await;
    let mut last = u64::MAX;
    let started = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = pending_of(&mut admin, "big", "slow").await;
        if now == last || started.elapsed() > EVENTUALLY {
            break;
        }
        last = now;
    }
    let held = rss_mib(server.pid());
    let delivered = pending_of(&mut admin, "big", "slow").await;
    println!(
        "stream_memory: {STREAMS} non-reading streams on a {} MiB backlog of 1 MiB messages: \
         server RSS {before} MiB before, {held} MiB while they hold {delivered} deliveries",
        MESSAGES as u64 * PAYLOAD as u64 / MIB
    );
    assert!(
        held < RSS_BOUND_MIB,
        "RSS {held} MiB over the documented {RSS_BOUND_MIB} MiB ({delivered} delivered)"
    );
    // Each stream takes about its 10 MiB budget (plus what its client's HTTP/2
    // window took in), not its 100 outstanding messages.
    assert!(
        delivered <= (STREAMS as u64) * 30,
        "{delivered} delivered to streams that do not read"
    );

    // A stream that reads gets the rest, its memory bounded the same way.
    drop(streams);
    let mut reader = subscribe(&mut client, "big", "fast", Sub::default()).await;
    let mut received = 0;
    let mut peak = 0;
    while received < MESSAGES {
        let got = next_messages(&mut reader, 1, EVENTUALLY).await;
        assert!(!got.is_empty(), "stalled after {received} messages");
        received += got.len();
        peak = peak.max(rss_mib(server.pid()));
        ack(&mut client, "big", "fast", ack_ids_of(&got))
            .await
            .unwrap();
    }
    println!(
        "stream_memory: one reading stream took all {received}: server RSS peaked at {peak} MiB"
    );
    assert!(peak < RSS_BOUND_MIB, "RSS peaked at {peak} MiB");
}

#[tokio::test]
async fn deliveries_a_client_never_got_are_given_back_when_it_leaves() {
    let (_redis, server, mut client) = redis_server_and_client().await;
    // Large enough that a client that does not read leaves most of them in
    // the server's buffers (HTTP/2 windows take the first few).
    let payload = Bytes::from(vec![b'y'; 900 * 1024]);
    for _ in 0..4 {
        let messages = (0..3).map(|_| message(payload.clone())).collect();
        publish_messages(&mut client, "left", messages).await;
    }
    let mut reader = pb::queue_service_client::QueueServiceClient::new(server.channel().await);
    let stream = reader
        .subscribe(Sub::deadline(Duration::from_secs(600)).request("left", "s"))
        .await
        .expect("subscribe")
        .into_inner();
    // Let it fetch, then leave without reading.
    let mut admin = server.admin().await;
    let started = tokio::time::Instant::now();
    while pending_of(&mut admin, "left", "s").await == 0 && started.elapsed() < EVENTUALLY {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(stream);
    drop(reader);
    // Another stream gets what never reached the first one at once, as a
    // first attempt, not after the first stream's 10-minute deadline.
    let mut other = subscribe(&mut client, "left", "s", Sub::default()).await;
    let got = next_messages(&mut other, 1, Duration::from_secs(10)).await;
    assert!(
        !got.is_empty(),
        "nothing given back by the stream that left"
    );
    assert!(
        got.iter().all(|m| m.delivery_attempt == 1),
        "given back as the same attempt"
    );
}

async fn pending_of(admin: &mut Admin, topic: &str, subscription: &str) -> u64 {
    admin
        .get_subscription(pb::GetSubscriptionRequest {
            topic: topic.into(),
            name: subscription.into(),
        })
        .await
        .expect("GetSubscription")
        .into_inner()
        .stats
        .expect("stats")
        .pending
}
