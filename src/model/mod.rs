//! The domain's types: what a message, a topic, a subscription, a lease and
//! a dead letter are to redq, whichever API names them and however Redis
//! keeps them. `grpc/` converts requests into these and answers from them;
//! `broker/` works with them; `store/` reads and writes them.

mod api_record;
mod dead_letter;
mod filter;
mod lease;
mod message;
mod pattern;
mod schedule;
mod subscription;
mod topic;

pub use api_record::PubSubRecord;
pub use dead_letter::{DeadLetter, DeadLetterPage, DeadLetterReason};
pub use filter::Filter;
pub use lease::{AckConfirmation, BatchTimer, Lease};
pub use message::{
    Due, Entry, NewMessage, PublishBatch, Published, Rescheduled, ScheduledEntry, entry_id_after,
    entry_id_before, entry_time_ms, is_entry_id, is_scheduled_id, new_pushed_id, new_scheduled_id,
    parse_entry_id,
};
pub use pattern::Pattern;
pub use schedule::{
    DueRuns, MAX_CATCH_UP, Recurrence, RecurrenceError, SCHEDULE_ATTRIBUTE,
    SCHEDULED_TIME_ATTRIBUTE, Schedule, ScheduleMessage, ScheduleSpec, ScheduleState, rfc3339_utc,
};
pub use subscription::{
    ConsumerStats, DEFAULT_MAX_BLOCKED, DeliveryLimits, GroupStart, ORDERED_MAX_DELIVERY_ATTEMPTS,
    OrderingStats, RetryPolicy, SubscriptionSettings, SubscriptionStats, SubscriptionUpdate,
};
pub use topic::{TopicKind, TopicSettings, TopicStats};
