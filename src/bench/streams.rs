//! `redq bench streams`: the scaling check. Many Subscribe streams on one
//! replica (10 topics × 100 streams of one subscription each) under a steady
//! publish load: the Redis connections they cost, the server's memory, and
//! delivery latency beside the same load delivered to one stream per topic.

use super::{Client, Percentiles, ack, fresh_topic, publish_steadily, since_stamp, subscribe};
use crate::cli::{self, progress_bar};
use crate::config::BenchArgs;
use crate::error::BoxError;
use crate::pb;
use crate::store::connection::Connection;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Messages per second over all topics, spread evenly.
const RATE: u64 = 2000;
/// How long each load runs.
const LOAD_FOR: Duration = Duration::from_secs(10);

/// What one load measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Load {
    pub topics: usize,
    pub streams: usize,
    pub messages: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Redis clients connected while the streams were open, minus before.
    pub redis_connections_opened: i64,
    /// Redis clients connected while the streams were open, less this
    /// benchmark's own: the server's, on a Redis of its own.
    pub redis_connections: i64,
    /// Server resident memory while the streams were open.
    pub server_rss_bytes: Option<i64>,
}

/// Runs the load with one stream per topic, then with `per_topic` streams per
/// topic; returns both.
pub async fn run(args: &BenchArgs, redis: &Connection) -> Result<(Load, Load), BoxError> {
    let (topics, per_topic, load_for) = if args.quick {
        (2, 10, Duration::from_secs(1))
    } else {
        (10, 100, LOAD_FOR)
    };
    let base = connected_clients(redis).await?;
    let few = load(args, redis, topics, 1, load_for).await?;
    // Let the server close the first load's watchers, whose connections end
    // once their blocking read returns (at most 5 s).
    let settle = Instant::now() + Duration::from_secs(10);
    while connected_clients(redis).await? > base && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let many = load(args, redis, topics, per_topic, load_for).await?;
    Ok((few, many))
}

async fn load(
    args: &BenchArgs,
    redis: &Connection,
    topics: usize,
    per_topic: usize,
    load_for: Duration,
) -> Result<Load, BoxError> {
    let before = connected_clients(redis).await?;
    let epoch = Instant::now();
    let (arrivals, mut arrived) = mpsc::unbounded_channel::<Duration>();
    let mut names = Vec::new();
    let mut publishers = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..topics {
        let topic = fresh_topic("streams");
        // A connection per topic: HTTP/2 servers cap the streams of one
        // connection (often at 100 to 200), and real subscribers are many processes.
        let client = cli::queue_client(cli::connect(&args.server, &args.tls).await?);
        for _ in 0..per_topic {
            let stream = subscribe(&client, &topic, 0, false).await?;
            receivers.push(tokio::spawn(receive(
                stream,
                client.clone(),
                topic.clone(),
                epoch,
                arrivals.clone(),
            )));
        }
        publishers.push(client);
        names.push(topic);
    }
    drop(arrivals);
    // Let every stream make its first fetch before the load starts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let connected = connected_clients(redis).await?;
    let opened = connected - before;

    let per_topic_rate = (RATE / topics as u64).max(1);
    let per_topic_count = (per_topic_rate as f64 * load_for.as_secs_f64()) as usize;
    let total = per_topic_count * topics;
    let sending: Vec<_> = names
        .iter()
        .zip(publishers)
        .map(|(topic, client)| {
            let size = args.payload_size;
            publish_steadily(
                client,
                topic.clone(),
                per_topic_rate,
                per_topic_count,
                epoch,
                size,
            )
        })
        .collect();

    let bar = progress_bar(total as u64, &format!("streams: {}", topics * per_topic));
    let mut latencies = Vec::with_capacity(total);
    let deadline = tokio::time::Instant::now() + load_for + args.timeout;
    let mut rss = None;
    while latencies.len() < total {
        match tokio::time::timeout_at(deadline, arrived.recv()).await {
            Ok(Some(latency)) => {
                latencies.push(latency);
                bar.inc(1);
            }
            _ => {
                return Err(format!(
                    "streams: only {} of {total} messages arrived",
                    latencies.len()
                )
                .into());
            }
        }
        if rss.is_none() && latencies.len() >= total / 2 {
            rss = server_rss(&args.metrics_url).await;
        }
    }
    for publisher in sending {
        publisher.await??;
    }
    bar.finish_and_clear();
    // Ends the streams (and the server's watchers with them).
    for receiver in receivers {
        receiver.abort();
    }
    let p = Percentiles::of(&mut latencies).ok_or("streams: no samples")?;
    Ok(Load {
        topics,
        streams: topics * per_topic,
        messages: total,
        p50_ms: p.p50,
        p99_ms: p.p99,
        max_ms: p.max,
        redis_connections_opened: opened,
        redis_connections: connected - 1,
        server_rss_bytes: rss,
    })
}

/// Reads one stream, reporting each message's latency, and acks what it got.
async fn receive(
    mut stream: tonic::Streaming<pb::SubscribeResponse>,
    client: Client,
    topic: String,
    epoch: Instant,
    arrivals: mpsc::UnboundedSender<Duration>,
) {
    while let Ok(Some(response)) = stream.message().await {
        let mut ack_ids = Vec::with_capacity(response.messages.len());
        for received in response.messages {
            let payload = received.message.map(|m| m.payload).unwrap_or_default();
            if let Some(latency) = since_stamp(epoch, &payload) {
                let _ = arrivals.send(latency);
            }
            ack_ids.push(received.ack_id);
        }
        if ack(client.clone(), &topic, ack_ids).await.is_err() {
            break;
        }
    }
}

/// Clients connected to Redis (to all masters of a cluster).
async fn connected_clients(redis: &Connection) -> Result<i64, BoxError> {
    let mut clients = 0;
    for info in redis
        .clone()
        .on_every_master(redis::cmd("INFO").arg("clients"))
        .await?
    {
        let info: String = redis::from_redis_value(info).map_err(|_| "INFO clients is not text")?;
        clients += info
            .lines()
            .find_map(|l| {
                l.strip_prefix("connected_clients:")?
                    .trim()
                    .parse::<i64>()
                    .ok()
            })
            .ok_or("no connected_clients in INFO clients")?;
    }
    Ok(clients)
}

/// The server's `process_resident_memory_bytes`, scraped from its /metrics;
/// None when the endpoint cannot be read.
async fn server_rss(metrics_url: &str) -> Option<i64> {
    let client =
        HttpClient::builder(TokioExecutor::new()).build_http::<http_body_util::Empty<Bytes>>();
    let response = tokio::time::timeout(
        Duration::from_secs(5),
        client.get(metrics_url.parse().ok()?),
    )
    .await
    .ok()?
    .ok()?;
    let body = response.into_body().collect().await.ok()?.to_bytes();
    std::str::from_utf8(&body).ok()?.lines().find_map(|line| {
        let value = line.strip_prefix("process_resident_memory_bytes ")?;
        value.trim().parse::<f64>().ok().map(|v| v as i64)
    })
}

/// Prints the scaling table: the same load on few and on many streams.
pub fn print(few: &Load, many: &Load) {
    let mb = |b: Option<i64>| {
        b.map_or("—".to_owned(), |b| {
            format!("{:.1} MiB", b as f64 / 1048576.0)
        })
    };
    println!();
    println!(
        "| streams | topics | messages | delivery p50 | p99 | max | Redis connections: opened by the streams / in all | server RSS |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for load in [few, many] {
        println!(
            "| {} | {} | {} | {:.2} ms | {:.2} ms | {:.2} ms | {} / {} | {} |",
            load.streams,
            load.topics,
            load.messages,
            load.p50_ms,
            load.p99_ms,
            load.max_ms,
            load.redis_connections_opened,
            load.redis_connections,
            mb(load.server_rss_bytes)
        );
    }
    println!(
        "{} streams ÷ {} streams: p50 {:.2}, p99 {:.2}",
        many.streams,
        few.streams,
        many.p50_ms / few.p50_ms,
        many.p99_ms / few.p99_ms
    );
}
