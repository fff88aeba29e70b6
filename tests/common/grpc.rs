//! gRPC helpers: clients, publishing, subscribing and acking through the public API.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use redq::pb;
use redq::pb::queue_service_client::QueueServiceClient;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};

use super::*;

pub type Client = QueueServiceClient<Channel>;

/// A protobuf Duration from a std one.
pub fn pb_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// A message with just a payload.
pub fn message(payload: impl Into<Bytes>) -> pb::PublishMessage {
    pb::PublishMessage {
        payload: payload.into(),
        ..Default::default()
    }
}

/// Publishes one message per payload and returns the ids (one per payload).
/// A Redis of its own, a server on it with the default flags, and a client.
pub async fn redis_server_and_client() -> (RedisServer, TestServer, Client) {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let client = server.client().await;
    (redis, server, client)
}

/// A Redis of its own, two servers (replicas) on it with the default flags,
/// and a client of each.
pub struct TwoReplicas {
    pub redis: RedisServer,
    pub a: TestServer,
    pub b: TestServer,
    pub client_a: Client,
    pub client_b: Client,
}

pub async fn two_replicas() -> TwoReplicas {
    let redis = RedisServer::start();
    let a = TestServer::start(&redis.url(), &[]).await;
    let b = TestServer::start(&redis.url(), &[]).await;
    let client_a = a.client().await;
    let client_b = b.client().await;
    TwoReplicas {
        redis,
        a,
        b,
        client_a,
        client_b,
    }
}

pub async fn publish<P: Into<Bytes>>(
    client: &mut Client,
    topic: &str,
    payloads: impl IntoIterator<Item = P>,
) -> Vec<String> {
    let messages: Vec<_> = payloads.into_iter().map(message).collect();
    let n = messages.len();
    let ids = client
        .publish(pb::PublishRequest {
            topic: topic.to_string(),
            messages,
            dedupe_id: String::new(),
        })
        .await
        .unwrap_or_else(|s| panic!("publish to {topic}: {s:?}"))
        .into_inner()
        .message_ids;
    assert_eq!(ids.len(), n, "one id per published message");
    ids
}

/// `n` distinct payloads `"{prefix}-{i}"`.
pub fn payloads(prefix: &str, n: usize) -> Vec<Bytes> {
    (0..n)
        .map(|i| Bytes::from(format!("{prefix}-{i}")))
        .collect()
}

/// Options of a Subscribe call; `Default` = server defaults.
#[derive(Clone, Debug, Default)]
pub struct Sub {
    pub consumer: String,
    pub max_outstanding: u32,
    pub ack_deadline: Option<Duration>,
    pub start: pb::StartPosition,
    /// `retry_policy` as (minimum_backoff, maximum_backoff); None = server default.
    pub retry: Option<(Duration, Duration)>,
    /// 0 = server default.
    pub max_delivery_attempts: u32,
}

impl Sub {
    pub fn deadline(d: Duration) -> Self {
        Self {
            ack_deadline: Some(d),
            ..Default::default()
        }
    }

    pub fn max_outstanding(mut self, n: u32) -> Self {
        self.max_outstanding = n;
        self
    }

    pub fn consumer(mut self, name: &str) -> Self {
        self.consumer = name.to_string();
        self
    }

    pub fn latest(mut self) -> Self {
        self.start = pb::StartPosition::Latest;
        self
    }

    pub fn retry(mut self, minimum_backoff: Duration, maximum_backoff: Duration) -> Self {
        self.retry = Some((minimum_backoff, maximum_backoff));
        self
    }

    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_delivery_attempts = n;
        self
    }

    pub fn request(&self, topic: &str, subscription: &str) -> pb::SubscribeRequest {
        pb::SubscribeRequest {
            topic: topic.to_string(),
            subscription: subscription.to_string(),
            consumer: self.consumer.clone(),
            max_outstanding_messages: self.max_outstanding,
            ack_deadline: self.ack_deadline.map(pb_duration),
            start: self.start as i32,
            retry_policy: self.retry.map(|(min, max)| pb::RetryPolicy {
                minimum_backoff: Some(pb_duration(min)),
                maximum_backoff: Some(pb_duration(max)),
            }),
            max_delivery_attempts: self.max_delivery_attempts,
            ..Default::default()
        }
    }
}

/// Opens a Subscribe stream (returns once the server has answered the call).
pub async fn subscribe(
    client: &mut Client,
    topic: &str,
    subscription: &str,
    opts: Sub,
) -> Streaming<pb::SubscribeResponse> {
    client
        .subscribe(opts.request(topic, subscription))
        .await
        .unwrap_or_else(|s| panic!("subscribe {topic}/{subscription}: {s:?}"))
        .into_inner()
}

/// Collects messages until at least `n` arrived or `timeout` passed; returns what
/// it got (possibly more than `n` if the last response carried several). Panics if
/// the stream fails.
pub async fn next_messages(
    stream: &mut Streaming<pb::SubscribeResponse>,
    n: usize,
    timeout: Duration,
) -> Vec<pb::ReceivedMessage> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut got = Vec::new();
    while got.len() < n {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Err(_elapsed) => break,
            Ok(Ok(Some(resp))) => got.extend(resp.messages),
            Ok(Ok(None)) => break,
            Ok(Err(status)) => panic!(
                "subscribe stream failed after {} messages: {status:?}",
                got.len()
            ),
        }
    }
    got
}

/// Like `next_messages` but panics unless at least `n` arrived within `EVENTUALLY`.
pub async fn expect_messages(
    stream: &mut Streaming<pb::SubscribeResponse>,
    n: usize,
) -> Vec<pb::ReceivedMessage> {
    let got = next_messages(stream, n, EVENTUALLY).await;
    assert!(
        got.len() >= n,
        "expected {n} messages within {EVENTUALLY:?}, got {}: {:?}",
        got.len(),
        ids_of(&got)
    );
    got
}

/// Asserts the stream delivers no message for `dur` (empty responses are ignored;
/// the stream ending or failing is a failure too).
pub async fn assert_no_message_within(
    stream: &mut Streaming<pb::SubscribeResponse>,
    dur: Duration,
) {
    let deadline = tokio::time::Instant::now() + dur;
    loop {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Err(_elapsed) => return,
            Ok(Ok(Some(resp))) if resp.messages.is_empty() => continue,
            Ok(Ok(Some(resp))) => panic!(
                "expected no message within {dur:?}, got {:?}",
                resp.messages
                    .iter()
                    .map(|m| (id_of(m), m.delivery_attempt))
                    .collect::<Vec<_>>()
            ),
            Ok(Ok(None)) => panic!("stream ended while waiting for no message"),
            Ok(Err(status)) => panic!("stream failed while waiting for no message: {status:?}"),
        }
    }
}

/// Reads from several streams at once until `total` messages arrived across them
/// or `timeout` passed; returns the messages per stream.
pub async fn collect_from_all(
    streams: &mut [Streaming<pb::SubscribeResponse>],
    total: usize,
    timeout: Duration,
) -> Vec<Vec<pb::ReceivedMessage>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut got: Vec<Vec<pb::ReceivedMessage>> = vec![Vec::new(); streams.len()];
    while got.iter().map(Vec::len).sum::<usize>() < total {
        let reads = streams
            .iter_mut()
            .enumerate()
            .map(|(i, s)| Box::pin(async move { (i, s.message().await) }));
        let next = tokio::time::timeout_at(deadline, futures::future::select_all(reads)).await;
        match next {
            Err(_elapsed) => break,
            Ok(((i, Ok(Some(resp))), _, _)) => got[i].extend(resp.messages),
            Ok(((i, Ok(None)), _, _)) => panic!("stream {i} ended while collecting"),
            Ok(((i, Err(status)), _, _)) => {
                panic!("stream {i} failed while collecting: {status:?}")
            }
        }
    }
    got
}

/// The message id of a delivery.
pub fn id_of(m: &pb::ReceivedMessage) -> String {
    m.message.as_ref().map(|m| m.id.clone()).unwrap_or_default()
}

pub fn ids_of(ms: &[pb::ReceivedMessage]) -> Vec<String> {
    ms.iter().map(id_of).collect()
}

pub fn payloads_of(messages: &[pb::ReceivedMessage]) -> Vec<Bytes> {
    messages
        .iter()
        .map(|m| m.message.as_ref().expect("a message").payload.clone())
        .collect()
}

pub fn ack_ids_of(ms: &[pb::ReceivedMessage]) -> Vec<String> {
    ms.iter().map(|m| m.ack_id.clone()).collect()
}

pub async fn ack(
    client: &mut Client,
    topic: &str,
    subscription: &str,
    ack_ids: Vec<String>,
) -> Result<(), Status> {
    client
        .ack(pb::AckRequest {
            topic: topic.to_string(),
            subscription: subscription.to_string(),
            ack_ids,
            ..Default::default()
        })
        .await
        .map(|_| ())
}

pub async fn nack(
    client: &mut Client,
    topic: &str,
    subscription: &str,
    ack_ids: Vec<String>,
) -> Result<(), Status> {
    client
        .nack(pb::NackRequest {
            topic: topic.to_string(),
            subscription: subscription.to_string(),
            ack_ids,
            ..Default::default()
        })
        .await
        .map(|_| ())
}

pub async fn modify_ack_deadline(
    client: &mut Client,
    topic: &str,
    subscription: &str,
    ack_ids: Vec<String>,
    deadline: Duration,
) -> Result<(), Status> {
    client
        .modify_ack_deadline(pb::ModifyAckDeadlineRequest {
            topic: topic.to_string(),
            subscription: subscription.to_string(),
            ack_ids,
            ack_deadline: Some(pb_duration(deadline)),
            ..Default::default()
        })
        .await
        .map(|_| ())
}

/// Asserts `result` is an error with `code` whose message names `field`.
#[track_caller]
pub fn assert_status<T: std::fmt::Debug>(result: Result<T, Status>, code: Code, field: &str) {
    match result {
        Ok(v) => panic!("expected {code:?} naming {field:?}, got Ok({v:?})"),
        Err(s) => {
            assert_eq!(s.code(), code, "status for {field:?}: {s:?}");
            assert!(
                s.message().contains(field),
                "status message should name {field:?}: {:?}",
                s.message()
            );
        }
    }
}

/// `GET <path>` over HTTP/1.0; returns the status code.
pub async fn http_get(addr: SocketAddr, path: &str) -> u16 {
    http_get_with_body(addr, path).await.0
}

/// `GET <path>` over HTTP/1.0; returns the status code and the body.
pub async fn http_get_with_body(addr: SocketAddr, path: &str) -> (u16, String) {
    let response = http_get_response(addr, path).await;
    let head = String::from_utf8_lossy(&response);
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("GET {path} on {addr}: no status line in {head:?}"));
    let body = head
        .split_once("\r\n\r\n")
        .map_or_else(String::new, |(_, body)| body.to_owned());
    (status, body)
}

/// The whole response (head and body) to `GET <path>` over HTTP/1.0.
pub async fn http_get_response(addr: SocketAddr, path: &str) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut response = Vec::new();
        conn.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .unwrap_or_else(|_| panic!("GET {path} on {addr} timed out"))
        .unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"))
}

/// Polls `GET path` until it returns `want` (panics after `EVENTUALLY`).
pub async fn wait_http_status(addr: SocketAddr, path: &str, want: u16) {
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let got = http_get(addr, path).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "GET {path} on {addr} is {got}, expected {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Counts deliveries per message id.
pub fn count_by_id(ms: &[pb::ReceivedMessage]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for m in ms {
        *counts.entry(id_of(m)).or_insert(0) += 1;
    }
    counts
}
