//! The hints replicas send each other on one Redis Pub/Sub channel, and the
//! registry of which replicas watch a topic, so that a publish hints only
//! when another replica has streams waiting for the topic.
//!
//! Hints are only hints: a lost one delays a delivery until the receiving
//! stream's next periodic check, never loses it.

use super::Store;
use super::keys::{HINTS_CHANNEL, TopicKeys};
use super::scripts::WATCH_TOPIC;
use crate::error::Result;
use std::time::Duration;

/// How often a replica renews its place among a topic's watchers.
pub const WATCH_RENEWAL: Duration = Duration::from_secs(5);
/// How long a place lasts without renewal: a replica that died stops being
/// hinted after this long (the scripts that append forget it then).
pub const WATCH_TTL: Duration = Duration::from_secs(20);

#[derive(Debug, PartialEq, Eq)]
pub enum Hint<'a> {
    /// The topic has entries (appended, or deliveries handed back): its
    /// streams must fetch.
    Topic(&'a str),
    /// The consumer has room again.
    Consumer(&'a str),
    /// The topic has a scheduled message due in this many ms.
    Scheduled(&'a str, u64),
}

impl Hint<'_> {
    pub fn encode(&self) -> String {
        match self {
            Hint::Topic(topic) => format!("t:{topic}"),
            Hint::Consumer(consumer) => format!("c:{consumer}"),
            Hint::Scheduled(topic, ms) => format!("s:{ms}:{topic}"),
        }
    }

    pub fn decode(text: &str) -> Option<Hint<'_>> {
        match text.split_once(':')? {
            ("t", topic) => Some(Hint::Topic(topic)),
            ("c", consumer) => Some(Hint::Consumer(consumer)),
            ("s", rest) => {
                let (ms, topic) = rest.split_once(':')?;
                Some(Hint::Scheduled(topic, ms.parse().ok()?))
            }
            _ => None,
        }
    }
}

/// Who an appending script hints: the other replicas that watch the topic,
/// or all of them (a replica that appended without waking its own streams,
/// as the promoter does). Passed to the script as its ARGV `me`, channel
/// and hint.
#[derive(Debug, Clone, Copy)]
pub enum Hinted {
    Others,
    All,
}

impl Store {
    /// Sends a hint to every replica.
    pub async fn publish_hint(&self, hint: &Hint<'_>) -> Result<()> {
        let mut conn = self.connection().await?;
        let _: i64 = redis::cmd("PUBLISH")
            .arg(HINTS_CHANNEL)
            .arg(hint.encode())
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Puts (or keeps) this replica among the watchers of `keys`' topic for
    /// [`WATCH_TTL`]; true when it was not there (new, or lost with
    /// Redis' data), so that its streams look for what they were not hinted.
    pub async fn watch_topic(&self, keys: &TopicKeys) -> Result<bool> {
        let mut conn = self.connection().await?;
        let added: i64 = WATCH_TOPIC
            .key(keys.watchers())
            .arg(self.replica())
            .arg(WATCH_TTL.as_millis() as u64)
            .invoke_async(&mut conn)
            .await?;
        Ok(added == 1)
    }

    /// Takes this replica off the watchers of `keys`' topic.
    pub async fn unwatch_topic(&self, keys: &TopicKeys) -> Result<()> {
        let mut conn = self.connection().await?;
        let _: i64 = redis::cmd("HDEL")
            .arg(keys.watchers())
            .arg(self.replica())
            .query_async(&mut conn)
            .await?;
        Ok(())
    }
}

/// The ARGV an appending script takes to hint the topic's watchers: who
/// appends (`''` hints all of them), the channel, the hint.
pub(crate) fn hint_args(store: &Store, keys: &TopicKeys, hinted: Hinted) -> [String; 3] {
    let me = match hinted {
        Hinted::Others => store.replica().to_owned(),
        Hinted::All => String::new(),
    };
    [
        me,
        HINTS_CHANNEL.to_owned(),
        Hint::Topic(keys.topic()).encode(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_round_trip() {
        for hint in [
            Hint::Topic("orders.eu"),
            Hint::Consumer("w-1"),
            Hint::Scheduled("orders", 250),
        ] {
            assert_eq!(Hint::decode(&hint.encode()), Some(hint));
        }
        assert!(Hint::decode("x:y").is_none());
        assert!(Hint::decode("nothing").is_none());
    }
}
