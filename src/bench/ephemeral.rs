//! `redq bench ephemeral`: live fan-out of an EPHEMERAL topic to 100 and to
//! 1,000 Subscribe streams on one replica at 10,000 messages/s — deliveries
//! per second, latency, drops — beside the same fan-out on raw Redis
//! `PUBLISH`/`SUBSCRIBE` (one subscriber connection per stream), measured
//! in the same run.

use super::{Percentiles, fresh_topic, since_stamp, stamped_payload};
use crate::cli;
use crate::config::BenchArgs;
use crate::error::BoxError;
use crate::pb;
use futures::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Messages published per second.
const RATE: u64 = 10_000;
/// Messages per Publish call (and per raw pipeline): 100 every 10 ms.
const BATCH: usize = 100;
/// Streams per gRPC connection, as a client library would spread them.
const STREAMS_PER_CONNECTION: usize = 100;
/// One latency sample in this many deliveries, to bound the bench's memory.
const SAMPLE_EVERY: u64 = 10;
/// How long readers wait for stragglers once publishing ended.
const DRAIN: Duration = Duration::from_secs(5);

/// What one fan-out measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FanOut {
    pub workload: String,
    pub streams: usize,
    pub published: u64,
    /// Deliveries over all streams.
    pub delivered: u64,
    /// Messages the streams were told they lost (redq), or that never came (raw).
    pub dropped: u64,
    pub delivered_per_second: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// Both sizes, redq beside raw Redis.
pub async fn run(args: &BenchArgs) -> Result<Vec<(FanOut, Option<FanOut>)>, BoxError> {
    let sizes: &[usize] = if args.quick { &[10, 100] } else { &[100, 1000] };
    let mut rows = Vec::new();
    for &streams in sizes {
        let redq = redq_fan_out(args, streams).await?;
        let raw = match raw_fan_out(args, streams).await {
            Ok(raw) => Some(raw),
            Err(err) => {
                eprintln!("raw PUBLISH/SUBSCRIBE baseline skipped: {err}");
                None
            }
        };
        rows.push((redq, raw));
    }
    Ok(rows)
}

pub fn print(rows: &[(FanOut, Option<FanOut>)]) {
    let ms = |v: Option<f64>| v.map_or("—".to_owned(), |v| format!("{v:.1} ms"));
    println!();
    println!(
        "| fan-out at {RATE} msg/s | streams | delivered/s | p50 | p99 | dropped | raw PUBLISH/SUBSCRIBE delivered/s | p50 | dropped | redq ÷ raw (delivered/s) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (redq, raw) in rows {
        let (raw_rate, raw_p50, raw_dropped, ratio) = match raw {
            Some(raw) => (
                format!("{:.0}", raw.delivered_per_second),
                ms(raw.p50_ms),
                raw.dropped.to_string(),
                format!(
                    "{:.2}",
                    redq.delivered_per_second / raw.delivered_per_second.max(1.0)
                ),
            ),
            None => ("—".into(), "—".into(), "—".into(), "—".into()),
        };
        println!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
            redq.workload,
            redq.streams,
            redq.delivered_per_second,
            ms(redq.p50_ms),
            ms(redq.p99_ms),
            redq.dropped,
            raw_rate,
            raw_p50,
            raw_dropped,
            ratio
        );
    }
}

/// Counts of one side, shared by its readers.
#[derive(Default)]
struct Tally {
    delivered: AtomicU64,
    dropped: AtomicU64,
    /// When the last delivery came, µs since the epoch of the run.
    last_us: AtomicU64,
    samples: std::sync::Mutex<Vec<Duration>>,
}

impl Tally {
    fn delivered(&self, epoch: Instant, payload: &[u8]) {
        let n = self.delivered.fetch_add(1, Ordering::Relaxed);
        self.last_us
            .fetch_max(epoch.elapsed().as_micros() as u64, Ordering::Relaxed);
        if n.is_multiple_of(SAMPLE_EVERY)
            && let Some(latency) = since_stamp(epoch, payload)
        {
            self.samples.lock().expect("samples lock").push(latency);
        }
    }

    fn seen(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed) + self.dropped.load(Ordering::Relaxed)
    }

    /// Waits until every stream saw every message, or nothing came for [`DRAIN`].
    async fn drain(&self, expected: u64) {
        let mut last = self.seen();
        let mut quiet_since = Instant::now();
        while self.seen() < expected && quiet_since.elapsed() < DRAIN {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if self.seen() != last {
                last = self.seen();
                quiet_since = Instant::now();
            }
        }
    }

    fn result(&self, workload: &str, streams: usize, published: u64, started: Duration) -> FanOut {
        let delivered = self.delivered.load(Ordering::Relaxed);
        let elapsed = Duration::from_micros(self.last_us.load(Ordering::Relaxed))
            .saturating_sub(started)
            .max(Duration::from_millis(1));
        let percentiles = Percentiles::of(&mut self.samples.lock().expect("samples lock"))
            .map(|p| (p.p50, p.p99));
        let expected = published * streams as u64;
        FanOut {
            workload: workload.into(),
            streams,
            published,
            delivered,
            // redq counts what it told the streams; raw Redis tells nothing.
            dropped: self
                .dropped
                .load(Ordering::Relaxed)
                .max(expected.saturating_sub(delivered)),
            delivered_per_second: delivered as f64 / elapsed.as_secs_f64(),
            p50_ms: percentiles.map(|p| p.0),
            p99_ms: percentiles.map(|p| p.1),
        }
    }
}

/// `count` stamped messages at [`RATE`], in calls of [`BATCH`], by `send`.
async fn publish_at_rate<F, Fut>(
    count: usize,
    size: usize,
    epoch: Instant,
    mut send: F,
) -> Result<(), BoxError>
where
    F: FnMut(Vec<bytes::Bytes>) -> Fut,
    Fut: std::future::Future<Output = Result<(), BoxError>>,
{
    let calls_per_second = (RATE / BATCH as u64).max(1);
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / calls_per_second));
    let mut left = count;
    while left > 0 {
        tick.tick().await;
        let n = left.min(BATCH);
        send((0..n).map(|_| stamped_payload(epoch, size)).collect()).await?;
        left -= n;
    }
    Ok(())
}

async fn redq_fan_out(args: &BenchArgs, streams: usize) -> Result<FanOut, BoxError> {
    let topic = fresh_topic("ephemeral");
    let channel = cli::connect(&args.server, &args.tls).await?;
    cli::admin_client(channel.clone())
        .create_topic(pb::CreateTopicRequest {
            name: topic.clone(),
            settings: Some(pb::TopicSettings {
                kind: pb::TopicKind::Ephemeral.into(),
                ..Default::default()
            }),
        })
        .await?;
    let epoch = Instant::now();
    let tally = Arc::new(Tally::default());
    let mut readers = Vec::new();
    let mut client = cli::queue_client(channel.clone());
    for i in 0..streams {
        if i % STREAMS_PER_CONNECTION == 0 {
            client = cli::queue_client(cli::connect(&args.server, &args.tls).await?);
        }
        let mut stream = client
            .subscribe(pb::SubscribeRequest {
                topic: topic.clone(),
                subscription: format!("screen-{i}"),
                ..Default::default()
            })
            .await?
            .into_inner();
        let tally = tally.clone();
        readers.push(tokio::spawn(async move {
            while let Ok(Some(response)) = stream.message().await {
                tally.dropped.fetch_add(response.dropped, Ordering::Relaxed);
                for m in &response.messages {
                    if let Some(message) = &m.message {
                        tally.delivered(epoch, &message.payload);
                    }
                }
            }
        }));
    }
    let started = epoch.elapsed();
    let publisher = cli::queue_client(channel);
    publish_at_rate(args.count, args.payload_size, epoch, |payloads| {
        let mut publisher = publisher.clone();
        let topic = topic.clone();
        async move {
            publisher
                .publish(pb::PublishRequest {
                    topic,
                    messages: payloads
                        .into_iter()
                        .map(|payload| pb::PublishMessage {
                            payload,
                            ..Default::default()
                        })
                        .collect(),
                    dedupe_id: String::new(),
                })
                .await?;
            Ok(())
        }
    })
    .await?;
    tally.drain(args.count as u64 * streams as u64).await;
    for reader in readers {
        reader.abort();
    }
    Ok(tally.result("redq EPHEMERAL", streams, args.count as u64, started))
}

async fn raw_fan_out(args: &BenchArgs, streams: usize) -> Result<FanOut, BoxError> {
    let client = redis::Client::open(args.redis.redis_url.expose())?;
    let channel = format!("redq-bench:raw:{}", fresh_topic("ephemeral"));
    let epoch = Instant::now();
    let tally = Arc::new(Tally::default());
    let mut readers = Vec::new();
    for _ in 0..streams {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(&channel).await?;
        let tally = tally.clone();
        readers.push(tokio::spawn(async move {
            let mut messages = pubsub.on_message();
            while let Some(message) = messages.next().await {
                tally.delivered(epoch, message.get_payload_bytes());
            }
        }));
    }
    let started = epoch.elapsed();
    // Redis answers slowly while it writes to a thousand subscribers: no
    // response timeout, as redq's own publishes have none that short.
    let publisher = client
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await?;
    publish_at_rate(args.count, args.payload_size, epoch, |payloads| {
        let mut publisher = publisher.clone();
        let channel = channel.clone();
        async move {
            let mut pipe = redis::pipe();
            for payload in payloads {
                pipe.publish(&channel, payload.as_ref()).ignore();
            }
            let () = pipe.query_async(&mut publisher).await?;
            Ok(())
        }
    })
    .await?;
    tally.drain(args.count as u64 * streams as u64).await;
    for reader in readers {
        reader.abort();
    }
    Ok(tally.result("raw PUBLISH/SUBSCRIBE", streams, args.count as u64, started))
}
