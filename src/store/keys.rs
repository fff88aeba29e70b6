//! The only place Redis key names are built.
//!
//! Every key of a topic carries the hash tag `{<topic>}` so that each Lua
//! script touches a single Redis Cluster slot. A LIST topic's list is the
//! user's key, not redq's; LIST topics are refused on a cluster.

use crate::model::{PubSubRecord, TopicKind};

/// ZSET (all scores 0, so ordered by name) of every topic.
pub const TOPICS: &str = "redq:topics";

/// HASH of the Redis lists that LIST topics consume: list key → topic.
pub const LISTS: &str = "redq:lists";

/// ZSET (all scores 0) of the topics that have had recurring schedules, so
/// that replicas look for due runs in those only.
pub const SCHEDULED_TOPICS: &str = "redq:schedules";

/// Pub/Sub channel on which replicas hint each other that work is ready.
pub const HINTS_CHANNEL: &str = "redq:hints";

/// Prefix of the Pub/Sub channels of EPHEMERAL topics: `redq:ephemeral:<topic>`.
pub const EPHEMERAL_CHANNELS: &str = "redq:ephemeral:";

/// The channel pattern every pattern stream of a replica shares: Redis ACLs
/// compare a PSUBSCRIBE pattern literally with the allowed ones, so one
/// fixed pattern (`&redq:ephemeral:*`) is what a least-privilege user can
/// be granted; each stream filters by its own NATS-style pattern.
pub const EVERY_EPHEMERAL_CHANNEL: &str = "redq:ephemeral:*";

/// STRING of a dashboard session, by the hex SHA-256 of its cookie (never
/// the cookie itself, so that reading Redis does not give a session away):
/// the hex SHA-256 of the token it logged in with; it expires with the session.
pub fn dashboard_session(id_hash: &str) -> String {
    format!("redq:ui:session:{id_hash}")
}

/// STRING claimed (`SET NX PX`) by the replica that samples the dashboard's
/// charts in the current interval: one replica a time, whichever runs.
pub const DASHBOARD_SAMPLER: &str = "redq:ui:sampler";

/// ZSET of the replicas that ran lately: name → when it last said so (ms).
pub const REPLICAS: &str = "redq:replicas";

/// HASH of a Google Pub/Sub project's topics or subscriptions: id → the
/// resource as the Pub/Sub API last stored it (protobuf). One hash tag per
/// project, so a project's records share a Cluster slot.
pub fn pubsub_records(project: &str, kind: PubSubRecord) -> String {
    let kind = match kind {
        PubSubRecord::Topic => "topics",
        PubSubRecord::Subscription => "subscriptions",
    };
    format!("redq:pubsub:{{{project}}}:{kind}")
}

/// The topic an EPHEMERAL channel belongs to.
pub fn topic_of_channel(channel: &str) -> Option<&str> {
    channel.strip_prefix(EPHEMERAL_CHANNELS)
}

/// The keys of one topic; for a LIST topic, also the Redis list it consumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicKeys {
    topic: String,
    /// A LIST topic's list: a key of the user's, outside redq's names.
    list: Option<String>,
}

impl TopicKeys {
    pub fn new(topic: &str) -> Self {
        Self {
            topic: topic.to_owned(),
            list: None,
        }
    }

    /// The keys of a topic of `kind`: a LIST topic's include its list.
    pub fn of_kind(topic: &str, kind: &TopicKind) -> Self {
        Self {
            topic: topic.to_owned(),
            list: match kind {
                TopicKind::List { key } => Some(key.clone()),
                TopicKind::Stream | TopicKind::Ephemeral => None,
            },
        }
    }

    /// A LIST topic's list and its [`Self::staging`] list; None for other kinds.
    pub fn list_keys(&self) -> Option<[String; 2]> {
        Some([self.list.clone()?, self.staging()])
    }

    /// LIST of a LIST topic's elements that a replica's blocking move took
    /// off the topic's list (see `broker/list/`), for the next fetch to
    /// take first: an element there is never lost when that replica dies.
    pub fn staging(&self) -> String {
        format!("redq:{{{}}}:list:staging", self.topic)
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The stream holding the topic's messages; one consumer group per subscription.
    pub fn stream(&self) -> String {
        format!("redq:{{{}}}:stream", self.topic)
    }

    /// The Pub/Sub channel of an EPHEMERAL topic.
    pub fn channel(&self) -> String {
        format!("{EPHEMERAL_CHANNELS}{}", self.topic)
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

    /// ZSET (all scores 0, so ordered by name) of the topic's recurring schedules.
    pub fn schedules(&self) -> String {
        format!("redq:{{{}}}:schedules", self.topic)
    }

    /// ZSET of the recurring schedules that will run: name → next nominal
    /// time (ms). Paused and finished schedules are not in it.
    pub fn schedules_due(&self) -> String {
        format!("redq:{{{}}}:schedules:due", self.topic)
    }

    /// HASH of one recurring schedule: `spec` (protobuf), `v` (version,
    /// bumped by every change), `next`, `last` (ms) and `runs`.
    pub fn schedule(&self, name: &str) -> String {
        format!("redq:{{{}}}:schedule:{}", self.topic, name)
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

    /// One of the subscription's own keys: `redq:{<topic>}:sub:<name>:<part>`.
    fn of_subscription(&self, subscription: &str, part: &str) -> String {
        format!("redq:{{{}}}:sub:{}:{}", self.topic, subscription, part)
    }

    /// ZSET of the subscription's pending entries: id → when something is due
    /// for it (the end of its lease, or its retry time while parked).
    pub fn timers(&self, subscription: &str) -> String {
        self.of_subscription(subscription, "timers")
    }

    /// STREAM of the subscription's dead letters.
    pub fn dead_letters(&self, subscription: &str) -> String {
        self.of_subscription(subscription, "dlq")
    }

    /// LIST of the subscription's dashboard samples, newest first: one line
    /// per interval (`<ms> <published> <acked> <lag> <pending> <oldest age ms>`).
    pub fn samples(&self, subscription: &str) -> String {
        self.of_subscription(subscription, "samples")
    }

    /// HASH of an ordered subscription's keys in use: ordering key → the
    /// entry that holds it (leased, or parked for a retry).
    pub fn key_holders(&self, subscription: &str) -> String {
        self.of_subscription(subscription, "holders")
    }

    /// HASH, the other way round: holding entry id → its ordering key.
    pub fn held_keys(&self, subscription: &str) -> String {
        self.of_subscription(subscription, "held")
    }

    /// ZSET (all scores 0) of an ordered subscription's entries waiting for
    /// their key: members `<key length>:<key> <entry id, zero-padded>`, so
    /// that one key's entries sort together, in stream order.
    pub fn blocked(&self, subscription: &str) -> String {
        self.of_subscription(subscription, "blocked")
    }

    /// ZSET of an ordered subscription's entries that took their key after
    /// waiting and wait for a consumer now: entry id → when they took it.
    pub fn ready(&self, subscription: &str) -> String {
        self.of_subscription(subscription, "ready")
    }

    /// The keys a lease operation on `subscription` touches, in script
    /// order; on a LIST topic, then its list and staging list (see
    /// [`Self::list_keys`]): the scripts take their new entries from the
    /// list, and delete the entries they are done with.
    pub fn lease_keys(&self, subscription: &str) -> Vec<String> {
        let mut keys = vec![
            self.stream(),
            self.timers(subscription),
            self.subscription(subscription),
            self.dead_letters(subscription),
            self.key_holders(subscription),
            self.held_keys(subscription),
            self.blocked(subscription),
            self.ready(subscription),
        ];
        keys.extend(self.list_keys().into_iter().flatten());
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_a_topic_share_one_hash_tag() {
        let keys = TopicKeys::new("orders");
        assert_eq!(keys.stream(), "redq:{orders}:stream");
        assert_eq!(keys.lease_keys("billing").len(), 8);
        assert_eq!(keys.timers("billing"), "redq:{orders}:sub:billing:timers");
        let mut all = vec![
            keys.stream(),
            keys.scheduled(),
            keys.scheduled_messages(),
            keys.dedupe("d"),
            keys.request_dedupe("r"),
            keys.watchers(),
            keys.staging(),
            keys.samples("billing"),
            keys.schedules(),
            keys.schedules_due(),
            keys.schedule("nightly"),
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

    #[test]
    fn a_list_topics_lease_keys_end_with_its_list_and_staging_list() {
        let kind = TopicKind::List {
            key: "queue:jobs".into(),
        };
        let keys = TopicKeys::of_kind("jobs", &kind);
        let lease_keys = keys.lease_keys("workers");
        assert_eq!(
            lease_keys[8..],
            [
                "queue:jobs".to_owned(),
                "redq:{jobs}:list:staging".to_owned()
            ]
        );
        assert!(
            TopicKeys::of_kind("jobs", &TopicKind::Stream)
                .list_keys()
                .is_none()
        );
    }
}
