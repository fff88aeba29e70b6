//! Ack ids as clients send them back: arbitrary UTF-8 → `ack_id::parse`.
//! What parses names a lease; `encode` of that lease must parse back to the
//! same lease, tagged for the subscription it was encoded for.

#![no_main]

use libfuzzer_sys::fuzz_target;
use redq::broker::ack_id::{self, MAX_LEN};
use redq::model::is_entry_id;

/// Topic and subscription pairs to encode for; the separator keeps
/// `a` + `b.c` apart from `a.b` + `c`.
const SCOPES: &[(&str, &str)] = &[("orders", "billing"), ("a", "b.c"), ("a.b", "c")];

fuzz_target!(|text: &str| {
    let Some(parsed) = ack_id::parse(text) else {
        return;
    };
    assert!(text.len() <= MAX_LEN);
    assert_eq!(parsed.text, text);
    let lease = &parsed.lease;
    assert!(is_entry_id(&lease.entry_id), "{lease:?}");
    assert!(lease.attempt >= 1, "{lease:?}");
    assert!(!lease.consumer.is_empty() && !lease.consumer.contains('/'), "{lease:?}");
    // The same text, parsed again, is the same ack id.
    assert_eq!(ack_id::parse(text).as_ref(), Some(&parsed));

    for &(topic, subscription) in SCOPES {
        let encoded = ack_id::encode(lease, topic, subscription);
        match ack_id::parse(&encoded) {
            Some(again) => {
                assert_eq!(&again.lease, lease, "{encoded:?}");
                assert_eq!(again.text, encoded);
                assert!(again.issued_for(topic, subscription), "{encoded:?}");
                // `a`+`b.c` and `a.b`+`c` have different tags.
                if (topic, subscription) == ("a", "b.c") {
                    assert!(!again.issued_for("a.b", "c"), "{encoded:?}");
                }
            }
            // Only the length limit may refuse a re-encoded lease: an id of
            // the older form near MAX_LEN grows by the 9 bytes of the tag.
            None => assert!(encoded.len() > MAX_LEN, "{encoded:?} does not parse"),
        }
    }
});
