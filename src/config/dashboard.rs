//! The dashboard's flags: whether `/ui/` is served, whether an open server
//! lets it change anything, and how long its sessions last.

use super::parse::parse_positive_duration;
use clap::Args;
use clap::builder::BoolishValueParser;
use std::time::Duration;

/// `--ui*` flags, shared by `serve` and `dev`.
#[derive(Debug, Clone, Args)]
pub struct Dashboard {
    /// Serve the web dashboard at /ui/ on the HTTP port (`--ui=false` turns it off).
    #[arg(
        long = "ui",
        env = "REDQ_UI",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        value_parser = BoolishValueParser::new(),
    )]
    pub enabled: bool,
    /// Without --auth-tokens-file the dashboard is read-only; this lets it
    /// redrive, purge, cancel and seek (anyone who reaches the port may).
    #[arg(long, env = "REDQ_UI_ALLOW_CHANGES")]
    pub ui_allow_changes: bool,
    /// How long a dashboard session lasts after its login.
    #[arg(long, env = "REDQ_UI_SESSION_TTL", default_value = "12h", value_parser = parse_positive_duration)]
    pub ui_session_ttl: Duration,
}
