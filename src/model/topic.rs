//! Topics: their settings and figures.

use std::time::Duration;

/// A topic's settings; None leaves the server's default in force.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicSettings {
    pub retention_max_age: Option<Duration>,
    pub retention_max_length: Option<u64>,
    pub hard_max_length: Option<u64>,
    pub dedupe_window: Option<Duration>,
    pub max_payload_bytes: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicStats {
    pub stream_length: u64,
    pub scheduled: u64,
    pub next_due_ms: Option<u64>,
    pub published: u64,
    pub dropped: u64,
}

/// What a topic keeps its messages in; fixed when the topic is created.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum TopicKind {
    /// A Redis stream: durable, fan-out to subscriptions, leases and acks.
    #[default]
    Stream,
    /// Redis Pub/Sub: live fan-out to the streams open at publish time.
    Ephemeral,
    /// An existing Redis list that legacy producers `LPUSH` to: one
    /// subscription, with leases and acks.
    List { key: String },
}

impl TopicKind {
    /// The kind's name as the API and the CLI say it.
    pub fn name(&self) -> &'static str {
        match self {
            TopicKind::Stream => "STREAM",
            TopicKind::Ephemeral => "EPHEMERAL",
            TopicKind::List { .. } => "LIST",
        }
    }
}
