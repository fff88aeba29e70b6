//! Command line and environment configuration: every flag has a `REDQ_*`
//! twin, and every value is checked before anything starts.

mod bench;
mod client;
mod dashboard;
mod parse;
mod secret;
mod security;
mod server;

pub use bench::{BenchArgs, BenchScenario};
pub use client::{
    CancelArgs, ClientTls, DlqArgs, DlqCommand, DlqTarget, MessageArgs, PublishArgs,
    RecurringCommand, ScheduleArgs, ScheduleNameArgs, SchedulePutArgs, SchedulesArgs, ServerArg,
    StartArg, StatsArgs, SubscribeArgs, TokenCommand, TokenCreateArgs, TopicsArgs,
};
pub use dashboard::Dashboard;
pub use secret::Secret;
pub use security::{ClientAuth, RedisArgs, RedisUrl, Security};
pub use server::{Durability, Limits, Settings};

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

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
    /// Publish one message to be delivered later; `schedule put|delete`
    /// manage recurring schedules.
    Schedule(ScheduleArgs),
    /// List a topic's recurring schedules with their next runs.
    Schedules(SchedulesArgs),
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

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address the gRPC server listens on.
    #[arg(long, env = "REDQ_LISTEN", default_value = "0.0.0.0:50051")]
    pub listen: SocketAddr,
    /// Address of the HTTP endpoint serving /metrics, /healthz, /readyz and the dashboard (/ui/).
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
    /// Address of the HTTP endpoint serving /metrics, /healthz, /readyz and the dashboard (/ui/).
    #[arg(long, env = "REDQ_METRICS_LISTEN", default_value = "127.0.0.1:9090")]
    pub metrics_listen: SocketAddr,
    /// Directory for the private Redis' socket, log and append-only file.
    #[arg(long, env = "REDQ_DEV_DIR", default_value = ".redq-dev")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub settings: Settings,
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
