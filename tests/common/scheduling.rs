//! Scheduling, retries and dead letters: requests and the checks on what arrives.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use redq::pb;
use redq::pb::admin_service_client::AdminServiceClient;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use super::*;

pub type Admin = AdminServiceClient<Channel>;

impl TestServer {
    /// A connected AdminService client.
    pub async fn admin(&self) -> Admin {
        AdminServiceClient::new(self.channel().await)
    }
}

/// A protobuf Timestamp from a std SystemTime (after the epoch).
pub fn pb_timestamp(t: SystemTime) -> prost_types::Timestamp {
    let d = t.duration_since(UNIX_EPOCH).expect("time after the epoch");
    prost_types::Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// Milliseconds since the epoch of a protobuf Timestamp (floor).
pub fn ts_ms(ts: &prost_types::Timestamp) -> i64 {
    ts.seconds * 1000 + i64::from(ts.nanos).div_euclid(1_000_000)
}

/// Milliseconds since the epoch of a SystemTime (floor).
pub fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .expect("time after the epoch")
        .as_millis() as i64
}

/// Now, as milliseconds since the epoch (floor).
pub fn now_ms() -> i64 {
    unix_ms(SystemTime::now())
}

/// The SystemTime `ms` milliseconds after the epoch.
pub fn at_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).expect("ms after the epoch"))
}

/// When a scheduled message is due: at a time, or after a delay.
#[derive(Clone, Copy, Debug)]
pub enum Due {
    At(SystemTime),
    After(Duration),
}

impl Due {
    /// A whole-millisecond time `ms` from now (so the server's millisecond
    /// precision cannot round it).
    pub fn in_ms(ms: i64) -> Self {
        Due::At(at_ms(now_ms() + ms))
    }

    /// (deliver_at, delay) fields for a request.
    pub fn fields(
        self,
    ) -> (
        Option<prost_types::Timestamp>,
        Option<prost_types::Duration>,
    ) {
        match self {
            Due::At(t) => (Some(pb_timestamp(t)), None),
            Due::After(d) => (None, Some(pb_duration(d))),
        }
    }
}

/// A message that Publish schedules (its own `deliver_at` or `delay`).
pub fn scheduled_message(payload: impl Into<Bytes>, due: Due) -> pb::PublishMessage {
    let (deliver_at, delay) = due.fields();
    pb::PublishMessage {
        payload: payload.into(),
        deliver_at,
        delay,
        ..Default::default()
    }
}

/// A message with a `dedupe_id`.
pub fn deduped_message(payload: impl Into<Bytes>, dedupe_id: &str) -> pb::PublishMessage {
    pb::PublishMessage {
        payload: payload.into(),
        dedupe_id: dedupe_id.to_string(),
        ..Default::default()
    }
}

/// Publish returning the whole response (ids and duplicate flags) or the status.
pub async fn try_publish_messages(
    client: &mut Client,
    topic: &str,
    messages: Vec<pb::PublishMessage>,
) -> Result<pb::PublishResponse, Status> {
    client
        .publish(pb::PublishRequest {
            topic: topic.to_string(),
            messages,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

/// Publish that must succeed, with one id and one duplicate flag per message.
pub async fn publish_messages(
    client: &mut Client,
    topic: &str,
    messages: Vec<pb::PublishMessage>,
) -> pb::PublishResponse {
    let n = messages.len();
    let resp = try_publish_messages(client, topic, messages)
        .await
        .unwrap_or_else(|s| panic!("publish to {topic}: {s:?}"));
    assert_eq!(resp.message_ids.len(), n, "one id per message: {resp:?}");
    assert_eq!(
        resp.duplicates.len(),
        n,
        "one duplicate flag per message: {resp:?}"
    );
    resp
}

/// ScheduleDelayed of `message` at `due`.
pub async fn try_schedule(
    client: &mut Client,
    topic: &str,
    message: pb::PublishMessage,
    due: Due,
) -> Result<pb::ScheduleDelayedResponse, Status> {
    let (deliver_at, delay) = due.fields();
    client
        .schedule_delayed(pb::ScheduleDelayedRequest {
            topic: topic.to_string(),
            message: Some(message),
            deliver_at,
            delay,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

/// ScheduleDelayed that must succeed.
pub async fn schedule(
    client: &mut Client,
    topic: &str,
    message: pb::PublishMessage,
    due: Due,
) -> pb::ScheduleDelayedResponse {
    try_schedule(client, topic, message, due)
        .await
        .unwrap_or_else(|s| panic!("schedule on {topic} at {due:?}: {s:?}"))
}

/// CancelScheduled; Ok(cancelled).
pub async fn cancel_scheduled(
    client: &mut Client,
    topic: &str,
    message_id: &str,
) -> Result<bool, Status> {
    client
        .cancel_scheduled(pb::CancelScheduledRequest {
            topic: topic.to_string(),
            message_id: message_id.to_string(),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().cancelled)
}

/// RescheduleDelayed to `due`.
pub async fn reschedule(
    client: &mut Client,
    topic: &str,
    message_id: &str,
    due: Due,
) -> Result<pb::RescheduleDelayedResponse, Status> {
    let (deliver_at, delay) = due.fields();
    client
        .reschedule_delayed(pb::RescheduleDelayedRequest {
            topic: topic.to_string(),
            message_id: message_id.to_string(),
            deliver_at,
            delay,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

/// Nack with an explicit `delay`.
pub async fn nack_after(
    client: &mut Client,
    topic: &str,
    subscription: &str,
    ack_ids: Vec<String>,
    delay: Duration,
) -> Result<(), Status> {
    client
        .nack(pb::NackRequest {
            topic: topic.to_string(),
            subscription: subscription.to_string(),
            ack_ids,
            delay: Some(pb_duration(delay)),
            ..Default::default()
        })
        .await
        .map(|_| ())
}

/// One delivery and the test's wall-clock time when its response arrived.
#[derive(Clone, Debug)]
pub struct Arrival {
    /// Wall clock (the same clock Redis reads) when the response was received.
    pub at: SystemTime,
    /// Index of the stream it came on.
    pub stream: usize,
    pub received: pb::ReceivedMessage,
}

impl Arrival {
    pub fn id(&self) -> String {
        id_of(&self.received)
    }

    pub fn message(&self) -> &pb::Message {
        self.received
            .message
            .as_ref()
            .unwrap_or_else(|| panic!("delivery without a message: {:?}", self.received))
    }

    /// `Message.deliver_at` in ms since the epoch (panics if unset).
    pub fn deliver_at_ms(&self) -> i64 {
        let ts = self
            .message()
            .deliver_at
            .as_ref()
            .unwrap_or_else(|| panic!("delivery without deliver_at: {:?}", self.received));
        ts_ms(ts)
    }

    /// Asserts invariant 1: the message arrived no earlier than its due time.
    #[track_caller]
    pub fn assert_not_early(&self) {
        let due = self.message().deliver_at.as_ref().expect("deliver_at set");
        let due = UNIX_EPOCH
            + Duration::new(
                u64::try_from(due.seconds).expect("due after the epoch"),
                due.nanos as u32,
            );
        assert!(
            self.at >= due,
            "message {} delivered {:?} before its due time",
            self.id(),
            due.duration_since(self.at).unwrap_or_default()
        );
    }
}

/// Where `collect_until` acks what it receives.
pub struct AckTo<'a> {
    pub client: &'a mut Client,
    pub topic: &'a str,
    pub subscription: &'a str,
}

/// Reads from all `streams` at once, timing each response, until `done` says so
/// (checked after every response) or `timeout` passes. Acks each response through
/// `ack_to` if given. Panics if a stream fails or ends.
pub async fn collect_until(
    streams: &mut [Streaming<pb::SubscribeResponse>],
    timeout: Duration,
    mut ack_to: Option<AckTo<'_>>,
    mut done: impl FnMut(&[Arrival]) -> bool,
) -> Vec<Arrival> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut got: Vec<Arrival> = Vec::new();
    while !done(&got) {
        let reads = streams
            .iter_mut()
            .enumerate()
            .map(|(i, s)| Box::pin(async move { (i, s.message().await) }));
        let next = tokio::time::timeout_at(deadline, futures::future::select_all(reads)).await;
        let (stream, resp) = match next {
            Err(_elapsed) => break,
            Ok(((i, Ok(Some(resp))), _, _)) => (i, resp),
            Ok(((i, Ok(None)), _, _)) => {
                panic!("stream {i} ended after {} messages", got.len())
            }
            Ok(((i, Err(status)), _, _)) => {
                panic!("stream {i} failed after {} messages: {status:?}", got.len())
            }
        };
        let at = SystemTime::now();
        if let Some(to) = ack_to.as_mut()
            && !resp.messages.is_empty()
        {
            ack(
                to.client,
                to.topic,
                to.subscription,
                ack_ids_of(&resp.messages),
            )
            .await
            .unwrap_or_else(|s| panic!("ack on {}/{}: {s:?}", to.topic, to.subscription));
        }
        got.extend(resp.messages.into_iter().map(|received| Arrival {
            at,
            stream,
            received,
        }));
    }
    got
}

/// `collect_until` at least `total` deliveries (or `timeout`), timing each.
pub async fn collect_timed(
    streams: &mut [Streaming<pb::SubscribeResponse>],
    total: usize,
    timeout: Duration,
    ack_to: Option<AckTo<'_>>,
) -> Vec<Arrival> {
    collect_until(streams, timeout, ack_to, |got| got.len() >= total).await
}

/// Deliveries per message id.
pub fn count_arrivals(arrivals: &[Arrival]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for a in arrivals {
        *counts.entry(a.id()).or_insert(0) += 1;
    }
    counts
}

/// Asserts every id in `expected` was delivered exactly once and nothing else was.
#[track_caller]
pub fn assert_exactly_once<'a>(
    what: &str,
    arrivals: &[Arrival],
    expected: impl IntoIterator<Item = &'a String>,
) {
    let counts = count_arrivals(arrivals);
    let expected: HashSet<&String> = expected.into_iter().collect();
    let missing: Vec<_> = expected
        .iter()
        .filter(|id| !counts.contains_key(id.as_str()))
        .collect();
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    let unexpected: Vec<_> = counts.keys().filter(|id| !expected.contains(id)).collect();
    assert!(
        missing.is_empty() && twice.is_empty() && unexpected.is_empty(),
        "{what}: {} expected, {} deliveries; {} missing (e.g. {:?}), {} delivered more than once \
         (e.g. {:?}), {} unexpected (e.g. {:?})",
        expected.len(),
        arrivals.len(),
        missing.len(),
        missing.iter().take(5).collect::<Vec<_>>(),
        twice.len(),
        twice.iter().take(5).collect::<Vec<_>>(),
        unexpected.len(),
        unexpected.iter().take(5).collect::<Vec<_>>(),
    );
}

/// One page of a subscription's dead letters.
pub async fn list_dead_letters(
    admin: &mut Admin,
    topic: &str,
    subscription: &str,
    page_size: u32,
    page_token: &str,
) -> Result<pb::ListDeadLettersResponse, Status> {
    admin
        .list_dead_letters(pb::ListDeadLettersRequest {
            topic: topic.to_string(),
            subscription: subscription.to_string(),
            page_size,
            page_token: page_token.to_string(),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

/// Every dead letter of a subscription, following the pages.
pub async fn all_dead_letters(
    admin: &mut Admin,
    topic: &str,
    subscription: &str,
) -> Vec<pb::DeadLetter> {
    let mut all = Vec::new();
    let mut token = String::new();
    for _page in 0..10_000 {
        let page = list_dead_letters(admin, topic, subscription, 0, &token)
            .await
            .unwrap_or_else(|s| panic!("ListDeadLetters {topic}/{subscription}: {s:?}"));
        all.extend(page.dead_letters);
        if page.next_page_token.is_empty() {
            return all;
        }
        token = page.next_page_token;
    }
    panic!("ListDeadLetters {topic}/{subscription}: no last page after 10,000 pages");
}

/// Polls the dead letters until at least `n` are listed (panics after `EVENTUALLY`).
pub async fn wait_dead_letters(
    admin: &mut Admin,
    topic: &str,
    subscription: &str,
    n: usize,
) -> Vec<pb::DeadLetter> {
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let got = all_dead_letters(admin, topic, subscription).await;
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "expected {n} dead letters in {topic}/{subscription} within {EVENTUALLY:?}, got {}: {got:?}",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
