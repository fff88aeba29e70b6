//! Ack ids: the opaque handle a client gets with each delivery. It names the
//! stream entry, the consumer it was handed to and the delivery count at that
//! time, so any replica can tell whether the caller still holds the lease.
//!
//! Format: `<entry id>/<delivery count>/<consumer>`. Consumer names cannot
//! contain `/` (see `grpc::convert::check_name`), so the split is unambiguous.

use crate::store::leases::Lease;
use crate::store::stream::is_entry_id;

pub fn encode(lease: &Lease) -> String {
    format!("{}/{}/{}", lease.entry_id, lease.attempt, lease.consumer)
}

/// Parses an ack id; `None` when it is not one redq handed out.
pub fn parse(ack_id: &str) -> Option<Lease> {
    let mut parts = ack_id.splitn(3, '/');
    let entry_id = parts.next().filter(|id| is_entry_id(id))?;
    let attempt = parts.next()?.parse().ok().filter(|&n: &u32| n >= 1)?;
    let consumer = parts.next().filter(|c| !c.is_empty())?;
    Some(Lease {
        entry_id: entry_id.to_owned(),
        consumer: consumer.to_owned(),
        attempt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_ids_round_trip() {
        let lease = Lease {
            entry_id: "1700000000000-3".into(),
            consumer: "worker.1-ab12cd34ef56".into(),
            attempt: 2,
        };
        assert_eq!(encode(&lease), "1700000000000-3/2/worker.1-ab12cd34ef56");
        assert_eq!(parse(&encode(&lease)), Some(lease));
    }

    #[test]
    fn malformed_ack_ids_are_rejected() {
        for bad in [
            "", "x", "1-0", "1-0/1", "1-0/1/", "1-0/0/c", "1-0/x/c", "a-0/1/c", "1-0/-1/c",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
