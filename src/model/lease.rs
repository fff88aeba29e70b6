//! Leases: one delivery of a message to a consumer (what an ack id stands
//! for), and the timer that ends the leases of a fetch's new deliveries.

/// One delivery of an entry to a consumer: what an ack id stands for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    pub entry_id: String,
    pub consumer: String,
    /// Delivery count of the entry when it was handed to `consumer`.
    pub attempt: u32,
}

/// The timer one fetch sets for the new entries it reads (fetch_deliveries.lua):
/// it ends the leases of the entries `first..=last` that `consumer` still
/// holds at delivery count 1 and that have no timer of their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchTimer {
    pub consumer: String,
    pub first: String,
    pub last: String,
}

/// What became of the ack ids of a stream's requests that asked for a
/// confirmation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckConfirmation {
    /// Applied: acked, handed back, or extended.
    pub acked_ids: Vec<String>,
    pub nacked_ids: Vec<String>,
    pub modified_ids: Vec<String>,
    /// Not applied: the delivery is no longer current.
    pub lost_ids: Vec<String>,
    /// Not ack ids redq issued.
    pub invalid_ids: Vec<String>,
}
