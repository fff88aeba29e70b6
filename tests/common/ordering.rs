//! Ordered delivery under test: consumers that ack, nack, let leases expire
//! or drop their stream at random, a history of what each saw and did, the
//! checks of README "Ordering" over that history, and an invariant checker
//! that reads the subscription's lock state from Redis in one atomic script.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use redq::pb;
use tonic::Code;

use super::{Client, Sub, pb_duration};

/// A message of key `key`, the `seq`-th of its key: the payload says both.
pub fn keyed(key: &str, seq: usize) -> pb::PublishMessage {
    pb::PublishMessage {
        payload: Bytes::from(format!("{key}/{seq}")),
        ordering_key: key.to_string(),
        ..Default::default()
    }
}

/// The (key, seq) a delivery's payload carries.
pub fn key_and_seq(m: &pb::ReceivedMessage) -> (String, usize) {
    let payload = &m.message.as_ref().expect("message").payload;
    let text = std::str::from_utf8(payload).expect("utf-8 payload");
    let (key, seq) = text.rsplit_once('/').expect("key/seq payload");
    (key.to_string(), seq.parse().expect("seq"))
}

/// A Subscribe request for an ordered subscription.
pub fn ordered(opts: Sub, topic: &str, subscription: &str) -> pb::SubscribeRequest {
    pb::SubscribeRequest {
        enable_message_ordering: true,
        ..opts.request(topic, subscription)
    }
}

/// What a consumer did with a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    /// Acked, and the server applied it.
    Acked,
    /// Acked, and the server refused it (the delivery was no longer current).
    AckRefused,
    Nacked,
    /// Left to run out, or dropped with its stream.
    Abandoned,
}

#[derive(Clone, Debug)]
pub enum Event {
    Delivered {
        key: String,
        seq: usize,
        id: String,
        attempt: u32,
        /// No verdict of the server tells that the consumer read it while
        /// its lease was held: the server refused what the consumer did with
        /// it (its lease had ended while it waited in the stream's buffers),
        /// or the consumer abandoned it. A delivery read late says nothing
        /// about when its lease was held, so the checks leave these out.
        stale: bool,
    },
    /// Logged before the call that ends the lease is sent, so that the next
    /// delivery of the key, which the call allows, is logged after it.
    Ended {
        key: String,
        seq: usize,
        id: String,
        how: Done,
    },
}

/// Every delivery and lease end, in the order the consumers logged them.
#[derive(Clone, Default)]
pub struct History(Arc<Mutex<Vec<Event>>>);

impl History {
    pub fn delivered(&self, m: &pb::ReceivedMessage) -> usize {
        let (key, seq) = key_and_seq(m);
        self.push(Event::Delivered {
            key,
            seq,
            id: super::id_of(m),
            attempt: m.delivery_attempt,
            stale: false,
        })
    }

    /// Marks the delivery logged at `index` as stale (see [`Event::Delivered`]).
    pub fn stale(&self, index: usize) {
        if let Event::Delivered { stale, .. } = &mut self.0.lock().unwrap()[index] {
            *stale = true;
        }
    }

    pub fn ended(&self, m: &pb::ReceivedMessage, how: Done) -> usize {
        let (key, seq) = key_and_seq(m);
        self.push(Event::Ended {
            key,
            seq,
            id: super::id_of(m),
            how,
        })
    }

    /// Marks the lease end logged at `index` as refused by the server.
    pub fn refused(&self, index: usize) {
        if let Event::Ended { how, .. } = &mut self.0.lock().unwrap()[index] {
            *how = Done::AckRefused;
        }
    }

    fn push(&self, event: Event) -> usize {
        let mut events = self.0.lock().unwrap();
        events.push(event);
        events.len() - 1
    }

    pub fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }

    /// Messages acked (and applied).
    pub fn acked(&self) -> HashSet<String> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Ended {
                    id,
                    how: Done::Acked,
                    ..
                } => Some(id),
                _ => None,
            })
            .collect()
    }

    /// The checks of README "Ordering", given the messages published
    /// (`published[key]` = ids in publish order) and the ids that ended in
    /// the dead letters. Panics naming the first violation; returns the
    /// number of deliveries.
    pub fn check(
        &self,
        published: &HashMap<String, Vec<String>>,
        dead_lettered: &HashSet<String>,
    ) -> usize {
        let events = self.events();
        // 1. At most one delivery of a key open at a time.
        let mut open: HashMap<&str, (usize, u32)> = HashMap::new();
        for (i, event) in events.iter().enumerate() {
            match event {
                Event::Delivered { stale: true, .. } => {}
                Event::Delivered {
                    key, seq, attempt, ..
                } => {
                    if let Some(other) = open.insert(key, (*seq, *attempt)) {
                        panic!(
                            "event {i}: {key}/{seq} (attempt {attempt}) delivered while {key}/{} (attempt {}) was still leased",
                            other.0, other.1
                        );
                    }
                }
                Event::Ended { key, seq, .. } => {
                    if open.get(key.as_str()).is_some_and(|o| o.0 == *seq) {
                        open.remove(key.as_str());
                    }
                }
            }
        }
        // 2, 3. A delivery comes only after every earlier message of its key
        // was acked or dead-lettered (and then never delivered again).
        let mut acked_at: HashMap<&str, usize> = HashMap::new();
        let mut last_delivery: HashMap<&str, usize> = HashMap::new();
        for (i, event) in events.iter().enumerate() {
            match event {
                Event::Delivered {
                    id, stale: false, ..
                } => {
                    last_delivery.insert(id, i);
                }
                Event::Ended {
                    id,
                    how: Done::Acked,
                    ..
                } => {
                    acked_at.entry(id).or_insert(i);
                }
                _ => {}
            }
        }
        let mut deliveries = 0;
        for (i, event) in events.iter().enumerate() {
            let Event::Delivered {
                key,
                seq,
                id,
                stale: false,
                ..
            } = event
            else {
                continue;
            };
            deliveries += 1;
            let ids = &published[key];
            assert_eq!(&ids[*seq], id, "event {i}: {key}/{seq} has another id");
            for (earlier_seq, earlier) in ids[..*seq].iter().enumerate() {
                let done_before = acked_at.get(earlier.as_str()).is_some_and(|&at| at < i)
                    || (dead_lettered.contains(earlier)
                        && last_delivery.get(earlier.as_str()).is_none_or(|&at| at < i));
                assert!(
                    done_before,
                    "event {i}: {key}/{seq} delivered before {key}/{earlier_seq} was acked or dead-lettered"
                );
            }
        }
        // Attempt numbers: from 1, one up per redelivery. A delivery handed
        // back unsent keeps its number; one sent to a stream its client
        // dropped before reading was never seen here, so the next one seen
        // may be more than one up.
        let mut attempts: HashMap<&str, u32> = HashMap::new();
        for event in &events {
            if let Event::Delivered {
                id,
                attempt,
                key,
                stale: false,
                ..
            } = event
            {
                let before = attempts.get(id.as_str()).copied().unwrap_or(0);
                assert!(
                    *attempt >= before.max(1),
                    "{key}: {id} delivered as attempt {attempt} after attempt {before}"
                );
                attempts.insert(id, *attempt);
            }
        }
        // 4. Every message ends acked or dead-lettered, exactly one of the two.
        let acked = self.acked();
        for (key, ids) in published {
            for (seq, id) in ids.iter().enumerate() {
                assert!(
                    acked.contains(id) != dead_lettered.contains(id),
                    "{key}/{seq} ({id}): acked {}, dead-lettered {}",
                    acked.contains(id),
                    dead_lettered.contains(id)
                );
            }
        }
        deliveries
    }
}

/// Publishes `per_key` messages for each of `keys`, interleaved, in calls of
/// `batch`; returns the ids per key in publish order.
pub async fn publish_keyed(
    client: &mut Client,
    topic: &str,
    keys: &[String],
    per_key: usize,
    batch: usize,
) -> HashMap<String, Vec<String>> {
    let mut all = Vec::new();
    for seq in 0..per_key {
        for key in keys {
            all.push(keyed(key, seq));
        }
    }
    let mut published: HashMap<String, Vec<String>> = HashMap::new();
    for chunk in all.chunks(batch) {
        let ids = client
            .publish(pb::PublishRequest {
                topic: topic.to_string(),
                messages: chunk.to_vec(),
                dedupe_id: String::new(),
            })
            .await
            .expect("publish")
            .into_inner()
            .message_ids;
        for (m, id) in chunk.iter().zip(ids) {
            published
                .entry(m.ordering_key.clone())
                .or_default()
                .push(id);
        }
    }
    published
}

/// Ids of every dead letter of the subscription (message ids).
pub async fn dead_letter_ids(admin: &mut super::Admin, topic: &str, sub: &str) -> HashSet<String> {
    let mut ids = HashSet::new();
    let mut page_token = String::new();
    loop {
        let page = admin
            .list_dead_letters(pb::ListDeadLettersRequest {
                topic: topic.to_string(),
                subscription: sub.to_string(),
                page_size: 1000,
                page_token: page_token.clone(),
                ..Default::default()
            })
            .await
            .expect("list dead letters")
            .into_inner();
        ids.extend(
            page.dead_letters
                .iter()
                .filter_map(|d| d.message.as_ref().map(|m| m.id.clone())),
        );
        if page.next_page_token.is_empty() {
            return ids;
        }
        page_token = page.next_page_token;
    }
}

/// Reads the lock state of an ordered subscription atomically and returns
/// what breaks its invariants: every key holder is pending (leased or
/// parked, or ready for a consumer) and mapped back to its key; every
/// blocked entry is pending under the blocked consumer, and its key is
/// held; every ready entry holds its key; every entry pending under the
/// blocked consumer is blocked or ready.
const LONG_CHECK: Duration = Duration::from_secs(60);

pub async fn lock_state_violations(redis_url: &str, topic: &str, sub: &str) -> Vec<String> {
    const CHECK: &str = r#"
local stream, holders, held, blocked, ready, group = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1]
local out = {}
local function pending(id)
  return redis.call('XPENDING', stream, group, id, id, 1)[1]
end
local h = redis.call('HGETALL', holders)
for i = 1, #h, 2 do
  local key, id = h[i], h[i + 1]
  local p = pending(id)
  if not p then out[#out + 1] = 'holder ' .. id .. ' of ' .. key .. ' is not pending'
  elseif p[2] == 'redq.blocked' and not redis.call('ZSCORE', ready, id) then
    out[#out + 1] = 'holder ' .. id .. ' of ' .. key .. ' is blocked, not ready'
  end
  if redis.call('HGET', held, id) ~= key then out[#out + 1] = 'holder ' .. id .. ' not mapped to ' .. key end
end
local e = redis.call('HGETALL', held)
for i = 1, #e, 2 do
  if redis.call('HGET', holders, e[i + 1]) ~= e[i] then
    out[#out + 1] = 'held ' .. e[i] .. ' -> ' .. e[i + 1] .. ' is not the holder'
  end
end
local members = redis.call('ZRANGE', blocked, 0, -1)
for _, m in ipairs(members) do
  local len, rest = string.match(m, '^(%d+):(.*)$')
  local key = string.sub(rest, 1, tonumber(len))
  local ms, seq = string.match(string.sub(rest, tonumber(len) + 2), '^(%d+)%-(%d+)$')
  local id = string.gsub(ms, '^0+(%d)', '%1') .. '-' .. string.gsub(seq, '^0+(%d)', '%1')
  local p = pending(id)
  if not p or p[2] ~= 'redq.blocked' then out[#out + 1] = 'blocked ' .. id .. ' is not pending as blocked' end
  if not redis.call('HGET', holders, key) then out[#out + 1] = 'blocked ' .. id .. ' waits for free key ' .. key end
end
for _, id in ipairs(redis.call('ZRANGE', ready, 0, -1)) do
  local p = pending(id)
  if not p or p[2] ~= 'redq.blocked' then out[#out + 1] = 'ready ' .. id .. ' is not pending as blocked' end
  local key = redis.call('HGET', held, id)
  if not key or redis.call('HGET', holders, key) ~= id then out[#out + 1] = 'ready ' .. id .. ' does not hold its key' end
end
local under_blocked = redis.call('XPENDING', stream, group, '-', '+', 1000000, 'redq.blocked')
local waiting = #members + redis.call('ZCARD', ready)
if #under_blocked ~= waiting then
  out[#out + 1] = #under_blocked .. ' entries pending as blocked, ' .. waiting .. ' blocked or ready'
end
return out
"#;
    let client = redis::Client::open(redis_url).expect("redis url");
    // A hot key's backlog makes the check slow (one XPENDING per blocked entry).
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(LONG_CHECK));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("redis connection");
    let prefix = format!("redq:{{{topic}}}");
    redis::cmd("EVAL")
        .arg(CHECK)
        .arg(5)
        .arg(format!("{prefix}:stream"))
        .arg(format!("{prefix}:sub:{sub}:holders"))
        .arg(format!("{prefix}:sub:{sub}:held"))
        .arg(format!("{prefix}:sub:{sub}:blocked"))
        .arg(format!("{prefix}:sub:{sub}:ready"))
        .arg(sub)
        .query_async(&mut conn)
        .await
        .expect("lock state check")
}

/// Asserts the lock state is sound.
pub async fn assert_lock_state(redis_url: &str, topic: &str, sub: &str) {
    let violations = lock_state_violations(redis_url, topic, sub).await;
    assert!(
        violations.is_empty(),
        "lock state of {topic}/{sub}: {violations:#?}"
    );
}

/// How a random consumer treats each delivery, in percent (the rest is acked).
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    pub nack: u32,
    pub nack_delay: u32,
    pub expire: u32,
    pub disconnect: u32,
}

/// A consumer on its own stream: for each delivery it acks, nacks (with or
/// without a delay), abandons the lease, or drops the stream (and opens a
/// new one), as `mix` says; runs until `stop` is set.
pub async fn random_consumer(
    mut client: Client,
    request: pb::SubscribeRequest,
    history: History,
    mix: Mix,
    seed: u64,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::Ordering;
    let mut rng = seed | 1;
    let mut next = move || {
        // xorshift: a reproducible sequence per consumer
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % 100) as u32
    };
    let (topic, sub) = (request.topic.clone(), request.subscription.clone());
    'streams: while !stop.load(Ordering::Relaxed) {
        let Ok(response) = client.subscribe(request.clone()).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut stream = response.into_inner();
        let mut mine: Vec<pb::ReceivedMessage> = Vec::new();
        loop {
            let next_response =
                tokio::time::timeout(Duration::from_millis(200), stream.message()).await;
            if stop.load(Ordering::Relaxed) {
                break 'streams;
            }
            let messages = match next_response {
                Err(_) => continue,
                Ok(Ok(Some(response))) => response.messages,
                Ok(_) => continue 'streams,
            };
            for m in messages {
                let delivered = history.delivered(&m);
                let roll = next();
                if roll < mix.disconnect {
                    mine.push(m);
                    for m in mine.drain(..) {
                        history.ended(&m, Done::Abandoned);
                    }
                    history.stale(delivered);
                    continue 'streams;
                }
                let roll = roll - mix.disconnect;
                let (topic, sub) = (topic.clone(), sub.clone());
                if roll < mix.expire {
                    history.ended(&m, Done::Abandoned);
                    history.stale(delivered);
                } else if roll < mix.expire + mix.nack + mix.nack_delay {
                    history.ended(&m, Done::Nacked);
                    let delay = (roll >= mix.expire + mix.nack)
                        .then(|| pb_duration(Duration::from_millis(150)));
                    let result = client
                        .nack(pb::NackRequest {
                            topic,
                            subscription: sub,
                            ack_ids: vec![m.ack_id.clone()],
                            delay,
                        })
                        .await;
                    if let Err(status) = result {
                        assert_eq!(status.code(), Code::FailedPrecondition, "nack: {status:?}");
                        history.stale(delivered);
                    }
                } else {
                    let index = history.ended(&m, Done::Acked);
                    let result = client
                        .ack(pb::AckRequest {
                            topic,
                            subscription: sub,
                            ack_ids: vec![m.ack_id.clone()],
                        })
                        .await;
                    if let Err(status) = result {
                        assert_eq!(status.code(), Code::FailedPrecondition, "ack: {status:?}");
                        history.refused(index);
                        history.stale(delivered);
                    }
                }
            }
        }
    }
}
