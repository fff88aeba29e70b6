//! Command line and environment configuration: every flag has a `REDQ_*`
//! twin, and every value is checked before anything starts.

mod security;

pub use security::{ClientAuth, RedisArgs, Security};

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `redq`: a gRPC message queue backed by Redis.
#[derive(Debug, Parser)]
#[command(name = "redq", version, about)]
pub struct Cli {
    /// Log format.
    #[arg(long, env = "REDQ_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gRPC server against an existing Redis.
    Serve(ServeArgs),
    /// Run a private redis-server and the gRPC server against it, for a first try.
    Dev(DevArgs),
    /// Measure a running server (see BENCHMARKS in the README).
    Bench(BenchArgs),
    /// Publish messages: PAYLOAD, stdin, or a JSON-lines file.
    Publish(PublishArgs),
    /// Print the messages of a subscription as they arrive.
    Subscribe(SubscribeArgs),
    /// Publish one message to be delivered later.
    Schedule(ScheduleArgs),
    /// Cancel a scheduled message that is not yet due.
    Cancel(CancelArgs),
    /// List the topics.
    Topics(TopicsArgs),
    /// Show a topic's and its subscriptions' figures.
    Stats(StatsArgs),
    /// List, redrive or purge a subscription's dead letters.
    Dlq(DlqArgs),
    /// Make tokens for --auth-tokens-file.
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a new random token (once) and its entry for the tokens file.
    Create(TokenCreateArgs),
}

#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// The token's name, which the logs show instead of the token.
    #[arg(long)]
    pub name: String,
    /// ACTION:TOPIC[:SUBSCRIPTION], e.g. `publish:orders.>` or
    /// `subscribe:orders:billing` (repeatable). Actions: publish, subscribe,
    /// view, browse, manage, admin.
    #[arg(long = "grant", required = true)]
    pub grants: Vec<String>,
}

/// The server a client subcommand talks to.
#[derive(Debug, Clone, Args)]
pub struct ServerArg {
    /// gRPC address of a redq server (https:// for TLS).
    #[arg(long, env = "REDQ_SERVER", default_value = "http://127.0.0.1:50051")]
    pub server: String,
    #[command(flatten)]
    pub tls: ClientTls,
}

/// How a client proves the server and itself: TLS files and a token.
#[derive(Clone, Default, Args)]
pub struct ClientTls {
    /// PEM CA certificates that sign the server's certificate (https://).
    #[arg(long, env = "REDQ_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// PEM client certificate, for a server that requires mTLS.
    #[arg(long, env = "REDQ_CLIENT_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "REDQ_CLIENT_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Token sent as `authorization: Bearer <token>`.
    #[arg(long, env = "REDQ_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

impl std::fmt::Debug for ClientTls {
    /// Without the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// Fields of the messages that `publish` and `schedule` send.
#[derive(Debug, Clone, Args)]
pub struct MessageArgs {
    /// Attribute KEY=VALUE (repeatable).
    #[arg(long = "attr", value_name = "KEY=VALUE", value_parser = parse_attribute)]
    pub attributes: Vec<(String, String)>,
    /// Ordering key carried with the message.
    #[arg(long, value_name = "KEY")]
    pub ordering_key: Option<String>,
}

#[derive(Debug, Args)]
pub struct PublishArgs {
    /// Topic to publish to (created on first use).
    pub topic: String,
    /// The message; without it (and without --file) stdin is read.
    #[arg(conflicts_with_all = ["lines", "file"])]
    pub payload: Option<String>,
    /// Publish one message per line of stdin (empty lines are skipped).
    #[arg(long, conflicts_with = "file")]
    pub lines: bool,
    /// Publish the messages of a JSON-lines file: one object per line with
    /// "payload" (or "payload_base64"), and optionally "attributes",
    /// "ordering_key", "dedupe_id", "delay" or "deliver_at".
    #[arg(long, value_name = "F.jsonl")]
    pub file: Option<PathBuf>,
    /// Messages per Publish call (--lines, --file).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch: u32,
    /// Deliver after this delay (e.g. 10s, 5m); a --file line's own "delay"
    /// or "deliver_at" wins.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub delay: Option<Duration>,
    /// Idempotency key: publishing it again within the dedupe window returns
    /// the first message's id (one message only: not with --lines or --file).
    #[arg(long, value_name = "ID", conflicts_with_all = ["lines", "file"])]
    pub dedupe_id: Option<String>,
    #[command(flatten)]
    pub message: MessageArgs,
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Debug, Args)]
pub struct SubscribeArgs {
    /// Topic to read from.
    pub topic: String,
    /// Subscription to read through (created on first use).
    pub subscription: String,
    /// Ack each message once printed (otherwise it is redelivered after its
    /// ack deadline).
    #[arg(long)]
    pub ack: bool,
    /// Stop after this many messages.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max: Option<u64>,
    /// Print JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
    /// Prefix of this consumer's name.
    #[arg(long, default_value = "")]
    pub consumer: String,
    /// Ack deadline of the messages this stream receives (server default when unset).
    #[arg(long, value_parser = parse_positive_duration)]
    pub ack_deadline: Option<Duration>,
    /// Where the subscription starts if this call creates it.
    #[arg(long, value_enum, default_value_t = StartArg::Earliest)]
    pub start: StartArg,
    /// Create the subscription ordered per ordering key (an existing one must be).
    #[arg(long)]
    pub ordered: bool,
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StartArg {
    /// Every message still in the topic.
    Earliest,
    /// Only messages published from now on.
    Latest,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("due").required(true).args(["delay", "at"]))]
pub struct ScheduleArgs {
    /// Topic to publish to (created on first use).
    pub topic: String,
    /// The message.
    pub payload: String,
    /// Deliver after this delay (e.g. 90s, 1h 30m).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub delay: Option<Duration>,
    /// Deliver at this time, RFC 3339 (e.g. 2027-01-01T09:00:00Z).
    #[arg(long, value_name = "RFC3339", value_parser = parse_timestamp)]
    pub at: Option<prost_types::Timestamp>,
    /// Idempotency key (see publish --dedupe-id).
    #[arg(long, value_name = "ID")]
    pub dedupe_id: Option<String>,
    #[command(flatten)]
    pub message: MessageArgs,
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Topic the message was scheduled on.
    pub topic: String,
    /// The id `schedule` printed.
    pub message_id: String,
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Debug, Args)]
pub struct TopicsArgs {
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Topic to show.
    pub topic: String,
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Debug, Args)]
pub struct DlqArgs {
    #[command(subcommand)]
    pub command: DlqCommand,
}

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List the dead letters, oldest first.
    List {
        #[command(flatten)]
        target: DlqTarget,
        /// Print JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Give dead letters (all, or those named) back to the subscription.
    Redrive {
        #[command(flatten)]
        target: DlqTarget,
        /// Dead letter ids (as `dlq list` shows); none: all of them.
        ids: Vec<String>,
        /// At most this many messages per second (0: the server default).
        #[arg(long, default_value_t = 0)]
        max_per_second: u32,
    },
    /// Delete dead letters: those named, or all with --all.
    Purge {
        #[command(flatten)]
        target: DlqTarget,
        /// Dead letter ids (as `dlq list` shows).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        ids: Vec<String>,
        /// Delete every dead letter of the subscription.
        #[arg(long)]
        all: bool,
    },
}

/// The subscription whose dead letters a `dlq` subcommand handles.
#[derive(Debug, Args)]
pub struct DlqTarget {
    /// Topic of the subscription.
    pub topic: String,
    /// Subscription whose dead letters to handle.
    pub subscription: String,
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Debug, Args)]
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
    /// The Redis the server uses, for the raw-Redis baselines and memory figures.
    #[arg(
        long,
        env = "REDQ_REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    pub redis_url: String,
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
    /// Every scenario above.
    All,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address the gRPC server listens on.
    #[arg(long, env = "REDQ_LISTEN", default_value = "0.0.0.0:50051")]
    pub listen: SocketAddr,
    /// Address of the HTTP endpoint serving /metrics, /healthz and /readyz.
    #[arg(long, env = "REDQ_METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    pub metrics_listen: SocketAddr,
    #[command(flatten)]
    pub redis: RedisArgs,
    #[command(flatten)]
    pub settings: Settings,
}

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Address the gRPC server listens on.
    #[arg(long, env = "REDQ_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Address of the HTTP endpoint serving /metrics, /healthz and /readyz.
    #[arg(long, env = "REDQ_METRICS_LISTEN", default_value = "127.0.0.1:9090")]
    pub metrics_listen: SocketAddr,
    /// Directory for the private Redis' socket, log and append-only file.
    #[arg(long, env = "REDQ_DEV_DIR", default_value = ".redq-dev")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub settings: Settings,
}

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

fn parse_promote_ahead(s: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if duration > Duration::from_secs(60) {
        return Err("must be at most 60s".into());
    }
    Ok(duration)
}

fn parse_ack_ride_wait(s: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if duration > Duration::from_millis(100) {
        return Err("must be at most 100ms".into());
    }
    Ok(duration)
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err("must be a number in (0, 1]".into()),
    }
}

fn parse_count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=10_000_000).contains(&n) => Ok(n),
        _ => Err("must be a number from 1 to 10000000".into()),
    }
}

fn parse_attribute(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err("expected KEY=VALUE".into()),
    }
}

fn parse_timestamp(s: &str) -> Result<prost_types::Timestamp, String> {
    s.parse()
        .map_err(|_| "expected an RFC 3339 time such as 2027-01-01T09:00:00Z".into())
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if duration.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_consistent() {
        assert_eq!(Limits::default().validate(), Ok(()));
        let cli = Cli::parse_from(["redq", "serve"]);
        let Command::Serve(serve) = cli.command else {
            panic!("expected serve")
        };
        assert_eq!(serve.settings.limits.validate(), Ok(()));
        let (parsed, defaults) = (&serve.settings.limits, Limits::default());
        assert_eq!(parsed.default_ack_deadline, defaults.default_ack_deadline);
        assert_eq!(parsed.retry_max_backoff, defaults.retry_max_backoff);
        assert_eq!(parsed.max_delay, defaults.max_delay);
    }

    #[test]
    fn relations_between_limits_are_checked() {
        let limits = Limits {
            default_max_outstanding: 10,
            max_outstanding_limit: 5,
            ..Limits::default()
        };
        assert!(
            limits
                .validate()
                .unwrap_err()
                .contains("--max-outstanding-limit")
        );
    }
}
