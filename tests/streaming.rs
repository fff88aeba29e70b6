//! The streaming RPCs: PublishStream (per-request ids and statuses on one
//! stream) and StreamingSubscribe (acks, nacks, deadline changes and flow
//! control on the subscribe stream), through gRPC against a real Redis.

#![allow(clippy::needless_update)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use redq::pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Streaming};

/// An open PublishStream: requests go in through `send`.
struct PublishStream {
    requests: mpsc::Sender<pb::PublishStreamRequest>,
    responses: Streaming<pb::PublishStreamResponse>,
}

impl PublishStream {
    async fn open(client: &mut Client) -> Self {
        let (requests, receiver) = mpsc::channel(10_000);
        let responses = client
            .publish_stream(ReceiverStream::new(receiver))
            .await
            .expect("open PublishStream")
            .into_inner();
        Self {
            requests,
            responses,
        }
    }

    async fn send(&self, request_id: u64, topic: &str, messages: Vec<pb::PublishMessage>) {
        self.send_deduped(request_id, topic, "", messages).await
    }

    /// Sends a request with its own (request-level) dedupe id.
    async fn send_deduped(
        &self,
        request_id: u64,
        topic: &str,
        dedupe_id: &str,
        messages: Vec<pb::PublishMessage>,
    ) {
        self.requests
            .send(pb::PublishStreamRequest {
                request_id,
                topic: topic.into(),
                messages,
                dedupe_id: dedupe_id.into(),
            })
            .await
            .expect("request sent");
    }

    /// The next `n` responses, by request id.
    async fn answers(&mut self, n: usize) -> HashMap<u64, pb::PublishStreamResponse> {
        let mut got = HashMap::new();
        while got.len() < n {
            let response = tokio::time::timeout(EVENTUALLY, self.responses.message())
                .await
                .expect("a response in time")
                .expect("stream ok")
                .expect("stream open");
            got.insert(response.request_id, response);
        }
        got
    }
}

#[tokio::test]
async fn publish_stream_answers_each_request_and_a_bad_one_fails_alone() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let mut subscriber = subscribe(&mut client, "orders", "s", Sub::default()).await;
    let mut stream = PublishStream::open(&mut client).await;
    stream
        .send(1, "orders", vec![message("a"), message("b")])
        .await;
    stream.send(2, "bad topic", vec![message("x")]).await;
    stream
        .send(3, "orders", vec![message(Vec::<u8>::new())])
        .await;
    stream
        .send(4, "orders", vec![deduped_message("c", "d-1")])
        .await;
    stream
        .send(5, "orders", vec![deduped_message("c", "d-1")])
        .await;
    stream
        .send(
            6,
            "orders",
            vec![scheduled_message("later", Due::in_ms(60_000))],
        )
        .await;
    let answers = stream.answers(6).await;

    let first = &answers[&1];
    assert!(first.status.is_none(), "{first:?}");
    assert_eq!(first.message_ids.len(), 2);
    assert_eq!(first.duplicates, [false, false]);
    assert_eq!(first.deliver_at.len(), 2);
    let bad_topic = answers[&2].status.as_ref().expect("a status");
    assert_eq!(bad_topic.code, Code::InvalidArgument as i32);
    assert!(bad_topic.message.contains("topic"), "{bad_topic:?}");
    let empty = answers[&3].status.as_ref().expect("a status");
    assert_eq!(empty.code, Code::InvalidArgument as i32);
    assert!(empty.message.contains("messages[0].payload"), "{empty:?}");
    assert!(answers[&3].message_ids.is_empty());
    assert_eq!(answers[&5].duplicates, [true]);
    assert_eq!(answers[&5].message_ids, answers[&4].message_ids);
    assert!(
        answers[&6].message_ids[0].starts_with('s'),
        "a scheduled id"
    );

    // What was published is delivered: a, b, c (the scheduled one is not due).
    let got = expect_messages(&mut subscriber, 3).await;
    assert_eq!(payloads_of(&got), ["a", "b", "c"]);
}

/// A client resending a whole request (its answer was lost) with the
/// request's dedupe id: nothing is published twice, even when the resend is
/// written in the same script call as the first; a resend of another size
/// fails alone.
#[tokio::test]
async fn publish_stream_retries_of_a_request_dedupe_id_publish_nothing_again() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let mut subscriber = subscribe(&mut client, "orders", "s", Sub::default()).await;
    let mut stream = PublishStream::open(&mut client).await;
    let batch = || {
        vec![
            message("a"),
            scheduled_message("later", Due::in_ms(60_000)),
            message("b"),
        ]
    };
    // Sent back to back: the server may write them with one script call.
    stream.send_deduped(1, "orders", "req-1", batch()).await;
    stream.send_deduped(2, "orders", "req-1", batch()).await;
    stream
        .send_deduped(3, "orders", "req-1", vec![message("a")])
        .await;
    stream
        .send_deduped(4, "orders", "req-2", vec![message("c")])
        .await;
    stream
        .send_deduped(5, "orders", "req-2", vec![message("c")])
        .await;
    let answers = stream.answers(5).await;

    let first = &answers[&1];
    assert!(first.status.is_none(), "{first:?}");
    assert_eq!(first.duplicates, [false, false, false]);
    let retry = &answers[&2];
    assert!(retry.status.is_none(), "{retry:?}");
    assert_eq!(retry.message_ids, first.message_ids);
    assert_eq!(retry.duplicates, [true, true, true]);
    assert_eq!(
        retry.deliver_at, first.deliver_at,
        "the originals' due times"
    );
    let other_size = answers[&3].status.as_ref().expect("a status");
    assert_eq!(other_size.code, Code::InvalidArgument as i32);
    assert!(
        other_size.message.contains("dedupe_id") && other_size.message.contains("3 messages"),
        "{other_size:?}"
    );
    assert_eq!(answers[&4].duplicates, [false]);
    assert_eq!(answers[&5].duplicates, [true]);
    assert_eq!(answers[&5].message_ids, answers[&4].message_ids);
    assert_eq!(answers[&5].deliver_at, answers[&4].deliver_at);

    // Each message once: a, b, c (the scheduled one is not due).
    let got = expect_messages(&mut subscriber, 3).await;
    assert_eq!(payloads_of(&got), ["a", "b", "c"]);
    assert_no_message_within(&mut subscriber, Duration::from_millis(500)).await;
}

#[tokio::test]
async fn publish_stream_keeps_request_order_within_a_topic_under_load() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let mut stream = PublishStream::open(&mut client).await;
    const REQUESTS: u64 = 3_000;
    for id in 0..REQUESTS {
        let topic = if id % 2 == 0 { "even" } else { "odd" };
        stream
            .send(id, topic, vec![message(format!("m{id}"))])
            .await;
    }
    let answers = stream.answers(REQUESTS as usize).await;
    for topic_parity in [0, 1] {
        let ids: Vec<(u64, u64)> = (0..REQUESTS)
            .filter(|id| id % 2 == topic_parity)
            .map(|id| {
                let answer = &answers[&id];
                assert!(answer.status.is_none(), "{answer:?}");
                let (ms, seq) = answer.message_ids[0].split_once('-').unwrap();
                (ms.parse().unwrap(), seq.parse().unwrap())
            })
            .collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "entry ids follow request order within a topic"
        );
    }
    // The client half-closes: the stream ends cleanly.
    drop(stream.requests);
    let end = tokio::time::timeout(EVENTUALLY, stream.responses.message())
        .await
        .expect("the stream ends");
    assert!(matches!(end, Ok(None)), "{end:?}");
}

/// An open StreamingSubscribe stream.
struct SubStream {
    requests: mpsc::Sender<pb::StreamingSubscribeRequest>,
    responses: Streaming<pb::SubscribeResponse>,
}

impl SubStream {
    async fn open(client: &mut Client, topic: &str, subscription: &str, opts: Sub) -> Self {
        let (requests, receiver) = mpsc::channel(100);
        requests
            .send(pb::StreamingSubscribeRequest {
                subscribe: Some(opts.request(topic, subscription)),
                ..Default::default()
            })
            .await
            .unwrap();
        let responses = client
            .streaming_subscribe(ReceiverStream::new(receiver))
            .await
            .expect("open StreamingSubscribe")
            .into_inner();
        Self {
            requests,
            responses,
        }
    }

    async fn send(&self, request: pb::StreamingSubscribeRequest) {
        self.requests.send(request).await.expect("request sent");
    }

    /// Messages until at least `n` arrived (confirmations are skipped).
    async fn messages(&mut self, n: usize, within: Duration) -> Vec<pb::ReceivedMessage> {
        let deadline = tokio::time::Instant::now() + within;
        let mut got = Vec::new();
        while got.len() < n {
            match tokio::time::timeout_at(deadline, self.responses.message()).await {
                Err(_) => break,
                Ok(response) => got.extend(response.expect("stream ok").expect("open").messages),
            }
        }
        got
    }

    async fn confirmation(&mut self) -> pb::AckConfirmation {
        loop {
            let response = tokio::time::timeout(EVENTUALLY, self.responses.message())
                .await
                .expect("a confirmation in time")
                .expect("stream ok")
                .expect("open");
            if let Some(confirmation) = response.confirmation {
                return confirmation;
            }
        }
    }
}

#[tokio::test]
async fn acks_and_nacks_on_the_stream() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let mut stream =
        SubStream::open(&mut client, "t", "s", Sub::deadline(Duration::from_secs(2))).await;
    publish(&mut client, "t", ["a", "b", "c"]).await;
    let got = stream.messages(3, EVENTUALLY).await;
    assert_eq!(got.len(), 3);
    let by_payload = |p: &str| {
        got.iter()
            .find(|m| m.message.as_ref().unwrap().payload == p.as_bytes())
            .unwrap()
            .ack_id
            .clone()
    };
    stream
        .send(pb::StreamingSubscribeRequest {
            ack_ids: vec![by_payload("a"), by_payload("c")],
            nack_ids: vec![by_payload("b")],
            nack_delay: Some(pb_duration(Duration::ZERO)),
            ..Default::default()
        })
        .await;
    // b comes back at once, as a second attempt; a and c never again.
    let again = stream.messages(1, EVENTUALLY).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].message.as_ref().unwrap().payload, "b");
    assert_eq!(again[0].delivery_attempt, 2);
    stream
        .send(pb::StreamingSubscribeRequest {
            ack_ids: vec![again[0].ack_id.clone()],
            ..Default::default()
        })
        .await;
    let none = stream.messages(1, Duration::from_secs(5)).await;
    assert!(none.is_empty(), "acked messages came back: {none:?}");
}

#[tokio::test]
async fn confirmations_say_what_was_applied() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let mut stream = SubStream::open(&mut client, "t", "s", Sub::default()).await;
    publish(&mut client, "t", ["a", "b"]).await;
    let got = stream.messages(2, EVENTUALLY).await;
    let (a, b) = (got[0].ack_id.clone(), got[1].ack_id.clone());
    stream
        .send(pb::StreamingSubscribeRequest {
            ack_ids: vec![a.clone(), "garbage".into()],
            modify_deadline_ack_ids: vec![b.clone()],
            modify_deadline: Some(pb_duration(Duration::from_secs(60))),
            confirm: true,
            ..Default::default()
        })
        .await;
    let confirmation = stream.confirmation().await;
    assert_eq!(confirmation.acked_ids, std::slice::from_ref(&a));
    assert_eq!(confirmation.modified_ids, std::slice::from_ref(&b));
    assert_eq!(confirmation.invalid_ids, ["garbage"]);
    // Acked already: a second ack of `a` is lost; nacking `b` is applied.
    stream
        .send(pb::StreamingSubscribeRequest {
            ack_ids: vec![a.clone()],
            nack_ids: vec![b.clone()],
            nack_delay: Some(pb_duration(Duration::from_secs(60))),
            confirm: true,
            ..Default::default()
        })
        .await;
    let confirmation = stream.confirmation().await;
    assert_eq!(confirmation.lost_ids, [a]);
    assert_eq!(confirmation.nacked_ids, [b]);
    // A confirmation with no ids: an empty one, after what was sent before.
    stream
        .send(pb::StreamingSubscribeRequest {
            confirm: true,
            ..Default::default()
        })
        .await;
    assert_eq!(stream.confirmation().await, pb::AckConfirmation::default());
}

/// An old delivery's ack id and the current one's, of one message, in one
/// request: the confirmation names the current one applied and the old one
/// lost, whatever their order.
#[tokio::test]
async fn confirmations_tell_an_old_delivery_from_the_current_one() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let mut stream = SubStream::open(&mut client, "t", "s", Sub::default()).await;
    publish(&mut client, "t", ["a"]).await;
    let first = stream.messages(1, EVENTUALLY).await[0].ack_id.clone();
    stream
        .send(pb::StreamingSubscribeRequest {
            nack_ids: vec![first.clone()],
            nack_delay: Some(pb_duration(Duration::ZERO)),
            ..Default::default()
        })
        .await;
    let again = stream.messages(1, EVENTUALLY).await;
    assert_eq!(again[0].delivery_attempt, 2);
    let current = again[0].ack_id.clone();
    stream
        .send(pb::StreamingSubscribeRequest {
            ack_ids: vec![first.clone(), current.clone()],
            confirm: true,
            ..Default::default()
        })
        .await;
    let confirmation = stream.confirmation().await;
    assert_eq!(confirmation.acked_ids, [current]);
    assert_eq!(confirmation.lost_ids, [first]);
}

/// The subscription's lease timers, as Redis holds them.
fn timers(redis: &RedisServer, topic: &str, subscription: &str) -> Vec<String> {
    let key = format!("redq:{{{topic}}}:sub:{subscription}:timers");
    let members = redis.cli(&["ZRANGE", &key, "0", "-1"]);
    members
        .lines()
        .map(str::to_owned)
        .filter(|m| !m.is_empty())
        .collect()
}

/// Acks the stream's `messages` in one request and waits until they are applied.
async fn ack_confirmed(stream: &mut SubStream, messages: &[pb::ReceivedMessage]) {
    let ack_ids: Vec<String> = messages.iter().map(|m| m.ack_id.clone()).collect();
    stream
        .send(pb::StreamingSubscribeRequest {
            ack_ids: ack_ids.clone(),
            confirm: true,
            ..Default::default()
        })
        .await;
    assert_eq!(stream.confirmation().await.acked_ids, ack_ids);
}

/// A fetch leaves one timer for the new messages it hands out. Once the
/// stream's client has acked them all, in however many requests, the last
/// ack takes that timer away: it would otherwise wait out the lease in Redis
/// for a fetch to settle it.
#[tokio::test]
async fn the_ack_that_finishes_a_fetchs_messages_takes_its_timer_away() {
    let (redis, _server, mut client) = redis_server_and_client().await;
    let deadline = Sub::deadline(Duration::from_secs(600));
    let mut stream = SubStream::open(&mut client, "t", "s", deadline).await;
    publish(&mut client, "t", ["a", "b", "c", "d", "e", "f"]).await;
    let got = stream.messages(6, EVENTUALLY).await;
    assert_eq!(got.len(), 6);
    assert!(!timers(&redis, "t", "s").is_empty(), "the fetch's timer");
    ack_confirmed(&mut stream, &got[..2]).await;
    ack_confirmed(&mut stream, &got[2..5]).await;
    let left = timers(&redis, "t", "s");
    assert!(!left.is_empty(), "f is still out, yet no timer covers it");
    ack_confirmed(&mut stream, &got[5..]).await;
    assert_eq!(timers(&redis, "t", "s"), Vec::<String>::new());
}

/// The other side: a message of that fetch its client neither acks nor
/// nacks keeps its lease timer, beside others acked and nacked, and comes
/// back when its lease ends.
#[tokio::test]
async fn a_message_left_unacked_beside_acked_ones_is_redelivered_after_its_lease() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let deadline = Sub::deadline(Duration::from_secs(1));
    let mut stream = SubStream::open(&mut client, "t", "s", deadline).await;
    publish(&mut client, "t", ["a", "b", "c"]).await;
    let got = stream.messages(3, EVENTUALLY).await;
    assert_eq!(got.len(), 3);
    let (nacked, left) = (&got[1], &got[2]);
    stream
        .send(pb::StreamingSubscribeRequest {
            ack_ids: vec![got[0].ack_id.clone()],
            nack_ids: vec![nacked.ack_id.clone()],
            nack_delay: Some(pb_duration(Duration::from_secs(600))),
            confirm: true,
            ..Default::default()
        })
        .await;
    let confirmation = stream.confirmation().await;
    assert_eq!(confirmation.acked_ids, [got[0].ack_id.clone()]);
    assert_eq!(
        confirmation.nacked_ids,
        std::slice::from_ref(&nacked.ack_id)
    );
    let again = stream.messages(1, EVENTUALLY).await;
    assert_eq!(again.len(), 1, "the unacked message comes back");
    assert_eq!(again[0].message, left.message);
    assert_eq!(again[0].delivery_attempt, 2);
}

#[tokio::test]
async fn a_deadline_extended_on_the_stream_keeps_the_lease() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let deadline = Duration::from_secs(1);
    let mut stream = SubStream::open(&mut client, "t", "s", Sub::deadline(deadline)).await;
    publish(&mut client, "t", ["slow"]).await;
    let got = stream.messages(1, EVENTUALLY).await;
    stream
        .send(pb::StreamingSubscribeRequest {
            modify_deadline_ack_ids: vec![got[0].ack_id.clone()],
            modify_deadline: Some(pb_duration(Duration::from_secs(30))),
            ..Default::default()
        })
        .await;
    let again = stream.messages(1, deadline * 4).await;
    assert!(again.is_empty(), "an extended lease ran out: {again:?}");
}

#[tokio::test]
async fn flow_control_updates_on_the_stream() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let mut stream = SubStream::open(
        &mut client,
        "t",
        "s",
        Sub::deadline(Duration::from_secs(60)).max_outstanding(2),
    )
    .await;
    publish(&mut client, "t", payloads("m", 10)).await;
    let got = stream.messages(10, Duration::from_secs(3)).await;
    assert_eq!(got.len(), 2, "two outstanding at most");
    stream
        .send(pb::StreamingSubscribeRequest {
            max_outstanding_messages: 10,
            ..Default::default()
        })
        .await;
    let more = stream.messages(8, EVENTUALLY).await;
    assert_eq!(more.len(), 8, "the rest, once the stream may hold ten");
    let status = {
        stream
            .send(pb::StreamingSubscribeRequest {
                max_outstanding_messages: 1_000_000,
                ..Default::default()
            })
            .await;
        loop {
            match tokio::time::timeout(EVENTUALLY, stream.responses.message())
                .await
                .expect("an answer")
            {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("ended without a status"),
                Err(status) => break status,
            }
        }
    };
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("max_outstanding_messages"));
}

#[tokio::test]
async fn the_first_request_must_open_the_stream() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let (requests, receiver) = mpsc::channel(1);
    requests
        .send(pb::StreamingSubscribeRequest {
            ack_ids: vec!["1-0/1/c".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let status = match client
        .streaming_subscribe(ReceiverStream::new(receiver))
        .await
    {
        Err(status) => status,
        Ok(response) => response
            .into_inner()
            .message()
            .await
            .expect_err("the stream fails"),
    };
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("subscribe"), "{status:?}");
}

#[tokio::test]
async fn closing_the_request_side_ends_the_stream_and_keeps_unacked_messages() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let mut stream =
        SubStream::open(&mut client, "t", "s", Sub::deadline(Duration::from_secs(1))).await;
    publish(&mut client, "t", ["kept"]).await;
    let got = stream.messages(1, EVENTUALLY).await;
    assert_eq!(got.len(), 1);
    drop(stream.requests);
    loop {
        let next = tokio::time::timeout(EVENTUALLY, stream.responses.message())
            .await
            .expect("the stream ends");
        match next {
            Ok(Some(_)) => continue,
            Ok(None) => break,
            Err(status) => panic!("ended with {status:?}"),
        }
    }
    // The unacked message goes to the next consumer after its deadline.
    let mut other = subscribe(&mut client, "t", "s", Sub::default()).await;
    let again = expect_messages(&mut other, 1).await;
    assert_eq!(again[0].delivery_attempt, 2);
}

#[tokio::test]
async fn a_stream_closed_right_after_its_acks_leaves_nothing_stuck() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    for round in 0..5 {
        let topic = format!("closing-{round}");
        publish(&mut client, &topic, payloads("m", 5)).await;
        let mut stream = SubStream::open(
            &mut client,
            &topic,
            "s",
            Sub::deadline(Duration::from_secs(60)).max_outstanding(1),
        )
        .await;
        let first = stream.messages(1, EVENTUALLY).await;
        // The ack frees room for the next delivery; the client half-closes at
        // once and reads the stream to its end.
        stream
            .send(pb::StreamingSubscribeRequest {
                ack_ids: ack_ids_of(&first),
                ..Default::default()
            })
            .await;
        drop(stream.requests);
        let mut got_after_close = 0;
        loop {
            match tokio::time::timeout(EVENTUALLY, stream.responses.message())
                .await
                .expect("the stream ends")
            {
                Ok(Some(response)) => got_after_close += response.messages.len(),
                Ok(None) => break,
                Err(status) => panic!("round {round}: {status:?}"),
            }
        }
        // The others go to the next stream at once, as first attempts; only
        // what reached the closed stream's client (sent before the server
        // read the close) waits for its deadline.
        let mut next = subscribe(&mut client, &topic, "s", Sub::default()).await;
        let expected = 4 - got_after_close;
        let rest = next_messages(&mut next, expected, Duration::from_secs(5)).await;
        assert_eq!(
            rest.len(),
            expected,
            "round {round}: a delivery stayed with the closed stream"
        );
        assert!(
            rest.iter().all(|m| m.delivery_attempt == 1),
            "round {round}"
        );
    }
}

/// Fetches that waiting streams got from others' calls (`by` publish or ack).
async fn fetches_carried(server: &TestServer, by: &str) -> f64 {
    common::metrics::scrape(server.metrics_addr)
        .await
        .get("redq_fetches_carried_total", &[("by", by)])
        .unwrap_or(0.0)
}

/// Ack batches applied in the script call of a fetch, not a call of their own.
async fn ack_batches_riding(server: &TestServer) -> f64 {
    common::metrics::scrape(server.metrics_addr)
        .await
        .get("redq_ack_batches_riding_total", &[])
        .unwrap_or(0.0)
}

/// A stream with room waits with an offer: each message published on a
/// PublishStream comes with the fetch its publish carried, and the publish's
/// turn for the same entry is skipped, so each message costs one fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_stream_gets_each_message_by_the_fetch_its_publish_carried() {
    const ROUNDS: u64 = 20;
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut stream = SubStream::open(&mut client, "t", "s", Sub::default()).await;
    let mut publisher = PublishStream::open(&mut client).await;
    // The stream's first fetches: on opening, and once its place among the
    // topic's watchers is taken.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fetches_before = redis.calls_of("xreadgroup");
    let carried_before = fetches_carried(&server, "publish").await;
    for round in 0..ROUNDS {
        // Time for the stream to leave its offer after the last delivery.
        tokio::time::sleep(Duration::from_millis(20)).await;
        publisher
            .send(round, "t", vec![message(format!("m{round}"))])
            .await;
        publisher.answers(1).await;
        let got = stream.messages(1, EVENTUALLY).await;
        assert_eq!(payloads_of(&got), [format!("m{round}")]);
        stream
            .send(pb::StreamingSubscribeRequest {
                ack_ids: ack_ids_of(&got),
                ..Default::default()
            })
            .await;
    }
    let fetches = redis.calls_of("xreadgroup") - fetches_before;
    let carried = fetches_carried(&server, "publish").await - carried_before;
    println!("{ROUNDS} messages: {fetches} fetches, {carried} carried by their publish");
    assert!(
        carried >= (ROUNDS - 2) as f64,
        "{carried} of {ROUNDS} carried"
    );
    assert!(
        fetches <= ROUNDS + 2,
        "{fetches} fetches for {ROUNDS} messages"
    );
}

/// A full stream leaves its offer for the ack that frees its room: a backlog
/// taken one message at a time, acked on the stream, costs one fetch per
/// message (the stream does not fetch again when full, nor on the ack's
/// wake-up). A unary Ack, which its client may cancel, carries none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_stream_takes_the_room_an_ack_frees_by_the_fetch_the_ack_carried() {
    const BACKLOG: usize = 20;
    let (redis, server, mut client) = redis_server_and_client().await;
    publish(&mut client, "t", payloads("b", BACKLOG)).await;
    let opts = Sub::deadline(Duration::from_secs(60)).max_outstanding(1);
    let mut stream = SubStream::open(&mut client, "t", "s", opts).await;
    let mut held = stream.messages(1, EVENTUALLY).await;
    let mut got = payloads_of(&held);
    let fetches_before = redis.calls_of("xreadgroup");
    let carried_before = fetches_carried(&server, "ack").await;
    let rode_before = ack_batches_riding(&server).await;
    for _ in 1..BACKLOG {
        tokio::time::sleep(Duration::from_millis(20)).await;
        stream
            .send(pb::StreamingSubscribeRequest {
                ack_ids: ack_ids_of(&held),
                ..Default::default()
            })
            .await;
        held = stream.messages(1, EVENTUALLY).await;
        got.extend(payloads_of(&held));
    }
    let fetches = redis.calls_of("xreadgroup") - fetches_before;
    let carried = fetches_carried(&server, "ack").await - carried_before;
    let rode = ack_batches_riding(&server).await - rode_before;
    let taken = BACKLOG - 1;
    println!(
        "{taken} messages after the first: {fetches} fetches, {carried} carried by acks, \
         {rode} ack batches in those fetches' calls"
    );
    assert_eq!(rode, carried, "each carried fetch took its ack along");
    assert_eq!(
        got,
        payloads("b", BACKLOG),
        "the backlog in order, each once"
    );
    assert!(
        carried >= (taken - 2) as f64,
        "{carried} of {taken} carried"
    );
    assert!(
        fetches <= taken as u64 + 2,
        "{fetches} fetches for {taken} messages"
    );
    // The last one acked with a unary call: not carried, fetched on the wake-up.
    let before = fetches_carried(&server, "ack").await;
    ack(&mut client, "t", "s", ack_ids_of(&held))
        .await
        .expect("ack");
    publish(&mut client, "t", ["after"]).await;
    let last = stream.messages(1, EVENTUALLY).await;
    assert_eq!(payloads_of(&last), ["after"]);
    assert_eq!(fetches_carried(&server, "ack").await, before);
}

/// At a steady rate a stream with room acks each message as the next one is
/// published: the ack waits for that publish and goes first in the fetch the
/// publish carries, one script call instead of two. Every ack is applied all
/// the same: nothing acked comes back after its deadline, and a confirmed
/// ack lists what it acked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_of_a_stream_with_room_ride_on_the_fetch_the_next_publish_carries() {
    const ROUNDS: u64 = 50;
    let deadline = Duration::from_secs(2);
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut stream = SubStream::open(&mut client, "t", "s", Sub::deadline(deadline)).await;
    let mut publisher = PublishStream::open(&mut client).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    publisher.send(0, "t", vec![message("m0")]).await;
    publisher.answers(1).await;
    let mut held = stream.messages(1, EVENTUALLY).await;
    let scripts_before = redis.calls_of("evalsha");
    let rode_before = ack_batches_riding(&server).await;
    held = ack_each_as_the_next_is_published(&mut stream, &mut publisher, held, ROUNDS).await;
    let scripts = redis.calls_of("evalsha") - scripts_before;
    let rode = ack_batches_riding(&server).await - rode_before;
    let rounds = ROUNDS - 1;
    println!("{rounds} messages: {scripts} script calls, {rode} ack batches rode on a fetch");
    assert!(rode >= 1.0, "no ack rode on a fetch in {rounds} rounds");

    // The last ack, confirmed, rides on the last publish's fetch all the same.
    let last = held[0].ack_id.clone();
    stream
        .send(pb::StreamingSubscribeRequest {
            ack_ids: vec![last.clone()],
            confirm: true,
            ..Default::default()
        })
        .await;
    publisher.send(ROUNDS, "t", vec![message("end")]).await;
    publisher.answers(1).await;
    let confirmation = stream.confirmation().await;
    assert_eq!(confirmation.acked_ids, [last]);
    // Whatever was acked stays acked: only the unacked "end" comes back.
    let again = stream.messages(1, deadline * 3).await;
    assert_eq!(payloads_of(&again), ["end"], "{again:?}");
    let more = stream.messages(1, deadline * 2).await;
    assert!(
        more.iter()
            .all(|m| payloads_of(std::slice::from_ref(m)) == ["end"]),
        "an acked message came back: {more:?}"
    );
}

/// With `--ack-ride-wait 0s` the acks of a stream with room do not wait for
/// a publish: each goes in a call of its own at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_ride_wait_the_acks_of_a_stream_with_room_go_alone() {
    const ROUNDS: u64 = 20;
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &["--ack-ride-wait", "0s"]).await;
    let mut client = server.client().await;
    let mut stream = SubStream::open(&mut client, "t", "s", Sub::default()).await;
    let mut publisher = PublishStream::open(&mut client).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    publisher.send(0, "t", vec![message("m0")]).await;
    publisher.answers(1).await;
    let held = stream.messages(1, EVENTUALLY).await;
    let held = ack_each_as_the_next_is_published(&mut stream, &mut publisher, held, ROUNDS).await;
    let confirm = pb::StreamingSubscribeRequest {
        ack_ids: ack_ids_of(&held),
        confirm: true,
        ..Default::default()
    };
    stream.send(confirm).await;
    assert_eq!(stream.confirmation().await.acked_ids, ack_ids_of(&held));
    assert_eq!(ack_batches_riding(&server).await, 0.0);
}

/// Rounds 1..`rounds`: acks what the stream holds and at once publishes the
/// round's message, then takes it. Returns the last message, unacked.
async fn ack_each_as_the_next_is_published(
    stream: &mut SubStream,
    publisher: &mut PublishStream,
    mut held: Vec<pb::ReceivedMessage>,
    rounds: u64,
) -> Vec<pb::ReceivedMessage> {
    for round in 1..rounds {
        stream
            .send(pb::StreamingSubscribeRequest {
                ack_ids: ack_ids_of(&held),
                ..Default::default()
            })
            .await;
        publisher
            .send(round, "t", vec![message(format!("m{round}"))])
            .await;
        publisher.answers(1).await;
        held = stream.messages(1, EVENTUALLY).await;
        assert_eq!(payloads_of(&held), [format!("m{round}")]);
    }
    held
}
