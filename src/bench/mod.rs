//! `redq bench`: load generators that talk gRPC to a running server and print
//! what they measured. Benchmarks, not tests: they assert nothing.

mod delayed;
mod ephemeral;
mod list;
mod ordered;
mod streams;
mod throughput;

use crate::cli;
use crate::cli::ClientChannel;
use crate::config::{BenchArgs, BenchScenario};
use crate::error::BoxError;
use crate::pb;
use crate::pb::queue_service_client::QueueServiceClient;
use bytes::Bytes;
use std::time::{Duration, Instant};
use throughput::Row;

type Client = QueueServiceClient<ClientChannel>;

/// The subscription every workload reads through.
const SUBSCRIPTION: &str = "bench";

pub async fn run(mut args: BenchArgs) -> Result<(), BoxError> {
    if args.quick {
        args.count = args.count.min(1000);
        args.spread = args.spread.min(Duration::from_secs(1));
    }
    let client = cli::queue_client(cli::connect(&args.server, &args.tls).await?);
    // Any topology; the URL is not printed in errors (it may hold a password).
    let conn = crate::store::connection::connect(args.redis.redis_url.expose())
        .await
        .map_err(|e| format!("cannot reach Redis (--redis-url): {e}"))?;
    let scenario = args.scenario;
    let wants = |s: BenchScenario| scenario == s || scenario == BenchScenario::All;
    println!(
        "redq bench: {} messages of {} B per workload, server {}, redis {}",
        args.count,
        args.payload_size,
        args.server,
        args.redis.redis_url.expose()
    );
    let mut rows: Vec<(Row, Option<Row>)> = Vec::new();
    if wants(BenchScenario::PublishBatch) {
        let redq = throughput::publish_batch(&client, &args).await?;
        rows.push((
            redq,
            Some(throughput::raw_publish_batch(&conn, &args).await?),
        ));
    }
    if wants(BenchScenario::PublishUnary) {
        let redq = throughput::publish_unary(&client, &args).await?;
        rows.push((redq, Some(throughput::raw_publish_unary(&args).await?)));
    }
    if wants(BenchScenario::Consume) {
        rows.push((throughput::consume(&client, &args).await?, None));
    }
    if wants(BenchScenario::E2e) {
        let redq = throughput::end_to_end(&client, &args).await?;
        rows.push((redq, Some(throughput::raw_round_trip(&conn, &args).await?)));
    }
    if wants(BenchScenario::List) {
        let (redq, raw) = list::run(&client, &conn, &args).await?;
        rows.push((redq, Some(raw)));
    }
    if wants(BenchScenario::Memory) {
        let mut memory = throughput::memory(&client, &conn, &args).await?;
        let raw = memory.pop();
        rows.extend(memory.into_iter().map(|row| (row, raw.clone())));
    }
    if !rows.is_empty() {
        print_table(&rows);
    }
    let scaling = if wants(BenchScenario::Streams) {
        let (few, many) = streams::run(&args, &conn).await?;
        streams::print(&few, &many);
        Some((few, many))
    } else {
        None
    };
    let ordering = if wants(BenchScenario::Ordered) {
        let (rows, memory) = ordered::run(&client, &conn, &args).await?;
        ordered::print(&rows, &memory);
        Some((rows, memory))
    } else {
        None
    };
    let fan_out = if wants(BenchScenario::Ephemeral) {
        let rows = ephemeral::run(&args).await?;
        ephemeral::print(&rows);
        Some(rows)
    } else {
        None
    };
    let lateness = if wants(BenchScenario::Delayed) {
        Some(delayed::run(client, &args).await?)
    } else {
        None
    };
    if let Some(path) = &args.json {
        let mut json: Vec<_> = rows
            .iter()
            .map(|(redq, raw)| serde_json::json!({ "redq": redq, "raw": raw }))
            .collect();
        if let Some((few, many)) = &scaling {
            json.push(serde_json::json!({ "streams": [few, many] }));
        }
        if let Some((rows, memory)) = &ordering {
            json.push(serde_json::json!({ "ordered": rows, "ordering_memory": memory }));
        }
        if let Some(rows) = &fan_out {
            json.push(serde_json::json!({ "ephemeral": rows }));
        }
        if let Some(lateness) = &lateness {
            json.push(serde_json::json!({ "delayed": lateness }));
        }
        std::fs::write(path, serde_json::to_string_pretty(&json)?)?;
    }
    Ok(())
}

fn print_table(rows: &[(Row, Option<Row>)]) {
    let ms = |v: Option<f64>| v.map_or("—".to_owned(), |v| format!("{v:.2} ms"));
    println!();
    println!(
        "| workload | messages | msg/s | p50 | p99 | max | B/msg | raw Redis baseline | redq ÷ raw |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|---:|");
    for (redq, raw) in rows {
        let (baseline, ratio) = match raw {
            Some(raw) if redq.bytes_per_message.is_some() => (
                format!(
                    "{}: {:.0} B/msg",
                    raw.workload,
                    raw.bytes_per_message.unwrap_or(0.0)
                ),
                format!(
                    "{:.2}",
                    redq.bytes_per_message.unwrap_or(0.0) / raw.bytes_per_message.unwrap_or(1.0)
                ),
            ),
            Some(raw) if redq.p50_ms.is_some() && raw.workload.contains("PING") => (
                format!("{}: p50 {}", raw.workload, ms(raw.p50_ms)),
                format!(
                    "{:.1} (p50)",
                    redq.p50_ms.unwrap_or(0.0) / raw.p50_ms.unwrap_or(1.0)
                ),
            ),
            Some(raw) => (
                format!("{}: {:.0} msg/s", raw.workload, raw.per_second),
                format!("{:.2}", redq.per_second / raw.per_second),
            ),
            None => ("—".to_owned(), "—".to_owned()),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            redq.workload,
            redq.messages,
            if redq.per_second > 0.0 {
                format!("{:.0}", redq.per_second)
            } else {
                "—".into()
            },
            ms(redq.p50_ms),
            ms(redq.p99_ms),
            ms(redq.max_ms),
            redq.bytes_per_message
                .map_or("—".into(), |b| format!("{b:.0}")),
            baseline,
            ratio
        );
    }
}

/// Opens a Subscribe stream of [`SUBSCRIPTION`] with a 60 s ack deadline;
/// `max_outstanding` 0 takes the server's default; `ordered` creates the
/// subscription ordered per ordering key.
async fn subscribe(
    client: &Client,
    topic: &str,
    max_outstanding: u32,
    ordered: bool,
) -> Result<tonic::Streaming<pb::SubscribeResponse>, BoxError> {
    Ok(client
        .clone()
        .subscribe(pb::SubscribeRequest {
            topic: topic.to_owned(),
            subscription: SUBSCRIPTION.into(),
            max_outstanding_messages: max_outstanding,
            ack_deadline: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
            enable_message_ordering: ordered,
            ..Default::default()
        })
        .await?
        .into_inner())
}

/// Acknowledges deliveries of [`SUBSCRIPTION`].
async fn ack(mut client: Client, topic: &str, ack_ids: Vec<String>) -> Result<(), tonic::Status> {
    client
        .ack(pb::AckRequest {
            topic: topic.to_owned(),
            subscription: SUBSCRIPTION.into(),
            ack_ids,
        })
        .await?;
    Ok(())
}

/// One Publish call of `messages` to `topic`.
async fn publish(
    client: &Client,
    topic: &str,
    messages: Vec<pb::PublishMessage>,
) -> Result<(), tonic::Status> {
    client
        .clone()
        .publish(pb::PublishRequest {
            topic: topic.to_owned(),
            messages,
            dedupe_id: String::new(),
        })
        .await?;
    Ok(())
}

/// A payload of `size` bytes (at least 8) whose first 8 carry the time since
/// `epoch` it was made, so a latency needs no table shared with the sender.
fn stamped_payload(epoch: Instant, size: usize) -> Bytes {
    let mut payload = vec![b'x'; size.max(8)];
    let sent = epoch.elapsed().as_micros() as u64;
    payload[..8].copy_from_slice(&sent.to_le_bytes());
    Bytes::from(payload)
}

/// Time from the making of a [`stamped_payload`] to now; None for another payload.
fn since_stamp(epoch: Instant, payload: &[u8]) -> Option<Duration> {
    let sent = u64::from_le_bytes(payload.get(..8)?.try_into().ok()?);
    let now = epoch.elapsed().as_micros() as u64;
    Some(Duration::from_micros(now.saturating_sub(sent)))
}

/// Publishes `count` stamped messages to `topic`, one per call, `per_second`
/// of them a second.
fn publish_steadily(
    mut client: Client,
    topic: String,
    per_second: u64,
    count: usize,
    epoch: Instant,
    size: usize,
) -> tokio::task::JoinHandle<Result<(), tonic::Status>> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / per_second.max(1)));
        for _ in 0..count {
            tick.tick().await;
            client
                .publish(pb::PublishRequest {
                    topic: topic.clone(),
                    messages: vec![pb::PublishMessage {
                        payload: stamped_payload(epoch, size),
                        ..Default::default()
                    }],
                    dedupe_id: String::new(),
                })
                .await?;
        }
        Ok(())
    })
}

/// A topic name no earlier run used, so each run starts from a clean topic.
fn fresh_topic(scenario: &str) -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("bench-{scenario}-{}", &suffix[..8])
}

/// Latency figures of one run, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Percentiles {
    p50: f64,
    p99: f64,
    max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles; None for no samples.
    fn of(samples: &mut [Duration]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let at = |q: f64| {
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            samples[rank - 1].as_secs_f64() * 1000.0
        };
        Some(Self {
            p50: at(0.50),
            p99: at(0.99),
            max: at(1.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let p = Percentiles::of(&mut samples).unwrap();
        assert_eq!((p.p50, p.p99, p.max), (50.0, 99.0, 100.0));
        assert_eq!(Percentiles::of(&mut []), None);
    }
}
