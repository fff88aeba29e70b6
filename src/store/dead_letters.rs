//! A subscription's dead letters: a stream of the messages that used up their
//! delivery attempts, with how many there were and why the last one failed.

use super::hints::{Hinted, hint_args};
use super::replies::as_array;
use super::scripts::REDRIVE_DEAD_LETTERS;
use super::stream::decode_entry_with;
use super::{Store, TopicKeys};
use crate::error::{Error, Result};
use crate::model::{DeadLetter, DeadLetterPage, DeadLetterReason};
use crate::model::{entry_id_after, entry_time_ms, is_entry_id};
use redis::Value;

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
    /// to their subscription (a LIST topic's, onto its list); returns how many.
    pub async fn redrive_dead_letters(
        &self,
        keys: &TopicKeys,
        subscription: &str,
        ids: &[String],
        limit: u32,
    ) -> Result<u64> {
        let mut conn = self.connection().await?;
        let mut invocation = REDRIVE_DEAD_LETTERS.key(keys.dead_letters(subscription));
        invocation.key(keys.stream()).key(keys.watchers());
        if let Some([list, _]) = keys.list_keys() {
            invocation.key(list);
        }
        Ok(invocation
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
