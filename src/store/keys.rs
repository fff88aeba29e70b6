//! The only place Redis key names are built.
//!
//! Every key of a topic carries the hash tag `{<topic>}` so that each Lua
//! script touches a single Redis Cluster slot.

/// Set of every topic name ever published or subscribed to.
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

    /// The stream holding the topic's messages; one consumer group per subscription.
    pub fn stream(&self) -> String {
        format!("redq:{{{}}}:stream", self.topic)
    }

    /// ZSET of the subscription's delivered, unacked entries: id → lease deadline (ms).
    pub fn leases(&self, subscription: &str) -> String {
        format!("redq:{{{}}}:leases:{}", self.topic, subscription)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_a_topic_share_one_hash_tag() {
        let keys = TopicKeys::new("orders");
        assert_eq!(keys.stream(), "redq:{orders}:stream");
        assert_eq!(keys.leases("billing"), "redq:{orders}:leases:billing");
        for key in [keys.stream(), keys.leases("x")] {
            assert!(key.contains("{orders}"));
        }
    }
}
