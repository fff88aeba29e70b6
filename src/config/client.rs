//! Arguments of the client subcommands (`publish`, `subscribe`, `schedule`,
//! `cancel`, `topics`, `stats`, `dlq`, `token`): the server they talk to,
//! how they prove themselves, and what each sends.

use super::Secret;
use super::parse::{parse_attribute, parse_positive_duration, parse_timestamp};
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

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
#[derive(Debug, Clone, Default, Args)]
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
    pub token: Option<Secret>,
}

/// Fields of the messages that `publish` and `schedule` send.
#[derive(Debug, Clone, Args)]
pub struct MessageArgs {
    /// Idempotency key: publishing it again within the dedupe window returns
    /// the first message's id (one message only: publish refuses it with
    /// --lines or --file).
    #[arg(long, value_name = "ID")]
    pub dedupe_id: Option<String>,
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
    #[arg(long, conflicts_with_all = ["file", "dedupe_id"])]
    pub lines: bool,
    /// Publish the messages of a JSON-lines file: one object per line with
    /// "payload" (or "payload_base64"), and optionally "attributes",
    /// "ordering_key", "dedupe_id", "delay" or "deliver_at".
    #[arg(long, value_name = "F.jsonl", conflicts_with = "dedupe_id")]
    pub file: Option<PathBuf>,
    /// Messages per Publish call (--lines, --file).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch: u32,
    /// Deliver after this delay (e.g. 10s, 5m); a --file line's own "delay"
    /// or "deliver_at" wins.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub delay: Option<Duration>,
    #[command(flatten)]
    pub message: MessageArgs,
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Debug, Args)]
pub struct SubscribeArgs {
    /// Topic to read from (with --pattern: a pattern of EPHEMERAL topics).
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
    /// TOPIC is a NATS-style pattern of EPHEMERAL topics (`sensors.*.temp`,
    /// `sensors.>`): print every matching topic's messages, each with its topic.
    #[arg(long)]
    pub pattern: bool,
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
#[command(
    group = clap::ArgGroup::new("due").required(true).args(["delay", "at"]),
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct ScheduleArgs {
    /// Create, replace or delete a recurring schedule instead.
    #[command(subcommand)]
    pub recurring: Option<RecurringCommand>,
    /// Topic to publish to (created on first use).
    #[arg(required = true)]
    pub topic: Option<String>,
    /// The message.
    #[arg(required = true)]
    pub payload: Option<String>,
    /// Deliver after this delay (e.g. 90s, 1h 30m).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub delay: Option<Duration>,
    /// Deliver at this time, RFC 3339 (e.g. 2027-01-01T09:00:00Z).
    #[arg(long, value_name = "RFC3339", value_parser = parse_timestamp)]
    pub at: Option<prost_types::Timestamp>,
    #[command(flatten)]
    pub message: MessageArgs,
    #[command(flatten)]
    pub server: ServerArg,
}

/// `redq schedule put|delete`: recurring schedules.
#[derive(Debug, Subcommand)]
pub enum RecurringCommand {
    /// Create a recurring schedule, or replace the one of that name.
    Put(SchedulePutArgs),
    /// Delete a recurring schedule.
    Delete(ScheduleNameArgs),
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("when").required(true).args(["cron", "every"]))]
pub struct SchedulePutArgs {
    /// Topic each run publishes to (created on first use).
    pub topic: String,
    /// The schedule's name within the topic.
    pub name: String,
    /// Cron expression: 5 fields, or 6 with seconds first.
    #[arg(long)]
    pub cron: Option<String>,
    /// Run at fixed intervals (e.g. 30s, 1h) from --start or the Unix epoch.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub every: Option<Duration>,
    /// IANA time zone of --cron (default UTC).
    #[arg(long, default_value = "")]
    pub time_zone: String,
    /// The payload each run publishes.
    #[arg(long)]
    pub payload: String,
    /// No runs before this time, RFC 3339.
    #[arg(long, value_name = "RFC3339", value_parser = parse_timestamp)]
    pub start: Option<prost_types::Timestamp>,
    /// No runs after this time, RFC 3339.
    #[arg(long, value_name = "RFC3339", value_parser = parse_timestamp)]
    pub end: Option<prost_types::Timestamp>,
    /// Put it paused: no runs until put again without --paused.
    #[arg(long)]
    pub paused: bool,
    /// Runs missed while no replica ran that are published, at most (default 1).
    #[arg(long, default_value_t = 0)]
    pub catch_up: u32,
    /// Attribute KEY=VALUE of each run's message (repeatable).
    #[arg(long = "attr", value_name = "KEY=VALUE", value_parser = parse_attribute)]
    pub attributes: Vec<(String, String)>,
    /// Ordering key of each run's message.
    #[arg(long, value_name = "KEY")]
    pub ordering_key: Option<String>,
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Debug, Args)]
pub struct ScheduleNameArgs {
    /// Topic of the schedule.
    pub topic: String,
    /// The schedule's name.
    pub name: String,
    #[command(flatten)]
    pub server: ServerArg,
}

#[derive(Debug, Args)]
pub struct SchedulesArgs {
    /// Topic whose recurring schedules to list.
    pub topic: String,
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
