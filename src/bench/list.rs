//! `redq bench list`: a backlog that a legacy producer `LPUSH`ed to a LIST
//! topic's list, consumed and acked through redq, beside the reliable-queue
//! recipe on raw Redis (`BLMOVE` into a processing list, `LREM` from it once
//! handled) run by as many client loops as redq has streams, in the same run.

use super::throughput::{CONSUMERS, Row, drain};
use super::{Client, fresh_topic, subscribe};
use crate::cli;
use crate::config::BenchArgs;
use crate::error::BoxError;
use crate::pb;
use crate::store::connection::{self, Connection};
use std::time::{Duration, Instant};

/// Values per LPUSH when the backlog is written.
const PUSH_BATCH: usize = 1000;
/// How long a baseline loop's BLMOVE waits on an empty list (under the
/// connection's response timeout).
const RAW_BLOCK_SECONDS: f64 = 0.1;

/// Both rows: redq's consumption of the backlog, and the raw baseline's.
pub async fn run(
    client: &Client,
    conn: &Connection,
    args: &BenchArgs,
) -> Result<(Row, Row), BoxError> {
    let redq = through_redq(client, conn, args).await?;
    let raw = raw_blmove_lrem(conn, args).await?;
    Ok((redq, raw))
}

/// LPUSHes `args.count` payloads onto `key`, as a legacy producer would.
async fn push_backlog(conn: &Connection, key: &str, args: &BenchArgs) -> Result<(), BoxError> {
    let payload = vec![b'x'; args.payload_size];
    let mut conn = conn.clone();
    for start in (0..args.count).step_by(PUSH_BATCH) {
        let n = PUSH_BATCH.min(args.count - start);
        let mut lpush = redis::cmd("LPUSH");
        lpush.arg(key);
        for _ in 0..n {
            lpush.arg(&payload);
        }
        let _: u64 = lpush.query_async(&mut conn).await?;
    }
    Ok(())
}

/// redq: a LIST topic on a list holding the backlog, drained by
/// [`CONSUMERS`] streams that ack every response.
async fn through_redq(
    client: &Client,
    conn: &Connection,
    args: &BenchArgs,
) -> Result<Row, BoxError> {
    let topic = fresh_topic("list");
    let key = format!("redq-bench:list:{topic}");
    let mut admin = cli::admin_client(cli::connect(&args.server, &args.tls).await?);
    admin
        .create_topic(pb::CreateTopicRequest {
            name: topic.clone(),
            settings: Some(pb::TopicSettings {
                kind: pb::TopicKind::List.into(),
                list_key: key.clone(),
                ..Default::default()
            }),
        })
        .await?;
    push_backlog(conn, &key, args).await?;
    let mut streams = Vec::with_capacity(CONSUMERS);
    for _ in 0..CONSUMERS {
        streams.push(subscribe(client, &topic, 2000, false).await?);
    }
    let started = Instant::now();
    drain(client, &topic, streams, args, "list").await?;
    let elapsed = started.elapsed();
    admin
        .delete_topic(pb::DeleteTopicRequest { name: topic })
        .await?;
    let _: u64 = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn.clone())
        .await?;
    Ok(Row::new(
        &format!("redq LIST consume + ack, {CONSUMERS} streams"),
        args.count,
        elapsed,
        &mut [],
    ))
}

/// Raw Redis: the same backlog, taken by [`CONSUMERS`] loops, each on a
/// connection of its own, one element at a time: BLMOVE from the list into
/// a processing list, then LREM of it there (the ack).
async fn raw_blmove_lrem(conn: &Connection, args: &BenchArgs) -> Result<Row, BoxError> {
    let key = format!("redq-bench:raw:{}", fresh_topic("blmove"));
    let processing = format!("{key}:processing");
    push_backlog(conn, &key, args).await?;
    let url = args.redis.redis_url.expose();
    let mut loops = Vec::with_capacity(CONSUMERS);
    for _ in 0..CONSUMERS {
        loops.push(connection::connect(url).await?);
    }
    let started = Instant::now();
    let tasks: Vec<_> = loops
        .into_iter()
        .map(|mut conn| {
            let (key, processing) = (key.clone(), processing.clone());
            tokio::spawn(async move {
                let mut taken = 0usize;
                loop {
                    let element: Option<Vec<u8>> = redis::cmd("BLMOVE")
                        .arg(&key)
                        .arg(&processing)
                        .arg("RIGHT")
                        .arg("LEFT")
                        .arg(RAW_BLOCK_SECONDS)
                        .query_async(&mut conn)
                        .await?;
                    let Some(element) = element else {
                        return Ok::<usize, redis::RedisError>(taken);
                    };
                    let _: u64 = redis::cmd("LREM")
                        .arg(&processing)
                        .arg(1)
                        .arg(element)
                        .query_async(&mut conn)
                        .await?;
                    taken += 1;
                }
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    // The loops stop when the list stays empty for a block: not counted.
    let elapsed = started
        .elapsed()
        .saturating_sub(Duration::from_secs_f64(RAW_BLOCK_SECONDS));
    let _: u64 = redis::cmd("DEL")
        .arg(&key)
        .arg(&processing)
        .query_async(&mut conn.clone())
        .await?;
    if total != args.count {
        return Err(format!("raw BLMOVE + LREM took {total} of {}", args.count).into());
    }
    Ok(Row::new(
        &format!("BLMOVE + LREM, {CONSUMERS} loops"),
        args.count,
        elapsed,
        &mut [],
    ))
}
