//! Gauges of ordered subscriptions, read at scrape time: keys in use, entries
//! waiting for their key, and whether a subscription reached its cap.

use super::{SubscriptionLabels, set_count};
use crate::model::OrderingStats;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Default)]
pub struct OrderingGauges {
    active_keys: Family<SubscriptionLabels, Gauge>,
    blocked: Family<SubscriptionLabels, Gauge>,
    oldest_blocked: Family<SubscriptionLabels, Gauge<f64, AtomicU64>>,
    at_blocked_cap: Family<SubscriptionLabels, Gauge>,
}

impl OrderingGauges {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "redq_ordering_active_keys",
            "Ordering keys of an ordered subscription held by a delivery (leased or waiting for a retry), read at scrape time",
            self.active_keys.clone(),
        );
        r.register(
            "redq_ordering_blocked_entries",
            "Entries of an ordered subscription waiting for their ordering key, read at scrape time",
            self.blocked.clone(),
        );
        r.register(
            "redq_ordering_oldest_blocked_age_seconds",
            "Age of the oldest entry waiting for its ordering key (since it entered the stream), read at scrape time",
            self.oldest_blocked.clone(),
        );
        r.register(
            "redq_ordering_blocked_cap_reached",
            "1 while an ordered subscription holds max_blocked blocked entries and reads no new ones, read at scrape time",
            self.at_blocked_cap.clone(),
        );
    }

    pub fn clear(&self) {
        self.active_keys.clear();
        self.blocked.clear();
        self.oldest_blocked.clear();
        self.at_blocked_cap.clear();
    }

    /// Sets the gauges of one subscription; unordered ones (nothing held,
    /// nothing blocked) get none.
    pub fn set(&self, labels: &SubscriptionLabels, stats: &OrderingStats) {
        if stats.active_keys == 0 && stats.blocked == 0 {
            return;
        }
        set_count(&self.active_keys, labels, stats.active_keys);
        set_count(&self.blocked, labels, stats.blocked);
        self.oldest_blocked.get_or_create(labels).set(
            stats
                .oldest_blocked_age
                .map_or(0.0, |age| age.as_secs_f64()),
        );
        self.at_blocked_cap
            .get_or_create(labels)
            .set(i64::from(stats.at_blocked_cap));
    }
}
