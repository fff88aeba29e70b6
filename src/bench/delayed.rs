//! `redq bench delayed`: how late scheduled messages arrive.
//!
//! Two workloads on a fresh topic: N messages all due at one instant T, and N
//! due uniformly over a spread. A subscriber records when each message
//! arrives; lateness is arrival minus the message's due time (`deliver_at`,
//! set by the server from Redis' clock, which is this machine's clock when
//! the benchmark runs beside the server).

use super::{Client, Percentiles, ack, fresh_topic, publish, subscribe};
use crate::cli::progress_bar;
use crate::config::BenchArgs;
use crate::error::BoxError;
use crate::pb;
use bytes::Bytes;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// Messages per Publish call while scheduling.
const BATCH: usize = 1000;
/// Parallel Subscribe streams of the one subscription.
const SUBSCRIBERS: usize = 4;

/// Lateness of one workload, for `--json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Lateness {
    pub workload: String,
    pub messages: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub last_after_last_due_ms: f64,
}

pub async fn run(client: Client, args: &BenchArgs) -> Result<Vec<Lateness>, BoxError> {
    println!(
        "redq bench delayed: {} messages of {} B, server {}",
        args.count, args.payload_size, args.server
    );
    let instant = workload(&client, args, Duration::ZERO).await?;
    let spread = workload(&client, args, args.spread).await?;
    println!();
    println!("| workload | messages | lateness p50 | p99 | max | last arrival after last due |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut results = Vec::new();
    for (name, result) in [
        ("all due at one instant".to_owned(), instant),
        (
            format!("due over {}", humantime::format_duration(args.spread)),
            spread,
        ),
    ] {
        println!(
            "| {name} | {} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms |",
            result.received,
            result.lateness.p50,
            result.lateness.p99,
            result.lateness.max,
            result.last_ms
        );
        results.push(Lateness {
            workload: name,
            messages: result.received,
            p50_ms: result.lateness.p50,
            p99_ms: result.lateness.p99,
            max_ms: result.lateness.max,
            last_after_last_due_ms: result.last_ms,
        });
    }
    Ok(results)
}

struct Outcome {
    received: usize,
    lateness: Percentiles,
    /// Last arrival minus the latest due time, in ms.
    last_ms: f64,
}

/// Schedules `args.count` messages due from `lead` ahead over `spread` (all at
/// once when zero), and waits for every one.
async fn workload(
    client: &Client,
    args: &BenchArgs,
    spread: Duration,
) -> Result<Outcome, BoxError> {
    let topic = fresh_topic("delayed");
    let (arrivals, mut arrived) = mpsc::unbounded_channel();
    for _ in 0..SUBSCRIBERS {
        spawn_subscriber(client.clone(), topic.clone(), arrivals.clone()).await?;
    }
    drop(arrivals);

    let lead = args.lead;
    let first_due = now_ms() + lead.as_millis() as u64;
    let count = args.count as u64;
    let step = spread.as_millis() as u64;
    let due_of = |i: u64| first_due + if count > 1 { step * i / (count - 1) } else { 0 };
    let payload = Bytes::from(vec![b'x'; args.payload_size]);
    let scheduling = std::time::Instant::now();
    for start in (0..count).step_by(BATCH) {
        let messages = (start..(start + BATCH as u64).min(count))
            .map(|i| pb::PublishMessage {
                payload: payload.clone(),
                deliver_at: Some(timestamp(due_of(i))),
                ..Default::default()
            })
            .collect();
        publish(client, &topic, messages).await?;
    }
    let scheduled_in = scheduling.elapsed();
    if scheduled_in >= lead {
        return Err(format!(
            "scheduling took {scheduled_in:?}, longer than --lead {lead:?}: raise --lead"
        )
        .into());
    }
    println!(
        "  {} messages due from T = now + {} over {}: scheduled in {:.0} ms",
        count,
        humantime::format_duration(lead),
        humantime::format_duration(spread),
        scheduled_in.as_secs_f64() * 1000.0
    );

    let bar = progress_bar(args.count as u64, "delayed");
    let mut lateness = Vec::with_capacity(args.count);
    let mut last_arrival = 0;
    let deadline = tokio::time::Instant::now() + lead + spread + args.timeout;
    while lateness.len() < args.count {
        let arrival = tokio::time::timeout_at(deadline, arrived.recv()).await;
        let Ok(Some((arrived_ms, due_ms))) = arrival else {
            return Err(format!(
                "only {} of {} messages arrived in time",
                lateness.len(),
                args.count
            )
            .into());
        };
        lateness.push(Duration::from_micros(arrived_ms.saturating_sub(due_ms)));
        bar.inc(1);
        last_arrival = last_arrival.max(arrived_ms);
    }
    bar.finish_and_clear();
    let last_due_us = due_of(count - 1) * 1000;
    Ok(Outcome {
        received: lateness.len(),
        lateness: Percentiles::of(&mut lateness).ok_or("no samples")?,
        last_ms: last_arrival.saturating_sub(last_due_us) as f64 / 1000.0,
    })
}

/// Opens one Subscribe stream; reports (arrival µs, due µs) of each message and acks it.
async fn spawn_subscriber(
    client: Client,
    topic: String,
    arrivals: mpsc::UnboundedSender<(u64, u64)>,
) -> Result<(), BoxError> {
    let mut stream = subscribe(&client, &topic, 5000, false).await?;
    tokio::spawn(async move {
        while let Ok(Some(response)) = stream.message().await {
            let arrived = now_us();
            let mut ack_ids = Vec::with_capacity(response.messages.len());
            for received in response.messages {
                let due = received
                    .message
                    .and_then(|m| m.deliver_at)
                    .map_or(0, |t| t.seconds as u64 * 1_000_000 + t.nanos as u64 / 1000);
                let _ = arrivals.send((arrived, due));
                ack_ids.push(received.ack_id);
            }
            let (client, topic) = (client.clone(), topic.clone());
            tokio::spawn(async move { ack(client, &topic, ack_ids).await });
        }
    });
    Ok(())
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as u64
}

fn now_ms() -> u64 {
    now_us() / 1000
}

fn timestamp(ms: u64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}
