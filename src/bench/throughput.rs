//! `redq bench publish-batch | publish-unary | consume | e2e | memory`: the
//! throughput, latency and memory workloads, each beside the same workload
//! on raw Redis where one exists, measured in the same run so that the ratio
//! compares across noisy machines.

use super::{
    Client, Percentiles, ack, fresh_topic, publish, publish_steadily, since_stamp, subscribe,
};
use crate::cli::progress_bar;
use crate::config::BenchArgs;
use crate::error::BoxError;
use crate::pb;
use crate::store::connection::{self, Connection};
use bytes::Bytes;
use std::time::{Duration, Instant};

/// Messages per Publish call in publish-batch, and XADDs per pipeline in its baseline.
const BATCH: usize = 1000;
/// Calls in flight in publish-unary, and tasks in its baseline.
const IN_FLIGHT: usize = 50;
/// Subscribe streams reading the backlog in consume.
pub(super) const CONSUMERS: usize = 4;

/// One row of the results table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub workload: String,
    pub messages: usize,
    pub per_second: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    pub bytes_per_message: Option<f64>,
}

impl Row {
    pub(super) fn new(
        workload: &str,
        messages: usize,
        elapsed: Duration,
        latencies: &mut [Duration],
    ) -> Self {
        let p = Percentiles::of(latencies);
        Self {
            workload: workload.to_owned(),
            messages,
            per_second: messages as f64 / elapsed.as_secs_f64(),
            p50_ms: p.map(|p| p.p50),
            p99_ms: p.map(|p| p.p99),
            max_ms: p.map(|p| p.max),
            bytes_per_message: None,
        }
    }
}

fn payload(args: &BenchArgs) -> Bytes {
    Bytes::from(vec![b'x'; args.payload_size])
}

fn messages(payload: &Bytes, n: usize) -> Vec<pb::PublishMessage> {
    (0..n)
        .map(|_| pb::PublishMessage {
            payload: payload.clone(),
            ..Default::default()
        })
        .collect()
}

/// redq: Publish calls of `BATCH` messages, one at a time.
pub async fn publish_batch(client: &Client, args: &BenchArgs) -> Result<Row, BoxError> {
    let topic = fresh_topic("publish-batch");
    let payload = payload(args);
    let bar = progress_bar(args.count as u64, "publish-batch");
    let mut latencies = Vec::new();
    let started = Instant::now();
    for start in (0..args.count).step_by(BATCH) {
        let n = BATCH.min(args.count - start);
        let call = Instant::now();
        publish(client, &topic, messages(&payload, n)).await?;
        latencies.push(call.elapsed());
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    Ok(Row::new(
        "redq publish, batches of 1000",
        args.count,
        started.elapsed(),
        &mut latencies,
    ))
}

/// Raw Redis: XADD pipelined 64 at a time.
pub async fn raw_publish_batch(conn: &Connection, args: &BenchArgs) -> Result<Row, BoxError> {
    let key = format!("redq-bench:raw:{}", fresh_topic("xadd"));
    let payload = payload(args);
    let mut conn = conn.clone();
    let mut latencies = Vec::new();
    let started = Instant::now();
    for start in (0..args.count).step_by(64) {
        let pipe = raw_xadds(&key, &payload, (start + 64).min(args.count) - start);
        let call = Instant::now();
        let _: () = pipe.query_async(&mut conn).await?;
        latencies.push(call.elapsed());
    }
    let row = Row::new(
        "raw XADD, pipelined x64",
        args.count,
        started.elapsed(),
        &mut latencies,
    );
    let _: () = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
    Ok(row)
}

/// A pipeline of `n` raw XADDs of `payload` to `key`, replies ignored: what
/// a stream entry costs without redq.
fn raw_xadds(key: &str, payload: &Bytes, n: usize) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for _ in 0..n {
        pipe.cmd("XADD")
            .arg(key)
            .arg("*")
            .arg("m")
            .arg(payload.as_ref())
            .ignore();
    }
    pipe
}

/// redq: one message per Publish call, `IN_FLIGHT` calls at a time.
pub async fn publish_unary(client: &Client, args: &BenchArgs) -> Result<Row, BoxError> {
    let topic = fresh_topic("publish-unary");
    let payload = payload(args);
    let bar = progress_bar(args.count as u64, "publish-unary");
    let started = Instant::now();
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|task| {
            let mut client = client.clone();
            let (topic, payload, bar) = (topic.clone(), payload.clone(), bar.clone());
            let n = args.count / IN_FLIGHT + usize::from(task < args.count % IN_FLIGHT);
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(n);
                for _ in 0..n {
                    let call = Instant::now();
                    client
                        .publish(pb::PublishRequest {
                            topic: topic.clone(),
                            messages: messages(&payload, 1),
                            dedupe_id: String::new(),
                        })
                        .await?;
                    latencies.push(call.elapsed());
                    bar.inc(1);
                }
                Ok::<_, tonic::Status>(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    bar.finish_and_clear();
    Ok(Row::new(
        "redq publish, 1 per call, 50 in flight",
        args.count,
        started.elapsed(),
        &mut latencies,
    ))
}

/// Raw Redis: XADD without pipelining from `IN_FLIGHT` tasks, a connection each.
pub async fn raw_publish_unary(args: &BenchArgs) -> Result<Row, BoxError> {
    let key = format!("redq-bench:raw:{}", fresh_topic("xadd"));
    let payload = payload(args);
    let mut conns = Vec::new();
    for _ in 0..IN_FLIGHT {
        conns.push(connection::connect(args.redis.redis_url.expose()).await?);
    }
    let started = Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(task, mut conn)| {
            let (key, payload) = (key.clone(), payload.clone());
            let n = args.count / IN_FLIGHT + usize::from(task < args.count % IN_FLIGHT);
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(n);
                for _ in 0..n {
                    let call = Instant::now();
                    let _: String = redis::cmd("XADD")
                        .arg(&key)
                        .arg("*")
                        .arg("m")
                        .arg(payload.as_ref())
                        .query_async(&mut conn)
                        .await?;
                    latencies.push(call.elapsed());
                }
                Ok::<_, redis::RedisError>(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let row = Row::new(
        "raw XADD, 50 tasks, no pipeline",
        args.count,
        started.elapsed(),
        &mut latencies,
    );
    let mut conn = connection::connect(args.redis.redis_url.expose()).await?;
    let _: () = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
    Ok(row)
}

/// redq: a backlog of `count` messages read by `CONSUMERS` streams that ack
/// every response.
pub async fn consume(client: &Client, args: &BenchArgs) -> Result<Row, BoxError> {
    let topic = fresh_topic("consume");
    let payload = payload(args);
    // The subscription exists before the backlog, so it reads all of it.
    let first = subscribe(client, &topic, 2000, false).await?;
    for start in (0..args.count).step_by(BATCH) {
        publish(
            client,
            &topic,
            messages(&payload, BATCH.min(args.count - start)),
        )
        .await?;
    }
    let mut streams = vec![first];
    for _ in 1..CONSUMERS {
        streams.push(subscribe(client, &topic, 2000, false).await?);
    }
    let started = Instant::now();
    drain(client, &topic, streams, args, "consume").await?;
    Ok(Row::new(
        "redq consume + ack, 4 streams",
        args.count,
        started.elapsed(),
        &mut [],
    ))
}

/// Reads `args.count` deliveries of the subscription `bench` from `streams`,
/// each acking every response it gets with one Ack; fails after the bench
/// timeout (and a minute) with how many came.
pub(super) async fn drain(
    client: &Client,
    topic: &str,
    streams: Vec<tonic::Streaming<pb::SubscribeResponse>>,
    args: &BenchArgs,
    what: &str,
) -> Result<(), BoxError> {
    let (done, mut received) = tokio::sync::mpsc::unbounded_channel();
    for mut stream in streams {
        let (client, topic, done) = (client.clone(), topic.to_owned(), done.clone());
        tokio::spawn(async move {
            while let Ok(Some(response)) = stream.message().await {
                let ack_ids: Vec<String> =
                    response.messages.into_iter().map(|m| m.ack_id).collect();
                let n = ack_ids.len();
                let acked = ack(client.clone(), &topic, ack_ids).await;
                if acked.is_err() || done.send(n).is_err() {
                    break;
                }
            }
        });
    }
    drop(done);
    let bar = progress_bar(args.count as u64, what);
    let mut total = 0;
    let deadline = tokio::time::Instant::now() + args.timeout + Duration::from_secs(60);
    while total < args.count {
        match tokio::time::timeout_at(deadline, received.recv()).await {
            Ok(Some(n)) => {
                total += n;
                bar.inc(n as u64);
            }
            _ => return Err(format!("{what}: consumed only {total} of {}", args.count).into()),
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// redq: publish → handler latency at a steady 2,000 messages/s, from the
/// start of the Publish call to the arrival of the message; the send time
/// travels in the first 8 bytes of the payload.
pub async fn end_to_end(client: &Client, args: &BenchArgs) -> Result<Row, BoxError> {
    const RATE: u64 = 2000;
    let topic = fresh_topic("e2e");
    let n = args.count.min(RATE as usize * 10);
    let mut stream = subscribe(client, &topic, 2000, false).await?;
    let epoch = Instant::now();
    let publisher = publish_steadily(
        client.clone(),
        topic.clone(),
        RATE,
        n,
        epoch,
        args.payload_size,
    );
    let bar = progress_bar(n as u64, "e2e");
    let mut latencies = Vec::with_capacity(n);
    let started = Instant::now();
    while latencies.len() < n {
        let response = tokio::time::timeout(args.timeout, stream.message())
            .await
            .map_err(|_| format!("e2e: only {} of {n} arrived", latencies.len()))??
            .ok_or("e2e: stream ended")?;
        let mut ack_ids = Vec::new();
        for received in response.messages {
            let payload = received.message.map(|m| m.payload).unwrap_or_default();
            let latency =
                since_stamp(epoch, &payload).ok_or("e2e: a payload without its send time")?;
            latencies.push(latency);
            ack_ids.push(received.ack_id);
            bar.inc(1);
        }
        ack(client.clone(), &topic, ack_ids).await?;
    }
    publisher.await??;
    bar.finish_and_clear();
    Ok(Row::new(
        "redq publish -> handler at 2,000/s",
        n,
        started.elapsed(),
        &mut latencies,
    ))
}

/// Raw Redis round trip (PING), the floor of any latency above.
pub async fn raw_round_trip(conn: &Connection, args: &BenchArgs) -> Result<Row, BoxError> {
    let mut conn = conn.clone();
    let n = args.count.min(20_000);
    let mut latencies = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let call = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        latencies.push(call.elapsed());
    }
    Ok(Row::new(
        "raw PING round trip",
        n,
        started.elapsed(),
        &mut latencies,
    ))
}

/// Redis memory per message waiting in a topic with a subscription, and per
/// scheduled message, against a raw stream of the same payloads.
pub async fn memory(
    client: &Client,
    conn: &Connection,
    args: &BenchArgs,
) -> Result<Vec<Row>, BoxError> {
    let mut conn = conn.clone();
    // Summed over the masters of a cluster.
    let used = |mut conn: Connection| async move {
        let mut used = 0.0;
        for info in conn
            .on_every_master(redis::cmd("INFO").arg("memory"))
            .await?
        {
            let info: String = redis::from_redis_value(info).map_err(|_| {
                redis::RedisError::from((redis::ErrorKind::Client, "INFO is not text"))
            })?;
            used += info
                .lines()
                .find_map(|l| l.strip_prefix("used_memory:")?.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
        }
        Ok::<_, redis::RedisError>(used)
    };
    let payload = payload(args);
    let mut rows = Vec::new();

    for (workload, delay) in [
        ("redq waiting message", None),
        ("redq scheduled message", Some(Duration::from_secs(3600))),
    ] {
        let topic = fresh_topic("memory");
        let _stream = subscribe(client, &topic, 2000, false).await?; // a subscription that reads nothing yet
        drop(_stream);
        let before = used(conn.clone()).await?;
        for start in (0..args.count).step_by(BATCH) {
            let mut batch = messages(&payload, BATCH.min(args.count - start));
            for m in &mut batch {
                m.delay = delay.map(|d| prost_types::Duration {
                    seconds: d.as_secs() as i64,
                    nanos: 0,
                });
            }
            publish(client, &topic, batch).await?;
        }
        let after = used(conn.clone()).await?;
        let mut row = Row::new(workload, args.count, Duration::from_secs(1), &mut []);
        row.per_second = 0.0;
        row.bytes_per_message = Some((after - before) / args.count as f64);
        rows.push(row);
    }

    let key = format!("redq-bench:raw:{}", fresh_topic("memory"));
    let before = used(conn.clone()).await?;
    for start in (0..args.count).step_by(64) {
        let pipe = raw_xadds(&key, &payload, (start + 64).min(args.count) - start);
        let _: () = pipe.query_async(&mut conn).await?;
    }
    let after = used(conn.clone()).await?;
    let mut row = Row::new(
        "raw stream entry",
        args.count,
        Duration::from_secs(1),
        &mut [],
    );
    row.per_second = 0.0;
    row.bytes_per_message = Some((after - before) / args.count as f64);
    rows.push(row);
    let _: () = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
    Ok(rows)
}
