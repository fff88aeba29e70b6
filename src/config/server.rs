//! The server's settings (`serve` and `dev`) and the limits it enforces,
//! with the relations between them checked at start-up.

use super::parse::{
    parse_ack_ride_wait, parse_positive_duration, parse_promote_ahead, parse_ratio,
};
use super::{Dashboard, Security};
use clap::{Args, ValueEnum};
use std::time::Duration;

/// Server settings shared by `serve` and `dev`.
#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Threads serving gRPC connections, each with a single-threaded
    /// runtime of its own; a connection stays on one. 0: one per CPU core,
    /// one fewer when Redis runs on this machine (a loopback address or a
    /// Unix socket), which leaves Redis' own thread a core.
    #[arg(long, env = "REDQ_WORKERS", default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub workers: u16,
    /// Redis connections shared by all non-blocking commands.
    #[arg(long, env = "REDQ_REDIS_POOL_SIZE", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub redis_pool_size: u32,
    /// Topics that get their own label in /metrics; the others share topic="_other".
    #[arg(long, env = "REDQ_METRICS_MAX_TOPICS", default_value_t = crate::metrics::DEFAULT_MAX_TOPICS, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub metrics_max_topics: u32,
    /// How long shutdown waits for in-flight calls before exiting anyway.
    #[arg(long, env = "REDQ_DRAIN_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// How long a dedupe_id is remembered after its message was published.
    #[arg(long, env = "REDQ_DEDUPE_WINDOW", default_value = "10m", value_parser = parse_positive_duration)]
    pub dedupe_window: Duration,
    /// Promote scheduled messages this long before they are due; subscribers
    /// hold them until then. Spreads the work of a burst due at one instant
    /// ahead of it, but a message this close to its due time can no longer be
    /// cancelled or rescheduled. 0 promotes exactly at the due time.
    #[arg(long, env = "REDQ_PROMOTE_AHEAD", default_value = "250ms", value_parser = parse_promote_ahead)]
    pub promote_ahead: Duration,
    /// How long an ack batch of a StreamingSubscribe stream with room waits
    /// for the next publish that carries its subscription's fetch, to go in
    /// that fetch's script call: a script call fewer per message at a steady
    /// rate, for a little more latency (the fetch does the ack's work too).
    /// 0 applies such acks at once, each in a call of its own.
    #[arg(long, env = "REDQ_ACK_RIDE_WAIT", default_value = "2ms", value_parser = parse_ack_ride_wait)]
    pub ack_ride_wait: Duration,
    /// Refuse publishes (RESOURCE_EXHAUSTED) while Redis uses more than this
    /// fraction of its maxmemory (no effect when maxmemory is 0).
    #[arg(long, env = "REDQ_MEMORY_LIMIT_RATIO", default_value_t = 0.9, value_parser = parse_ratio)]
    pub memory_limit_ratio: f64,
    /// Retention of topics without retention settings: messages are kept
    /// this long (never less than every subscription needs them); 0 trims
    /// them as soon as every subscription has acked them.
    #[arg(long, env = "REDQ_DEFAULT_RETENTION", default_value = "7d", value_parser = humantime::parse_duration)]
    pub default_retention: Duration,
    /// How often each replica applies retention to every topic.
    #[arg(long, env = "REDQ_TRIM_INTERVAL", default_value = "5s", value_parser = parse_positive_duration)]
    pub trim_interval: Duration,
    /// When a publish, schedule or ack is acknowledged: `redis` when the
    /// Redis master has it; `replicated` only once `WAIT 1` says a replica
    /// has it too (else the call fails with UNAVAILABLE).
    #[arg(long, env = "REDQ_DURABILITY", value_enum, default_value_t = Durability::Redis)]
    pub durability: Durability,
    /// With `--durability replicated`: how long a write waits for a replica.
    #[arg(long, env = "REDQ_REPLICA_WAIT_TIMEOUT", default_value = "5s", value_parser = parse_positive_duration)]
    pub replica_wait_timeout: Duration,
    #[command(flatten)]
    pub limits: Limits,
    #[command(flatten)]
    pub security: Security,
    #[command(flatten)]
    pub dashboard: Dashboard,
}

/// When a write a client waits for is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Durability {
    /// When the Redis master has it.
    Redis,
    /// When a replica has it too (`WAIT 1`).
    Replicated,
}

impl Settings {
    /// How long writes wait for a replica; None unless `--durability replicated`.
    pub fn replica_wait(&self) -> Option<Duration> {
        (self.durability == Durability::Replicated).then_some(self.replica_wait_timeout)
    }

    /// Worker threads to start: `--workers`, else one per CPU core, less
    /// one when Redis shares the machine: its single thread does as much
    /// work per message as redq, and a worker that competes with it for
    /// a core only adds wake-ups of one thread by another (BENCHMARKS.md).
    pub fn workers(&self, redis_on_this_machine: bool) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        match self.workers {
            0 if redis_on_this_machine => cores.saturating_sub(1).max(1),
            0 => cores,
            n => n.into(),
        }
    }
}

/// Limits enforced on every request.
#[derive(Debug, Clone, Args)]
pub struct Limits {
    /// Largest message payload, in bytes.
    #[arg(long, env = "REDQ_MAX_PAYLOAD_BYTES", default_value_t = 1024 * 1024, value_parser = clap::value_parser!(u32).range(1..=64 * 1024 * 1024))]
    pub max_payload_bytes: u32,
    /// Most messages in one Publish call.
    #[arg(long, env = "REDQ_MAX_BATCH_SIZE", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_batch_size: u32,
    /// Most attributes on one message.
    #[arg(long, env = "REDQ_MAX_ATTRIBUTES", default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub max_attributes: u32,
    /// Largest attribute, key and value bytes together.
    #[arg(long, env = "REDQ_MAX_ATTRIBUTE_BYTES", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1024 * 1024))]
    pub max_attribute_bytes: u32,
    /// Ack deadline of a stream that does not ask for one.
    #[arg(long, env = "REDQ_DEFAULT_ACK_DEADLINE", default_value = "30s", value_parser = parse_positive_duration)]
    pub default_ack_deadline: Duration,
    /// Longest ack deadline a stream or ModifyAckDeadline may ask for.
    #[arg(long, env = "REDQ_MAX_ACK_DEADLINE", default_value = "10m", value_parser = parse_positive_duration)]
    pub max_ack_deadline: Duration,
    /// Outstanding (delivered, unacked) messages of a stream that does not ask.
    #[arg(long, env = "REDQ_DEFAULT_MAX_OUTSTANDING", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub default_max_outstanding: u32,
    /// Most outstanding messages a stream may ask for.
    #[arg(long, env = "REDQ_MAX_OUTSTANDING_LIMIT", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_outstanding_limit: u32,
    /// Bytes of deliveries the server holds for a stream that does not ask,
    /// fetched but not yet taken by its client: a client that does not read
    /// stops its stream's fetching here.
    #[arg(long, env = "REDQ_DEFAULT_MAX_OUTSTANDING_BYTES", default_value_t = 10 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub default_max_outstanding_bytes: u64,
    /// Bytes of deliveries all Subscribe streams of a replica hold together,
    /// fetched but not yet taken by their clients; also the most one stream may ask for.
    #[arg(long, env = "REDQ_SUBSCRIBE_BUFFER_BYTES", default_value_t = 256 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub subscribe_buffer_bytes: u64,
    /// Retry backoff after a first failed delivery, for subscriptions created without one.
    #[arg(long, env = "REDQ_RETRY_MIN_BACKOFF", default_value = "1s", value_parser = humantime::parse_duration)]
    pub retry_min_backoff: Duration,
    /// Longest retry backoff, for subscriptions created without one.
    #[arg(long, env = "REDQ_RETRY_MAX_BACKOFF", default_value = "10m", value_parser = humantime::parse_duration)]
    pub retry_max_backoff: Duration,
    /// Deliveries before a message is dead-lettered (0 = unlimited), for
    /// subscriptions created without a value.
    #[arg(long, env = "REDQ_MAX_DELIVERY_ATTEMPTS", default_value_t = 0)]
    pub max_delivery_attempts: u32,
    /// Furthest in the future a message may be scheduled.
    #[arg(long, env = "REDQ_MAX_DELAY", default_value = "3650d", value_parser = parse_positive_duration)]
    pub max_delay: Duration,
}

impl Limits {
    /// The most bytes one message can have: payload, attributes and ordering key.
    pub fn max_message_bytes(&self) -> u64 {
        u64::from(self.max_payload_bytes)
            + u64::from(self.max_attributes + 1) * u64::from(self.max_attribute_bytes)
    }

    /// Checks the relations between limits that clap cannot check one flag at a time.
    pub fn validate(&self) -> Result<(), String> {
        if self.default_ack_deadline > self.max_ack_deadline {
            return Err(format!(
                "--default-ack-deadline ({}) exceeds --max-ack-deadline ({})",
                humantime::format_duration(self.default_ack_deadline),
                humantime::format_duration(self.max_ack_deadline)
            ));
        }
        if self.retry_min_backoff > self.retry_max_backoff {
            return Err(format!(
                "--retry-min-backoff ({}) exceeds --retry-max-backoff ({})",
                humantime::format_duration(self.retry_min_backoff),
                humantime::format_duration(self.retry_max_backoff)
            ));
        }
        if self.default_max_outstanding_bytes > self.subscribe_buffer_bytes {
            return Err(format!(
                "--default-max-outstanding-bytes ({}) exceeds --subscribe-buffer-bytes ({})",
                self.default_max_outstanding_bytes, self.subscribe_buffer_bytes
            ));
        }
        if self.default_max_outstanding > self.max_outstanding_limit {
            return Err(format!(
                "--default-max-outstanding ({}) exceeds --max-outstanding-limit ({})",
                self.default_max_outstanding, self.max_outstanding_limit
            ));
        }
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_payload_bytes: 1024 * 1024,
            max_batch_size: 1000,
            max_attributes: 64,
            max_attribute_bytes: 1024,
            default_ack_deadline: Duration::from_secs(30),
            max_ack_deadline: Duration::from_secs(600),
            default_max_outstanding: 100,
            max_outstanding_limit: 10_000,
            default_max_outstanding_bytes: 10 * 1024 * 1024,
            subscribe_buffer_bytes: 256 * 1024 * 1024,
            retry_min_backoff: Duration::from_secs(1),
            retry_max_backoff: Duration::from_secs(600),
            max_delivery_attempts: 0,
            max_delay: Duration::from_secs(3650 * 24 * 3600),
        }
    }
}
