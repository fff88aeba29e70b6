//! A LIST topic's Redis list, which legacy producers `LPUSH` to: pushing
//! redq's own publishes onto it, the blocking move that waits for its next
//! element (on a connection of its own), giving it back what redq holds
//! when the topic goes, and its length. Taking elements from it is the
//! fetch's (lua/fetch_deliveries.lua); its elements become entries of the
//! topic stream from there on (see [`super::stream`]).

use super::replies::{as_array, as_int};
use super::scripts::{PUSH_ELEMENTS, RETURN_HELD_ELEMENTS};
use super::{Backend, Store, TopicKeys};
use crate::error::{Error, Result};
use crate::model::{Due, NewMessage, Published, new_pushed_id, new_scheduled_id};
use redis::Value;
use redis::aio::MultiplexedConnection;
use std::time::Duration;

/// A connection kept for one LIST topic's blocking moves.
pub struct BlockingConnection(MultiplexedConnection);

impl Store {
    /// Pushes messages onto a LIST topic's list, in order (the first is
    /// popped first), or into its schedule when due later; one script call.
    pub async fn push_elements(
        &self,
        keys: &TopicKeys,
        messages: &[NewMessage],
    ) -> Result<Vec<Published>> {
        let [list, _] = list_keys(keys)?;
        let mut invocation = PUSH_ELEMENTS.key(&list);
        invocation
            .key(keys.scheduled())
            .key(keys.scheduled_messages())
            .key(keys.settings());
        let mut ids = Vec::with_capacity(messages.len());
        for message in messages {
            let (kind, amount, id) = match message.due {
                Due::Now => ("n", 0, new_pushed_id()),
                Due::At(ms) => ("a", ms, new_scheduled_id()),
                Due::After(delay) => ("d", delay.as_millis() as u64, new_scheduled_id()),
            };
            invocation
                .arg(&id)
                .arg(kind)
                .arg(amount)
                .arg(message.payload.as_ref());
            ids.push(id);
        }
        let mut conn = self.shared();
        let reply: Value = invocation.invoke_async(&mut conn).await?;
        self.replicated(&mut conn, &list).await?;
        let mut reply = as_array(reply)?.into_iter();
        let now = as_int(reply.next().unwrap_or(Value::Nil))?;
        let dues = as_array(reply.next().unwrap_or(Value::Nil))?;
        if dues.len() != ids.len() {
            return Err(Error::Corrupt("push reply of the wrong length".into()));
        }
        ids.into_iter()
            .zip(dues)
            .map(|(message_id, due)| {
                let due = as_int(due)?;
                let scheduled_in = (due > now).then(|| Duration::from_millis((due - now) as u64));
                Ok(Published {
                    message_id,
                    duplicate: false,
                    due_ms: u64::try_from(due).ok(),
                    scheduled_in,
                })
            })
            .collect()
    }

    /// A connection of its own for blocking moves of up to `block`, with
    /// no response timeout shorter than that: not the shared connection,
    /// whose other calls would queue behind the block, nor the pool's.
    pub async fn blocking_connection(&self, block: Duration) -> Result<BlockingConnection> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(block + BLOCK_MARGIN));
        let client = match &self.backend {
            Backend::Standalone { client, .. } => client.clone(),
            Backend::Sentinel { connector, .. } => connector.master().await?,
            Backend::Cluster { .. } => {
                return Err(Error::FailedPrecondition {
                    field: "topic".into(),
                    reason: "LIST topics need a standalone or Sentinel Redis".into(),
                });
            }
        };
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(BlockingConnection(conn))
    }

    /// Waits up to `block` for an element of the topic's list and moves the
    /// oldest one (the RPOP end) onto its staging list, where the next fetch
    /// takes it first; true when one was moved. Atomic in Redis: were the
    /// reply lost, the element waits in the staging list.
    pub async fn move_to_staging(
        &self,
        conn: &mut BlockingConnection,
        keys: &TopicKeys,
        block: Duration,
    ) -> Result<bool> {
        let [list, staging] = list_keys(keys)?;
        let moved: Option<Vec<u8>> = redis::cmd("BLMOVE")
            .arg(list)
            .arg(staging)
            .arg("RIGHT")
            .arg("LEFT")
            .arg(block.as_secs_f64())
            .query_async(&mut conn.0)
            .await?;
        Ok(moved.is_some())
    }

    /// Moves what the staging list holds back onto the list's RPOP end, in
    /// its order (the oldest is popped first); returns how many. One
    /// element at a time, each move atomic: the staging list holds about
    /// one element per replica.
    pub async fn unstage(&self, keys: &TopicKeys) -> Result<u64> {
        let [list, staging] = list_keys(keys)?;
        let mut conn = self.connection().await?;
        let mut moved = 0;
        while moved < UNSTAGE_MAX {
            let element: Option<Vec<u8>> = redis::cmd("LMOVE")
                .arg(&staging)
                .arg(&list)
                .arg("LEFT")
                .arg("RIGHT")
                .query_async(&mut conn)
                .await?;
            if element.is_none() {
                break;
            }
            moved += 1;
        }
        Ok(moved)
    }

    /// Gives a LIST topic's list back what redq holds of it (see
    /// lua/return_held_elements.lua), with the dead letters of
    /// `subscriptions`; returns how many elements and dead letters.
    pub async fn return_held_elements(
        &self,
        keys: &TopicKeys,
        subscriptions: &[String],
    ) -> Result<(u64, u64)> {
        let [list, staging] = list_keys(keys)?;
        let mut invocation = RETURN_HELD_ELEMENTS.key(list);
        invocation.key(staging).key(keys.stream());
        for subscription in subscriptions {
            invocation.key(keys.dead_letters(subscription));
        }
        let mut conn = self.connection().await?;
        Ok(invocation.invoke_async(&mut conn).await?)
    }

    /// Elements waiting in a LIST topic's list and staging list: the part
    /// of its subscription's lag that is not in the stream yet.
    pub async fn list_length(&self, keys: &TopicKeys) -> Result<u64> {
        let [list, staging] = list_keys(keys)?;
        let mut conn = self.connection().await?;
        let (list, staging): (u64, u64) = redis::pipe()
            .cmd("LLEN")
            .arg(list)
            .cmd("LLEN")
            .arg(staging)
            .query_async(&mut conn)
            .await?;
        Ok(list + staging)
    }
}

/// Most elements [`Store::unstage`] moves in one call.
const UNSTAGE_MAX: u64 = 10_000;

/// How much longer than its block a blocking move may take to answer.
const BLOCK_MARGIN: Duration = Duration::from_secs(5);

fn list_keys(keys: &TopicKeys) -> Result<[String; 2]> {
    keys.list_keys()
        .ok_or_else(|| Error::Corrupt(format!("{} is not a LIST topic", keys.topic())))
}
