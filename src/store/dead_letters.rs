//! A subscription's dead letters: a stream of the messages that used up their
//! delivery attempts, with how many there were and why the last one failed.

use super::hints::{Hinted, hint_args};
use super::scripts::REDRIVE_DEAD_LETTERS;
use super::stream::{
    Entry, as_array, decode_entry_with, entry_id_after, entry_time_ms, is_entry_id,
};
use super::{Store, TopicKeys};
use crate::error::{Error, Result};
use redis::Value;

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

impl Store {
    /// Up to `page_size` dead letters after the one with id `after` (from the oldest when None).
    pub async fn dead_letters(
        &self,
        keys: &TopicKeys,
        subscription: &str,
        after: Option<&str>,
        page_size: u32,
    ) -> Result<DeadLetterPage> {
        let start = match after {
            None => "-".to_owned(),
            Some(id) => match entry_id_after(id) {
                Some(next) => next,
                None => return Ok(DeadLetterPage::default()),
            },
        };
        let mut conn = self.connection().await?;
        let reply: Value = redis::cmd("XRANGE")
            .arg(keys.dead_letters(subscription))
            .arg(start)
            .arg("+")
            .arg("COUNT")
            .arg(page_size + 1)
            .query_async(&mut conn)
            .await?;
        let mut dead_letters = as_array(reply)?
            .into_iter()
            .map(decode_dead_letter)
            .collect::<Result<Vec<_>>>()?;
        let next_after = if dead_letters.len() > page_size as usize {
            dead_letters.truncate(page_size as usize);
            dead_letters.last().map(|d| d.id.clone())
        } else {
            None
        };
        Ok(DeadLetterPage {
            dead_letters,
            next_after,
        })
    }
}

impl Store {
    /// Gives up to `limit` dead letters (the oldest, or those in `ids`) back
    /// to their subscription; returns how many.
    pub async fn redrive_dead_letters(
        &self,
        keys: &TopicKeys,
        subscription: &str,
        ids: &[String],
        limit: u32,
    ) -> Result<u64> {
        let mut conn = self.connection().await?;
        Ok(REDRIVE_DEAD_LETTERS
            .key(keys.dead_letters(subscription))
            .key(keys.stream())
            .key(keys.watchers())
            .arg(subscription)
            .arg(limit)
            .arg(&hint_args(self, keys, Hinted::All)[..])
            .arg(ids)
            .invoke_async(&mut conn)
            .await?)
    }

    /// Deletes the dead letters in `ids`, or all of them when empty; returns how many.
    pub async fn purge_dead_letters(
        &self,
        keys: &TopicKeys,
        subscription: &str,
        ids: &[String],
    ) -> Result<u64> {
        let dlq = keys.dead_letters(subscription);
        let mut conn = self.connection().await?;
        if !ids.is_empty() {
            return Ok(redis::cmd("XDEL")
                .arg(&dlq)
                .arg(ids)
                .query_async(&mut conn)
                .await?);
        }
        let (count, _): (u64, i64) = redis::pipe()
            .atomic()
            .cmd("XLEN")
            .arg(&dlq)
            .cmd("DEL")
            .arg(&dlq)
            .query_async(&mut conn)
            .await?;
        Ok(count)
    }
}

fn decode_dead_letter(item: Value) -> Result<DeadLetter> {
    let mut parts = as_array(item)?.into_iter();
    let (Some(id), Some(fields)) = (parts.next(), parts.next()) else {
        return Err(Error::Corrupt("short dead letter".into()));
    };
    let (mut original_id, mut attempts, mut reason) = (None, 0, None);
    let mut entry = decode_entry_with(id, fields, |name, value| {
        let text = String::from_utf8(value).unwrap_or_default();
        match name {
            b"e" => original_id = Some(text),
            b"n" => attempts = text.parse().unwrap_or(0),
            b"r" => {
                reason = match text.as_str() {
                    "nacked" => Some(DeadLetterReason::Nacked),
                    "deadline_exceeded" => Some(DeadLetterReason::DeadlineExceeded),
                    _ => None,
                }
            }
            _ => {}
        }
    })?;
    let dead_letter_id = std::mem::take(&mut entry.id);
    let dead_lettered_ms = entry_time_ms(&dead_letter_id).unwrap_or(0);
    entry.id = original_id.filter(|id| is_entry_id(id)).ok_or_else(|| {
        Error::Corrupt(format!("dead letter {dead_letter_id} without its entry id"))
    })?;
    Ok(DeadLetter {
        id: dead_letter_id,
        entry,
        attempts,
        reason,
        dead_lettered_ms,
    })
}
