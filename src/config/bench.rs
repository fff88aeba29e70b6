//! Arguments of `redq bench`.

use super::parse::{parse_count, parse_positive_duration};
use super::{ClientTls, RedisUrl};
use clap::{Args, ValueEnum};
use std::time::Duration;

#[derive(Debug, Args)]
// `--redis-url` is the server's own flag (see `RedisUrl`); only its help is
// worded for the bench.
#[command(mut_arg("redis_url", |arg| arg.help(
    "The Redis the server uses, for the raw-Redis baselines and memory figures"
)))]
pub struct BenchArgs {
    /// What to measure.
    #[arg(value_enum)]
    pub scenario: BenchScenario,
    /// The server to measure.
    #[arg(long, env = "REDQ_SERVER", default_value = "http://127.0.0.1:50051")]
    pub server: String,
    /// Messages per workload.
    #[arg(long, default_value_t = 10_000, value_parser = parse_count)]
    pub count: usize,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 100)]
    pub payload_size: usize,
    /// delayed: the spread of due times in the second workload.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub spread: Duration,
    /// delayed: how far ahead the first message is due (scheduling must fit in it).
    #[arg(long, default_value = "3s", value_parser = parse_positive_duration)]
    pub lead: Duration,
    /// How long to wait past the last due time before giving up.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub tls: ClientTls,
    /// The server's Redis.
    #[command(flatten)]
    pub redis: RedisUrl,
    /// The server's metrics endpoint, read for its memory use (streams).
    #[arg(long, default_value = "http://127.0.0.1:9090/metrics")]
    pub metrics_url: String,
    /// A smoke run: 1,000 messages per workload (for CI; the figures mean little).
    #[arg(long)]
    pub quick: bool,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchScenario {
    /// Publish in batches of 1000, beside pipelined raw XADD.
    PublishBatch,
    /// One message per Publish, 50 in flight, beside raw XADD from 50 tasks.
    PublishUnary,
    /// Consume and ack a backlog.
    Consume,
    /// Publish -> handler latency at 2,000 messages/s, beside a raw round trip.
    E2e,
    /// Lateness of scheduled messages: N due at one instant, N spread over time.
    Delayed,
    /// Redis memory per waiting and per scheduled message, beside a raw stream.
    Memory,
    /// 1,000 Subscribe streams (10 topics × 100) under 2,000 messages/s:
    /// Redis connections, server memory and latency, beside 10 streams.
    Streams,
    /// Consume + ack through an ordered subscription with 1,000 and with 10
    /// ordering keys, beside an unordered one; memory per active key and
    /// per blocked entry.
    Ordered,
    /// Live fan-out of an EPHEMERAL topic to 100 and 1,000 streams at
    /// 10,000 messages/s, beside raw PUBLISH/SUBSCRIBE.
    Ephemeral,
    /// Consume + ack of a backlog LPUSHed to a LIST topic's list, beside
    /// raw BLMOVE + LREM loops as many as redq's streams.
    List,
    /// Every scenario above.
    All,
}
