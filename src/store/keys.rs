//! The only place Redis key names are built.
//!
//! Every key of a topic carries the hash tag `{<topic>}` so that each Lua
//! script touches a single Redis Cluster slot.

/// ZSET (all scores 0, so ordered by name) of every topic.
pub const TOPICS: &str = "redq:topics";

/// Pub/Sub channel on which replicas hint each other that work is ready.
pub const HINTS_CHANNEL: &str = "redq:hints";

/// The keys of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicKeys {
    topic: String,
}

impl TopicKeys {
    pub fn new(topic: &str) -> Self {
        Self {
            topic: topic.to_owned(),
        }
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The stream holding the topic's messages; one consumer group per subscription.
    pub fn stream(&self) -> String {
        format!("redq:{{{}}}:stream", self.topic)
    }

    /// HASH of the topic's settings and counters (`published`, `dropped`).
    pub fn settings(&self) -> String {
        format!("redq:{{{}}}:settings", self.topic)
    }

    /// HASH of the replicas with streams of the topic: replica → until when
    /// (Redis ms) it counts as watching, renewed while it does. The scripts
    /// that append hint the others on [`HINTS_CHANNEL`].
    pub fn watchers(&self) -> String {
        format!("redq:{{{}}}:watchers", self.topic)
    }

    /// ZSET of scheduled messages: message id → due time (ms).
    pub fn scheduled(&self) -> String {
        format!("redq:{{{}}}:scheduled", self.topic)
    }

    /// HASH of scheduled messages: message id → the encoded message (`m` field).
    pub fn scheduled_messages(&self) -> String {
        format!("redq:{{{}}}:scheduled:msgs", self.topic)
    }

    /// STRING holding the id of the message published with `dedupe_id`,
    /// expiring with the dedupe window.
    pub fn dedupe(&self, dedupe_id: &str) -> String {
        format!("redq:{{{}}}:dedupe:{}", self.topic, dedupe_id)
    }

    /// STRING of a publish request's dedupe id: the ids the request got.
    pub fn request_dedupe(&self, dedupe_id: &str) -> String {
        format!("redq:{{{}}}:dedupe-request:{}", self.topic, dedupe_id)
    }

    /// HASH of a subscription's settings (`ack`, `bmin`, `bmax`, `max`, `dlq`)
    /// and its `acked` counter.
    pub fn subscription(&self, subscription: &str) -> String {
        format!("redq:{{{}}}:sub:{}", self.topic, subscription)
    }

    /// ZSET of the subscription's pending entries: id → when something is due
    /// for it (the end of its lease, or its retry time while parked).
    pub fn timers(&self, subscription: &str) -> String {
        format!("redq:{{{}}}:sub:{}:timers", self.topic, subscription)
    }

    /// STREAM of the subscription's dead letters.
    pub fn dead_letters(&self, subscription: &str) -> String {
        format!("redq:{{{}}}:sub:{}:dlq", self.topic, subscription)
    }

    /// HASH of an ordered subscription's keys in use: ordering key → the
    /// entry that holds it (leased, or parked for a retry).
    pub fn key_holders(&self, subscription: &str) -> String {
        format!("redq:{{{}}}:sub:{}:holders", self.topic, subscription)
    }

    /// HASH, the other way round: holding entry id → its ordering key.
    pub fn held_keys(&self, subscription: &str) -> String {
        format!("redq:{{{}}}:sub:{}:held", self.topic, subscription)
    }

    /// ZSET (all scores 0) of an ordered subscription's entries waiting for
    /// their key: members `<key length>:<key> <entry id, zero-padded>`, so
    /// that one key's entries sort together, in stream order.
    pub fn blocked(&self, subscription: &str) -> String {
        format!("redq:{{{}}}:sub:{}:blocked", self.topic, subscription)
    }

    /// ZSET of an ordered subscription's entries that took their key after
    /// waiting and wait for a consumer now: entry id → when they took it.
    pub fn ready(&self, subscription: &str) -> String {
        format!("redq:{{{}}}:sub:{}:ready", self.topic, subscription)
    }

    /// The keys a lease operation on `subscription` touches, in script order.
    pub fn lease_keys(&self, subscription: &str) -> [String; 8] {
        [
            self.stream(),
            self.timers(subscription),
            self.subscription(subscription),
            self.dead_letters(subscription),
            self.key_holders(subscription),
            self.held_keys(subscription),
            self.blocked(subscription),
            self.ready(subscription),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_a_topic_share_one_hash_tag() {
        let keys = TopicKeys::new("orders");
        assert_eq!(keys.stream(), "redq:{orders}:stream");
        assert_eq!(keys.timers("billing"), "redq:{orders}:sub:billing:timers");
        let mut all = vec![
            keys.stream(),
            keys.scheduled(),
            keys.scheduled_messages(),
            keys.dedupe("d"),
            keys.request_dedupe("r"),
            keys.watchers(),
        ];
        all.extend(keys.lease_keys("billing"));
        for key in &all {
            assert!(key.contains("{orders}"));
        }
        // What a Redis Cluster computes: every key a script touches is in one slot.
        let slot = redis::cluster_routing::Slot::for_key(keys.stream());
        for key in all {
            assert_eq!(redis::cluster_routing::Slot::for_key(&key), slot, "{key}");
        }
    }
}
