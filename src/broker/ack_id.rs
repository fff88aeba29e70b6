//! Ack ids: the opaque handle a client gets with each delivery. It names the
//! stream entry, the consumer it was handed to, the delivery count at that
//! time and the subscription it was issued for, so any replica can tell
//! whether the caller still holds the lease, and an ack id never acts on
//! another subscription's or topic's delivery (entry ids repeat across topics:
//! two topics' first messages of one millisecond are both `<ms>-0`).
//!
//! Format: `<entry id>/<delivery count>/<consumer>/<scope tag>`. Consumer names
//! cannot contain `/` (names are checked where requests come in), so the split is
//! unambiguous. Ids of the older form without the tag are still accepted:
//! their consumer name (unique per stream) is checked all the same.

use crate::model::{Lease, is_entry_id};

/// Longest ack id redq issues: a 41-byte entry id, a 10-digit count, a
/// 213-byte consumer name, an 8-digit tag and the separators, rounded up.
pub const MAX_LEN: usize = 300;

/// A parsed ack id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckId {
    pub lease: Lease,
    /// The scope tag; None in ack ids of the older form.
    tag: Option<u32>,
    /// The ack id as the client sent it, for error messages.
    pub text: String,
}

impl AckId {
    /// The ack id of `lease`, a delivery of `subscription` on `topic`.
    pub fn issued(lease: Lease, topic: &str, subscription: &str) -> Self {
        Self {
            text: encode(&lease, topic, subscription),
            tag: Some(scope_tag(topic, subscription)),
            lease,
        }
    }

    /// Whether this ack id was issued by a stream of `subscription` on `topic`.
    pub fn issued_for(&self, topic: &str, subscription: &str) -> bool {
        self.tag
            .is_none_or(|tag| tag == scope_tag(topic, subscription))
    }
}

/// The ack id of `lease`, a delivery of `subscription` on `topic`.
pub fn encode(lease: &Lease, topic: &str, subscription: &str) -> String {
    format!(
        "{}/{}/{}/{:08x}",
        lease.entry_id,
        lease.attempt,
        lease.consumer,
        scope_tag(topic, subscription)
    )
}

/// Parses an ack id; `None` when it is not one redq handed out.
pub fn parse(ack_id: &str) -> Option<AckId> {
    if ack_id.len() > MAX_LEN {
        return None;
    }
    let mut parts = ack_id.split('/');
    let entry_id = parts.next().filter(|id| is_entry_id(id))?;
    let attempt = parts.next()?.parse().ok().filter(|&n: &u32| n >= 1)?;
    let consumer = parts.next().filter(|c| !c.is_empty())?;
    let tag = match parts.next() {
        None => None,
        Some(tag) if tag.len() == 8 => Some(u32::from_str_radix(tag, 16).ok()?),
        Some(_) => return None,
    };
    if parts.next().is_some() {
        return None;
    }
    Some(AckId {
        lease: Lease {
            entry_id: entry_id.to_owned(),
            consumer: consumer.to_owned(),
            attempt,
        },
        tag,
        text: ack_id.to_owned(),
    })
}

/// 32 bits of FNV-1a over the topic and subscription names (which cannot
/// contain a newline): enough to tell subscriptions apart; the lease check in
/// Redis (consumer and delivery count) does the rest.
fn scope_tag(topic: &str, subscription: &str) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let bytes = topic.bytes().chain([b'\n']).chain(subscription.bytes());
    let hash = bytes.fold(OFFSET, |hash, b| (hash ^ u64::from(b)).wrapping_mul(PRIME));
    (hash ^ (hash >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> Lease {
        Lease {
            entry_id: "1700000000000-3".into(),
            consumer: "worker.1-ab12cd34ef56".into(),
            attempt: 2,
        }
    }

    #[test]
    fn ack_ids_round_trip_and_name_their_subscription() {
        let id = encode(&lease(), "orders", "billing");
        assert!(id.starts_with("1700000000000-3/2/worker.1-ab12cd34ef56/"));
        let parsed = parse(&id).expect("parses");
        assert_eq!(parsed.lease, lease());
        assert!(parsed.issued_for("orders", "billing"));
        assert!(!parsed.issued_for("orders", "shipping"));
        assert!(!parsed.issued_for("orders2", "billing"));
        // The separator keeps "a"+"b.c" apart from "a.b"+"c".
        assert_ne!(scope_tag("a", "b.c"), scope_tag("a.b", "c"));
    }

    #[test]
    fn ack_ids_of_the_older_form_are_accepted() {
        let parsed = parse("1700000000000-3/2/worker.1-ab12cd34ef56").expect("parses");
        assert_eq!(parsed.lease, lease());
        assert!(parsed.issued_for("any", "thing"));
    }

    #[test]
    fn malformed_ack_ids_are_rejected() {
        let long = format!("1-0/1/{}", "c".repeat(MAX_LEN));
        for bad in [
            "",
            "x",
            "1-0",
            "1-0/1",
            "1-0/1/",
            "1-0/0/c",
            "1-0/x/c",
            "a-0/1/c",
            "1-0/-1/c",
            "1-0/1/c/",
            "1-0/1/c/xyz",
            "1-0/1/c/0000000g",
            "1-0/1/c/00000000/x",
            "99999999999999999999-0/1/c",
            "18446744073709551616-0/1/c",
            "0-18446744073709551616/1/c",
            &long,
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
