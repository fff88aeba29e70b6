//! `redq bench ordered`: consume + ack a backlog through an ordered
//! subscription with 1,000 ordering keys and with 10, beside an unordered
//! subscription on the same workload; and the Redis memory the ordering
//! state takes per active key and per blocked entry (`MEMORY USAGE`).

use super::throughput::{CONSUMERS, Row, drain};
use super::{Client, SUBSCRIPTION, fresh_topic, publish, subscribe};
use crate::config::BenchArgs;
use crate::error::BoxError;
use crate::pb;
use crate::store::TopicKeys;
use crate::store::connection::Connection;
use bytes::Bytes;
use std::time::{Duration, Instant};

/// Deliveries a stream may hold.
const MAX_OUTSTANDING: u32 = 2000;

/// Memory of the ordering state, per active key and per blocked entry.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OrderingMemory {
    pub keys: usize,
    pub blocked: u64,
    pub bytes_per_active_key: f64,
    pub bytes_per_blocked_entry: f64,
}

/// The consume runs (unordered, ordered with 1,000 keys, ordered with 10
/// keys) and the memory figures.
pub async fn run(
    client: &Client,
    conn: &Connection,
    args: &BenchArgs,
) -> Result<(Vec<Row>, OrderingMemory), BoxError> {
    let mut rows = Vec::new();
    for (ordered, keys) in [(false, 1000), (true, 1000), (true, 10)] {
        rows.push(consume(client, args, ordered, keys).await?);
    }
    // A tenth of the backlog as keys (at most 1,000): most entries blocked.
    let memory = memory(client, conn, args, (args.count / 10).clamp(1, 1000)).await?;
    Ok((rows, memory))
}

pub fn print(rows: &[Row], memory: &OrderingMemory) {
    let unordered = rows.first().map_or(1.0, |r| r.per_second);
    println!();
    println!("| workload | messages | msg/s | ÷ unordered |");
    println!("|---|---:|---:|---:|");
    for row in rows {
        println!(
            "| {} | {} | {:.0} | {:.2} |",
            row.workload,
            row.messages,
            row.per_second,
            row.per_second / unordered
        );
    }
    println!();
    println!(
        "ordering state with {} keys and {} blocked entries: {:.0} B per active key, {:.0} B per blocked entry",
        memory.keys, memory.blocked, memory.bytes_per_active_key, memory.bytes_per_blocked_entry
    );
}

/// Publishes `count` messages whose ordering keys go round `keys` keys.
async fn publish_keyed(
    client: &Client,
    topic: &str,
    args: &BenchArgs,
    keys: usize,
) -> Result<(), BoxError> {
    let payload = Bytes::from(vec![b'x'; args.payload_size]);
    let mut sent = 0;
    while sent < args.count {
        let n = 1000.min(args.count - sent);
        let messages = (sent..sent + n)
            .map(|i| pb::PublishMessage {
                payload: payload.clone(),
                ordering_key: format!("key-{}", i % keys),
                ..Default::default()
            })
            .collect();
        publish(client, topic, messages).await?;
        sent += n;
    }
    Ok(())
}

/// Consume + ack a backlog of `args.count` keyed messages with
/// [`CONSUMERS`] streams (see [`drain`]).
async fn consume(
    client: &Client,
    args: &BenchArgs,
    ordered: bool,
    keys: usize,
) -> Result<Row, BoxError> {
    let topic = fresh_topic("ordered");
    // The subscription exists before the backlog, so it reads all of it.
    drop(subscribe(client, &topic, MAX_OUTSTANDING, ordered).await?);
    publish_keyed(client, &topic, args, keys).await?;
    let mut streams = Vec::new();
    for _ in 0..CONSUMERS {
        streams.push(subscribe(client, &topic, MAX_OUTSTANDING, ordered).await?);
    }
    let what = if ordered {
        format!("redq consume + ack, ordered, {keys} keys")
    } else {
        format!("redq consume + ack, unordered, {keys} keys")
    };
    let started = Instant::now();
    drain(client, &topic, streams, args, &what).await?;
    Ok(Row::new(&what, args.count, started.elapsed(), &mut []))
}

/// A backlog of `keys` keys read by a stream that acks nothing: every key
/// held, the rest blocked; then `MEMORY USAGE` of the lock state.
async fn memory(
    client: &Client,
    conn: &Connection,
    args: &BenchArgs,
    keys: usize,
) -> Result<OrderingMemory, BoxError> {
    let topic = fresh_topic("ordered-memory");
    let topic_keys = TopicKeys::new(&topic);
    let stream = subscribe(client, &topic, MAX_OUTSTANDING, true).await?;
    publish_keyed(client, &topic, args, keys).await?;
    let mut conn = conn.clone();
    let want = args.count.saturating_sub(keys) as u64;
    let deadline = tokio::time::Instant::now() + args.timeout + Duration::from_secs(60);
    let blocked = loop {
        let blocked: u64 = redis::cmd("ZCARD")
            .arg(topic_keys.blocked(SUBSCRIPTION))
            .query_async(&mut conn)
            .await?;
        if blocked >= want {
            break blocked;
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("ordered memory: only {blocked} of {want} entries blocked").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let usage = |key: String| {
        let mut conn = conn.clone();
        async move {
            let bytes: Option<u64> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(key)
                .arg("SAMPLES")
                .arg(0)
                .query_async(&mut conn)
                .await?;
            Ok::<_, redis::RedisError>(bytes.unwrap_or(0) as f64)
        }
    };
    let held = usage(topic_keys.key_holders(SUBSCRIPTION)).await?
        + usage(topic_keys.held_keys(SUBSCRIPTION)).await?;
    let blocked_bytes = usage(topic_keys.blocked(SUBSCRIPTION)).await?;
    drop(stream);
    Ok(OrderingMemory {
        keys,
        blocked,
        bytes_per_active_key: held / keys as f64,
        bytes_per_blocked_entry: blocked_bytes / blocked.max(1) as f64,
    })
}
