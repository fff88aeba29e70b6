//! Messages: what a publisher hands over, what publishing it gave, what a
//! consumer reads back, and the kinds of message id (a stream entry id,
//! `<ms>-<seq>`, a scheduled message's `s<hex>`, and the `l<hex>` of a
//! message pushed onto a LIST topic's list).

use bytes::Bytes;
use std::collections::HashMap;
use std::time::Duration;

/// A message about to be published.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewMessage {
    pub payload: Bytes,
    pub attributes: HashMap<String, String>,
    pub ordering_key: String,
    /// Idempotency key; empty for none.
    pub dedupe_id: String,
    pub due: Due,
}

/// When a message should be delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Due {
    #[default]
    Now,
    /// At this time, in ms since the Unix epoch (by Redis' clock).
    At(u64),
    /// After this long, counted from when Redis runs the publish.
    After(Duration),
}

/// The outcome of publishing one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub message_id: String,
    /// The dedupe id was already used in the window; `message_id` is the original's.
    pub duplicate: bool,
    /// When the message is (or was) due, in ms since the epoch; for a
    /// duplicate, the original's (None when it cannot be told).
    pub due_ms: Option<u64>,
    /// How long until it is due, when it waits in the schedule rather than in the stream.
    pub scheduled_in: Option<Duration>,
}

/// One publish request's messages, with the request's own idempotency key
/// (empty for none): a retry of it within the dedupe window publishes
/// nothing and answers the first one's ids.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PublishBatch {
    pub dedupe_id: String,
    pub messages: Vec<NewMessage>,
}

/// A scheduled message not yet due, as the schedule holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledEntry {
    pub message_id: String,
    pub due_ms: u64,
    /// None when its fields are gone (cancelled or promoted between two reads).
    pub entry: Option<Entry>,
}

/// A message read back from a stream.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Entry {
    /// Stream entry id; it also carries the time the entry was appended.
    pub id: String,
    /// The id its publisher got: the entry id, or the scheduled message's id.
    pub message_id: String,
    /// Due time of a scheduled message, ms since the epoch.
    pub due_ms: Option<u64>,
    pub payload: Bytes,
    pub attributes: HashMap<String, String>,
    pub ordering_key: String,
}

impl Entry {
    /// Milliseconds since the Unix epoch at which Redis appended the entry.
    pub fn publish_time_ms(&self) -> u64 {
        entry_time_ms(&self.id).unwrap_or(0)
    }

    /// Approximate size on the wire, used to keep responses small enough for clients.
    pub fn wire_size(&self) -> usize {
        self.id.len()
            + self.message_id.len()
            + self.payload.len()
            + self.ordering_key.len()
            + self
                .attributes
                .iter()
                .map(|(k, v)| k.len() + v.len() + 4)
                .sum::<usize>()
            + 48
    }
}

/// Length of the random part of a scheduled message's id, in hex digits.
const SCHEDULED_ID_HEX: usize = 20;

/// A fresh id for a scheduled message: `s` and 80 random bits in hex. The
/// prefix tells scheduled ids from stream entry ids.
pub fn new_scheduled_id() -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("s{}", &random[..SCHEDULED_ID_HEX])
}

/// A fresh id for a message pushed onto a LIST topic's list: `l` and 80
/// random bits in hex. A list element carries no id (it is bytes only), so
/// this is the publisher's receipt alone: a consumer gets the id of the
/// stream entry the element became when redq took it.
pub fn new_pushed_id() -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("l{}", &random[..SCHEDULED_ID_HEX])
}

/// Whether `id` has the shape of a scheduled message id.
pub fn is_scheduled_id(id: &str) -> bool {
    id.len() == SCHEDULED_ID_HEX + 1
        && id.starts_with('s')
        && id[1..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// The time part of a stream entry id (`<ms>-<seq>`).
pub fn entry_time_ms(id: &str) -> Option<u64> {
    id.split_once('-')?.0.parse().ok()
}

/// The greatest possible entry id before `id` (`0-0` for the first): the
/// last one to skip so that `id` is read next.
pub fn entry_id_before(id: &str) -> String {
    let (ms, seq) = id
        .split_once('-')
        .and_then(|(ms, seq)| Some((ms.parse::<u64>().ok()?, seq.parse::<u64>().ok()?)))
        .unwrap_or((0, 0));
    match (ms, seq) {
        (0, 0) => "0-0".to_owned(),
        (ms, 0) => format!("{}-{}", ms - 1, u64::MAX),
        (ms, seq) => format!("{ms}-{}", seq - 1),
    }
}

/// The least possible entry id after `id`: the first to read so that `id` is
/// skipped; None after the greatest (Redis refuses `(` before it).
pub fn entry_id_after(id: &str) -> Option<String> {
    let (ms, seq) = parse_entry_id(id)?;
    match seq.checked_add(1) {
        Some(seq) => Some(format!("{ms}-{seq}")),
        None => Some(format!("{}-0", ms.checked_add(1)?)),
    }
}

/// The two numbers of a stream entry id Redis accepts, `<ms>-<seq>`.
/// Digits alone are not enough: Redis rejects `18446744073709551616-0`.
pub fn parse_entry_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if !digits(ms) || !digits(seq) {
        return None;
    }
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// Whether `id` is a stream entry id Redis accepts.
pub fn is_entry_id(id: &str) -> bool {
    parse_entry_id(id).is_some()
}

/// A scheduled message's new due time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rescheduled {
    pub due_ms: u64,
    /// Time from now until it is due (zero when already past).
    pub due_in: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduled_ids_are_told_from_entry_ids() {
        let id = new_scheduled_id();
        assert!(is_scheduled_id(&id), "{id}");
        assert!(!is_entry_id(&id));
        assert!(!is_scheduled_id("1700000000000-0"));
        assert_ne!(new_scheduled_id(), id);
    }

    #[test]
    fn the_id_before_an_entry_is_the_last_one_to_skip() {
        assert_eq!(entry_id_before("5-3"), "5-2");
        assert_eq!(entry_id_before("5-0"), format!("4-{}", u64::MAX));
        assert_eq!(entry_id_before("0-0"), "0-0");
        assert_eq!(entry_id_after("5-3").as_deref(), Some("5-4"));
        assert_eq!(
            entry_id_after(&format!("5-{}", u64::MAX)).as_deref(),
            Some("6-0")
        );
        assert_eq!(entry_id_after(&format!("{0}-{0}", u64::MAX)), None);
    }

    #[test]
    fn entry_ids_carry_their_time() {
        assert_eq!(entry_time_ms("1700000000123-7"), Some(1_700_000_000_123));
        assert!(is_entry_id("1-0"));
        assert!(!is_entry_id("1-"));
        assert!(!is_entry_id("x-1"));
        assert!(!is_entry_id("17"));
        assert!(is_entry_id("18446744073709551615-18446744073709551615"));
        for out_of_range in [
            "18446744073709551616-0",
            "99999999999999999999-0",
            "0-18446744073709551616",
            "+1-0",
        ] {
            assert!(!is_entry_id(out_of_range), "{out_of_range}");
        }
    }
}
