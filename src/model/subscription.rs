//! Subscriptions: where a new one starts, its settings and their changes,
//! how it retries, and its figures.

use std::time::Duration;

/// Where a new consumer group starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupStart {
    /// Every entry still in the stream.
    Earliest,
    /// Only entries appended after the group is created.
    Latest,
}

/// A subscription's settings as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionSettings {
    /// Ack deadline of streams that ask for none; None: the server default.
    pub ack_deadline: Option<Duration>,
    pub retry: RetryPolicy,
    pub dead_lettering: bool,
    /// Delivers in order per ordering key; fixed at creation.
    pub message_ordering: bool,
    /// Ordered subscriptions: the most entries waiting for their key before
    /// the subscription stops reading new entries.
    pub max_blocked: u64,
    /// A Pub/Sub filter on attributes (see `Filter`), checked when the
    /// subscription was created; empty for none. Fixed at creation.
    pub filter: String,
    pub limits: DeliveryLimits,
}

/// How fast and how wide the subscription is consumed, across all its
/// streams on all replicas; a zero removes a limit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DeliveryLimits {
    /// Deliveries per second, kept by a token bucket in Redis.
    pub max_deliveries_per_second: f64,
    /// The bucket's capacity; 0: the rate rounded up.
    pub burst: u32,
    /// Messages leased at once.
    pub max_outstanding: u32,
}

/// Blocked entries an ordered subscription holds at most, unless it says otherwise.
pub const DEFAULT_MAX_BLOCKED: u64 = 100_000;

/// Deliveries before dead-lettering of an ordered subscription created
/// without a limit while the server's default is unlimited.
pub const ORDERED_MAX_DELIVERY_ATTEMPTS: u32 = 10;

/// A change to a subscription's settings; None leaves a setting as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SubscriptionUpdate {
    pub ack_deadline: Option<Duration>,
    pub minimum_backoff: Option<Duration>,
    pub maximum_backoff: Option<Duration>,
    pub max_delivery_attempts: Option<u32>,
    pub dead_lettering: Option<bool>,
    pub max_blocked: Option<u64>,
    pub max_deliveries_per_second: Option<f64>,
    pub burst: Option<u32>,
    pub max_outstanding: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerStats {
    pub name: String,
    pub pending: u64,
    pub idle: Duration,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriptionStats {
    pub pending: u64,
    pub lag: u64,
    /// Age of the oldest message still pending, by its publish time.
    pub oldest_unacked_age: Option<Duration>,
    pub consumers: Vec<ConsumerStats>,
    pub dead_letters: u64,
    pub acked: u64,
    /// Ordered subscriptions only (else zero and None).
    pub ordering: OrderingStats,
    /// The token bucket holds back deliveries the subscription has
    /// messages and room for.
    pub rate_limited: bool,
    /// Its `max_outstanding` messages are leased.
    pub at_max_outstanding: bool,
}

/// How a subscription retries and when it gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub minimum_backoff: Duration,
    pub maximum_backoff: Duration,
    /// Deliveries before a message is dead-lettered; 0 for unlimited.
    pub max_delivery_attempts: u32,
}

/// The state of an ordered subscription's keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrderingStats {
    /// Ordering keys held by a delivery (leased or waiting for its retry).
    pub active_keys: u64,
    /// Entries waiting for their key.
    pub blocked: u64,
    /// Age of the oldest entry waiting, for its key or (once it took its
    /// key) for a consumer with room, by publish time.
    pub oldest_blocked_age: Option<Duration>,
    /// At the subscription's `max_blocked`: no new entries are read.
    pub at_blocked_cap: bool,
}
