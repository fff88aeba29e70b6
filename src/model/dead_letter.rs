//! Dead letters: messages that used up their delivery attempts.

use super::Entry;

/// Why a message was dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterReason {
    Nacked,
    DeadlineExceeded,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// Id of the dead letter itself (its entry in the dead-letter stream).
    pub id: String,
    /// The message, as published; its `id` is its entry id in the topic stream.
    pub entry: Entry,
    pub attempts: u32,
    pub reason: Option<DeadLetterReason>,
    pub dead_lettered_ms: u64,
}

/// One page of dead letters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeadLetterPage {
    pub dead_letters: Vec<DeadLetter>,
    /// Where the next page starts; None on the last page.
    pub next_after: Option<String>,
}
