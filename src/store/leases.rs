//! Deliveries and their leases: a consumer group's pending
//! entries plus a ZSET of timers per subscription (when a lease ends, or when
//! a parked entry is due for retry). A lease ends with an ack; or it runs
//! out or is nacked, and the entry waits out its retry backoff (or goes to
//! the dead letters after its last attempt) before the next consumer gets it.

use super::replies::{as_array, as_int, as_string};
use super::scripts::{
    ACK, END_LEASES, EXTEND_LEASES, FETCH_DELIVERIES, Invocation, PRUNE_CONSUMERS,
    RELEASE_CONSUMER, RETURN_UNSENT,
};
use super::stream::decode_entry;
use super::{Connection, Store, TopicKeys};
use crate::error::{Error, Result};
use crate::model::{BatchTimer, Lease};
use crate::model::{Entry, parse_entry_id};
use redis::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// What a consumer fetches.
#[derive(Debug, Default)]
pub struct Fetched {
    pub deliveries: Vec<(Entry, u32)>,
    /// Time until the next timer this consumer could act on is due.
    pub next_expiry: Option<Duration>,
    /// Whether the consumer may take more deliveries now.
    pub has_room: bool,
    /// Redis' clock when the deliveries were fetched, ms since the epoch.
    pub now_ms: u64,
    /// Entries of the subscription this fetch dead-lettered (last lease ran out).
    pub dead_lettered: u64,
    /// The byte limit, or the most entries one fetch reads, stopped the
    /// fetch; more may be waiting.
    pub more_waiting: bool,
    /// Ordering keys the fetch handed to their next entry (an entry
    /// dead-lettered or gone, or acked by riding acks): deliveries another
    /// stream may take.
    pub keys_handed: u64,
    /// What the acks that rode on the fetch did, if any rode.
    pub acked: Option<Result<Acked>>,
    /// The batch timer the fetch set for the new entries it read, if any.
    pub batch: Option<NewBatch>,
}

/// A fetch's batch timer, with how many of its deliveries it covers: the
/// last ones of [`Fetched::deliveries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBatch {
    pub timer: BatchTimer,
    pub covers: usize,
}

/// Acks to apply: leases of one subscription.
#[derive(Debug, Clone, Default)]
pub struct AckRequest {
    pub leases: Vec<Lease>,
    /// Whether the entry ids of the deliveries acked are wanted.
    pub listed: bool,
    /// Batch timers whose deliveries the acking stream has all acked (these
    /// acks included), nacked or extended: dropped once Redis agrees that
    /// they cover nothing, instead of waiting for a fetch to settle them
    /// when they fall due.
    pub finished: Vec<BatchTimer>,
}

/// What an ack did.
#[derive(Debug, Default)]
pub struct Acked {
    /// Deliveries acked.
    pub count: u64,
    /// The deliveries acked, when asked for, and always on an ordered
    /// subscription. Their entry ids are as Redis writes them (`7-0`).
    pub leases: Vec<Lease>,
    /// The subscription delivers in order per ordering key, which refuses
    /// acks of deliveries that are no longer current.
    pub ordered: bool,
    /// Ordering keys handed to their next entry.
    pub keys_handed: u64,
}

/// What ending one lease did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The consumer no longer held it.
    Lost,
    /// Parked until its redelivery.
    Parked,
    /// That was its last attempt.
    DeadLettered,
}

/// Which consumer of which subscription asks, and how much it may hold.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    pub keys: TopicKeys,
    pub group: String,
    pub consumer: String,
    pub max_outstanding: u32,
    /// The most bytes of messages the consumer may hold unacked (one may go
    /// past it); 0: no limit.
    pub max_unacked_bytes: u64,
    pub lease: Duration,
    /// The most bytes one message can have (payload, attributes, ordering
    /// key): a fetch reads no more at once than its byte limit could hold at that size.
    pub max_message_bytes: u64,
    /// The subscription delivers in order per ordering key.
    pub ordered: bool,
}

impl Store {
    /// Hands `spec.consumer` up to `limit` deliveries of about `max_bytes` in
    /// all (one may go past it): expired leases first, then new entries,
    /// within its room; each gets a lease of `spec.lease`.
    pub async fn fetch(&self, spec: &ConsumerSpec, limit: u32, max_bytes: u64) -> Result<Fetched> {
        self.fetch_script(spec, limit, max_bytes, None).await
    }

    /// Applies `acks` (of the same subscription), then fetches as
    /// [`Self::fetch`] does, in one script call: the room the acks free is
    /// taken at once. What the acks did is in [`Fetched::acked`].
    pub async fn ack_and_fetch(
        &self,
        acks: &AckRequest,
        spec: &ConsumerSpec,
        limit: u32,
        max_bytes: u64,
    ) -> Result<Fetched> {
        self.fetch_script(spec, limit, max_bytes, Some(acks)).await
    }

    async fn fetch_script(
        &self,
        spec: &ConsumerSpec,
        limit: u32,
        max_bytes: u64,
        acks: Option<&AckRequest>,
    ) -> Result<Fetched> {
        let mut invocation = FETCH_DELIVERIES.key(&spec.keys.lease_keys(&spec.group)[..]);
        invocation
            .arg(&spec.group)
            .arg(&spec.consumer)
            .arg(spec.max_outstanding)
            .arg(limit)
            .arg(spec.lease.as_millis() as u64)
            .arg(max_bytes)
            .arg(spec.max_message_bytes)
            .arg(u8::from(spec.ordered))
            .arg(spec.max_unacked_bytes);
        if let Some(acks) = acks {
            invocation.arg(ack_reply(acks.listed));
            ack_args(&mut invocation, acks);
        }
        let (reply, mut conn) = self.run_on_group(&invocation).await?;
        let mut fetched = decode_fetched(reply, &spec.consumer)?;
        if let Some(acked) = &mut fetched.acked
            && let Err(err) = self.replicated(&mut conn, &spec.keys.stream()).await
        {
            // The deliveries are leased all the same: only the acks failed.
            *acked = Err(err);
        }
        Ok(fetched)
    }

    /// Acknowledges the deliveries still held by their consumer: they leave
    /// the subscription's pending list for good (see [`AckRequest`]).
    pub async fn ack(&self, keys: &TopicKeys, group: &str, acks: &AckRequest) -> Result<Acked> {
        let mut invocation = ACK.key(&keys.lease_keys(group)[..]);
        invocation.arg(group).arg(ack_reply(acks.listed));
        ack_args(&mut invocation, acks);
        let (reply, mut conn) = self.run_on_group(&invocation).await?;
        let acked = decode_acked(reply)?;
        self.replicated(&mut conn, &keys.stream()).await?;
        Ok(acked)
    }

    /// Sets each lease still held by its consumer to end `lease` from now.
    /// Returns, per lease, whether it was held.
    pub async fn extend(
        &self,
        keys: &TopicKeys,
        group: &str,
        leases: &[Lease],
        lease: Duration,
    ) -> Result<Vec<bool>> {
        let mut invocation = EXTEND_LEASES.key(keys.stream());
        invocation
            .key(keys.timers(group))
            .arg(group)
            .arg(lease.as_millis() as u64);
        let held: Vec<i64> = self.with_leases(invocation, leases).await?;
        Ok(held.into_iter().map(|held| held == 1).collect())
    }

    /// Ends the leases still held by their consumer: each message is parked
    /// for `delay` (None: the subscription's retry backoff), or dead-lettered
    /// after its last attempt. Returns what happened to each lease, and the
    /// ordering keys handed to their next entry by dead-lettering.
    pub async fn end_leases(
        &self,
        keys: &TopicKeys,
        group: &str,
        leases: &[Lease],
        delay: Option<Duration>,
    ) -> Result<(Vec<Ended>, u64)> {
        let delay_ms = delay.map_or(-1, |d| d.as_millis() as i64);
        let mut invocation = END_LEASES.key(&keys.lease_keys(group)[..]);
        invocation.arg(group).arg(delay_ms);
        let (ended, keys_handed): (Vec<i64>, u64) = self.with_leases(invocation, leases).await?;
        let ended = ended
            .into_iter()
            .map(|ended| match ended {
                1 => Ended::Parked,
                2 => Ended::DeadLettered,
                _ => Ended::Lost,
            })
            .collect();
        Ok((ended, keys_handed))
    }

    /// Runs a lease script with one (entry id, consumer, delivery count)
    /// triple per lease after its other arguments.
    async fn with_leases<T: redis::FromRedisValue>(
        &self,
        mut invocation: Invocation<'_>,
        leases: &[Lease],
    ) -> Result<T> {
        for held in leases {
            invocation
                .arg(&held.entry_id)
                .arg(&held.consumer)
                .arg(held.attempt);
        }
        let (reply, _) = self.run_on_group(&invocation).await?;
        redis::from_redis_value(reply).map_err(|err| Error::Corrupt(format!("lease reply: {err}")))
    }

    /// Runs a script on a subscription's keys; a missing consumer group
    /// means the subscription does not exist. Returns the reply and the
    /// connection it ran on, for the replicas' acknowledgement that follows.
    async fn run_on_group(&self, invocation: &Invocation<'_>) -> Result<(Value, Connection)> {
        let mut conn = self.shared();
        let reply = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(group_missing_is_not_found)?;
        Ok((reply, conn))
    }

    /// Gives back deliveries fetched for a consumer but never sent to its
    /// client: due at once, as the same attempt. Returns how many.
    pub async fn return_unsent(
        &self,
        keys: &TopicKeys,
        group: &str,
        leases: &[Lease],
    ) -> Result<u64> {
        let mut invocation = RETURN_UNSENT.key(keys.stream());
        invocation.key(keys.timers(group)).arg(group);
        self.with_leases(invocation, leases).await
    }

    /// Removes a consumer that holds nothing; one with pending entries stays
    /// so that they are redelivered, not lost.
    pub async fn release_consumer(
        &self,
        keys: &TopicKeys,
        group: &str,
        consumer: &str,
    ) -> Result<bool> {
        let mut conn = self.connection().await?;
        let removed: i64 = RELEASE_CONSUMER
            .key(keys.stream())
            .arg(group)
            .arg(consumer)
            .invoke_async(&mut conn)
            .await?;
        Ok(removed == 1)
    }

    /// Removes consumers that hold nothing and were idle longer than `idle`.
    pub async fn prune_consumers(
        &self,
        keys: &TopicKeys,
        group: &str,
        idle: Duration,
    ) -> Result<u64> {
        let mut conn = self.connection().await?;
        let removed: u64 = PRUNE_CONSUMERS
            .key(keys.stream())
            .arg(group)
            .arg(idle.as_millis() as u64)
            .invoke_async(&mut conn)
            .await?;
        Ok(removed)
    }
}

/// Decodes fetch_deliveries.lua's reply.
fn decode_fetched(reply: Value, consumer: &str) -> Result<Fetched> {
    let mut reply = as_array(reply)?.into_iter();
    let wait = as_int(reply.next().unwrap_or(Value::Nil))?;
    let mut deliveries = Vec::new();
    for item in as_array(reply.next().unwrap_or(Value::Nil))? {
        let mut parts = as_array(item)?.into_iter();
        let (Some(id), Some(count), Some(fields)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(Error::Corrupt("short delivery in fetch reply".into()));
        };
        let attempt = u32::try_from(as_int(count)?).unwrap_or(u32::MAX);
        deliveries.push((decode_entry(id, fields)?, attempt));
    }
    let room = as_int(reply.next().unwrap_or(Value::Nil))?;
    let now_ms = as_int(reply.next().unwrap_or(Value::Nil))?;
    let dead_lettered = as_int(reply.next().unwrap_or(Value::Int(0)))?;
    let more_waiting = as_int(reply.next().unwrap_or(Value::Int(0)))? == 1;
    let keys_handed = as_int(reply.next().unwrap_or(Value::Int(0)))?;
    // Empty without riding acks.
    let acks = as_array(reply.next().unwrap_or(Value::Nil))?;
    let acked = if acks.is_empty() {
        None
    } else {
        Some(decode_acked(Value::Array(acks)))
    };
    // Empty when the fetch set no batch timer.
    let mut batch = as_array(reply.next().unwrap_or(Value::Nil))?.into_iter();
    let batch = match (batch.next(), batch.next(), batch.next()) {
        (Some(first), Some(last), Some(covers)) => Some(NewBatch {
            timer: BatchTimer {
                consumer: consumer.to_owned(),
                first: as_string(first)?,
                last: as_string(last)?,
            },
            covers: usize::try_from(as_int(covers)?).unwrap_or(0),
        }),
        _ => None,
    };
    Ok(Fetched {
        acked,
        batch,
        more_waiting,
        keys_handed: u64::try_from(keys_handed).unwrap_or(0),
        deliveries,
        next_expiry: u64::try_from(wait).ok().map(Duration::from_millis),
        has_room: room > 0,
        now_ms: u64::try_from(now_ms).unwrap_or(0),
        dead_lettered: u64::try_from(dead_lettered).unwrap_or(0),
    })
}

/// Decodes ack.lua's reply (also the last part of a fetch's with riding acks).
fn decode_acked(reply: Value) -> Result<Acked> {
    let (count, leases, ordered, keys_handed): (u64, Vec<String>, u8, u64) =
        redis::from_redis_value(reply)
            .map_err(|err| Error::Corrupt(format!("ack reply: {err}")))?;
    let leases = leases
        .iter()
        .map(|lease| acked_lease(lease))
        .collect::<Result<_>>()?;
    Ok(Acked {
        count,
        leases,
        ordered: ordered == 1,
        keys_handed,
    })
}

/// One acked delivery as ack_held (lib.lua) names it: `id/count/consumer`.
fn acked_lease(text: &str) -> Result<Lease> {
    let mut parts = text.splitn(3, '/');
    match (
        parts.next(),
        parts.next().and_then(|n| n.parse().ok()),
        parts.next(),
    ) {
        (Some(entry_id), Some(attempt), Some(consumer)) => Ok(Lease {
            entry_id: entry_id.to_owned(),
            consumer: consumer.to_owned(),
            attempt,
        }),
        _ => Err(Error::Corrupt(format!("acked delivery {text:?}"))),
    }
}

/// What ack.lua is to return: the count, or the entry ids too.
fn ack_reply(listed: bool) -> &'static str {
    if listed { "i" } else { "n" }
}

/// Adds `acks` to a script call as ack.lua reads them: per consumer, the
/// consumer, its first and last entry id, n, m, then n pairs of entry id and
/// delivery count, then m pairs of first and last id of its finished batch
/// timers. Finished timers of a consumer with no lease here are left to be
/// settled when they fall due.
fn ack_args(invocation: &mut Invocation<'_>, acks: &AckRequest) {
    for (consumer, held) in by_consumer(&acks.leases) {
        let (first, last) = (&held[0].0, &held[held.len() - 1].0);
        let finished: Vec<&BatchTimer> = acks
            .finished
            .iter()
            .filter(|timer| timer.consumer == consumer)
            .collect();
        invocation
            .arg(consumer)
            .arg(first)
            .arg(last)
            .arg(held.len())
            .arg(finished.len());
        for (id, attempt) in held {
            invocation.arg(id).arg(attempt);
        }
        for timer in finished {
            invocation.arg(&timer.first).arg(&timer.last);
        }
    }
}

/// Leases grouped by consumer, each group's (entry id, delivery count) in
/// entry id order; ids that are not entry ids are left out (they hold nothing).
fn by_consumer(leases: &[Lease]) -> BTreeMap<&str, Vec<(String, u32)>> {
    // (ms, seq) of each entry id and its delivery count, per consumer.
    type Held = Vec<((u64, u64), u32)>;
    let mut groups: BTreeMap<&str, Held> = BTreeMap::new();
    for lease in leases {
        if let Some(id) = parse_entry_id(&lease.entry_id) {
            groups
                .entry(lease.consumer.as_str())
                .or_default()
                .push((id, lease.attempt));
        }
    }
    groups
        .into_iter()
        .map(|(consumer, mut held)| {
            held.sort_unstable();
            let held = held
                .into_iter()
                .map(|((ms, seq), attempt)| (format!("{ms}-{seq}"), attempt))
                .collect();
            (consumer, held)
        })
        .collect()
}

/// A missing consumer group means the subscription does not exist.
fn group_missing_is_not_found(err: redis::RedisError) -> Error {
    let missing = err.code() == Some("NOGROUP")
        || err
            .detail()
            .is_some_and(|detail| detail.contains("NOGROUP"));
    if missing {
        Error::NotFound("subscription".into())
    } else {
        err.into()
    }
}
