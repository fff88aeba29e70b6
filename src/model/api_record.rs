//! Resources a second API keeps beside redq's own: a Google Pub/Sub topic
//! or subscription is a redq topic or subscription plus the fields Pub/Sub
//! has and redq does not (labels, policies, its name), kept as the API
//! stored them.

/// Which of a Pub/Sub project's resources a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PubSubRecord {
    Topic,
    Subscription,
}
