//! The Google Pub/Sub v1 API through its generated gRPC clients, on real
//! Redis servers: Pub/Sub's naming and limits, subscriptions that start at
//! the topic's end, StreamingPull (acks, nacks, heartbeats, delivery
//! attempts, exactly-once confirmations, UNAVAILABLE at shutdown), Pull's
//! long poll, Seek, deleted topics, and topics shared with `redq.v1`.

mod common;

use common::*;
use prost_types::FieldMask;
use redq::grpc::pubsub::ps;
use redq::pb;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Request, Status, Streaming};
use tonic_types::StatusExt;

type Publisher = ps::publisher_client::PublisherClient<Channel>;
type Subscriber = ps::subscriber_client::SubscriberClient<Channel>;

const PROJECT: &str = "demo";

fn topic_path(id: &str) -> String {
    format!("projects/{PROJECT}/topics/{id}")
}

fn subscription_path(id: &str) -> String {
    format!("projects/{PROJECT}/subscriptions/{id}")
}

struct PubSub {
    _redis: RedisServer,
    server: TestServer,
    publisher: Publisher,
    subscriber: Subscriber,
}

async fn pubsub() -> PubSub {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let channel = server.channel().await;
    PubSub {
        _redis: redis,
        publisher: Publisher::new(channel.clone()).max_decoding_message_size(64 << 20),
        subscriber: Subscriber::new(channel).max_decoding_message_size(64 << 20),
        server,
    }
}

impl PubSub {
    async fn create_topic(&mut self, id: &str) {
        self.publisher
            .create_topic(ps::Topic {
                name: topic_path(id),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|s| panic!("create topic {id}: {s:?}"));
    }

    async fn create_subscription(&mut self, id: &str, topic: &str, settings: ps::Subscription) {
        self.subscriber
            .create_subscription(ps::Subscription {
                name: subscription_path(id),
                topic: topic_path(topic),
                ..settings
            })
            .await
            .unwrap_or_else(|s| panic!("create subscription {id}: {s:?}"));
    }

    async fn publish(&mut self, topic: &str, messages: Vec<ps::PubsubMessage>) -> Vec<String> {
        self.publisher
            .publish(ps::PublishRequest {
                topic: topic_path(topic),
                messages,
            })
            .await
            .unwrap_or_else(|s| panic!("publish to {topic}: {s:?}"))
            .into_inner()
            .message_ids
    }

    /// Opens a StreamingPull on `subscription`; returns the request sender
    /// and the responses.
    async fn streaming_pull(
        &mut self,
        first: ps::StreamingPullRequest,
    ) -> (
        mpsc::Sender<ps::StreamingPullRequest>,
        Streaming<ps::StreamingPullResponse>,
    ) {
        let (requests, outbound) = mpsc::channel(16);
        requests.send(first).await.unwrap();
        let responses = self
            .subscriber
            .streaming_pull(ReceiverStream::new(outbound))
            .await
            .unwrap_or_else(|s| panic!("streaming pull: {s:?}"))
            .into_inner();
        (requests, responses)
    }
}

fn data(payload: &str) -> ps::PubsubMessage {
    ps::PubsubMessage {
        data: payload.as_bytes().to_vec().into(),
        ..Default::default()
    }
}

fn open(subscription: &str) -> ps::StreamingPullRequest {
    ps::StreamingPullRequest {
        subscription: subscription_path(subscription),
        stream_ack_deadline_seconds: 60,
        ..Default::default()
    }
}

/// Reads responses until `n` messages came; panics after [`EVENTUALLY`].
async fn receive(
    responses: &mut Streaming<ps::StreamingPullResponse>,
    n: usize,
) -> Vec<ps::ReceivedMessage> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while got.len() < n {
        let response = tokio::time::timeout_at(deadline, responses.message())
            .await
            .unwrap_or_else(|_| panic!("{} of {n} messages came", got.len()))
            .expect("a response")
            .expect("the stream is open");
        assert!(
            response.subscription_properties.is_some(),
            "every response carries subscription_properties"
        );
        got.extend(response.received_messages);
    }
    got
}

/// The next response that is not only a heartbeat answer.
async fn next_with(
    responses: &mut Streaming<ps::StreamingPullResponse>,
    wanted: impl Fn(&ps::StreamingPullResponse) -> bool,
) -> ps::StreamingPullResponse {
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    loop {
        let response = tokio::time::timeout_at(deadline, responses.message())
            .await
            .expect("a response in time")
            .expect("a response")
            .expect("the stream is open");
        if wanted(&response) {
            return response;
        }
    }
}

/// Messages that came within `quiet` (heartbeat answers aside); None when
/// none did.
async fn messages_within(
    responses: &mut Streaming<ps::StreamingPullResponse>,
    quiet: Duration,
) -> Option<Vec<ps::ReceivedMessage>> {
    tokio::time::timeout(quiet, async {
        loop {
            let response = responses.message().await.unwrap().unwrap();
            if !response.received_messages.is_empty() {
                return response.received_messages;
            }
        }
    })
    .await
    .ok()
}

fn payload(message: &ps::ReceivedMessage) -> String {
    String::from_utf8(message.message.as_ref().unwrap().data.to_vec()).unwrap()
}

fn code<T: std::fmt::Debug>(result: Result<T, Status>) -> Code {
    result.expect_err("an error").code()
}

/// Fails unless `result` is INVALID_ARGUMENT whose message starts with `field`.
fn assert_invalid<T: std::fmt::Debug>(result: Result<T, Status>, field: &str) {
    let status = result.expect_err("INVALID_ARGUMENT");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().starts_with(field), "{field}: {status:?}");
}

#[tokio::test]
async fn topics_and_subscriptions_follow_pubsub_rules() {
    let mut ps = pubsub().await;
    ps.create_topic("orders").await;
    let again = ps
        .publisher
        .create_topic(ps::Topic {
            name: topic_path("orders"),
            ..Default::default()
        })
        .await;
    assert_eq!(code(again), Code::AlreadyExists);
    let labelled = ps
        .publisher
        .create_topic(ps::Topic {
            name: topic_path("labelled"),
            labels: HashMap::from([("team".to_owned(), "billing".to_owned())]),
            kms_key_name: "kept-as-given".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(labelled.labels["team"], "billing");
    let read = ps
        .publisher
        .get_topic(ps::GetTopicRequest {
            topic: topic_path("labelled"),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        read, labelled,
        "fields redq does not act on are echoed back"
    );
    let missing = ps
        .publisher
        .get_topic(ps::GetTopicRequest {
            topic: topic_path("missing"),
        })
        .await;
    assert_eq!(code(missing), Code::NotFound);
    for bad in [
        "orders",
        "projects/demo/topics/ab",
        "projects/demo/topics/goog-x",
    ] {
        let result = ps
            .publisher
            .create_topic(ps::Topic {
                name: bad.into(),
                ..Default::default()
            })
            .await;
        assert_invalid(result, "name");
    }

    // Subscriptions: on an existing topic only, with Pub/Sub's defaults.
    let orphan = ps
        .subscriber
        .create_subscription(ps::Subscription {
            name: subscription_path("orphan"),
            topic: topic_path("missing"),
            ..Default::default()
        })
        .await;
    assert_eq!(code(orphan), Code::NotFound);
    ps.create_subscription("workers", "orders", Default::default())
        .await;
    let workers = ps
        .subscriber
        .get_subscription(ps::GetSubscriptionRequest {
            subscription: subscription_path("workers"),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(workers.ack_deadline_seconds, 10);
    assert_eq!(workers.topic, topic_path("orders"));
    let short = ps
        .subscriber
        .create_subscription(ps::Subscription {
            name: subscription_path("short"),
            topic: topic_path("orders"),
            ack_deadline_seconds: 5,
            ..Default::default()
        })
        .await;
    assert_invalid(short, "ack_deadline_seconds");
    let push = ps
        .subscriber
        .create_subscription(ps::Subscription {
            name: subscription_path("pushed"),
            topic: topic_path("orders"),
            push_config: Some(ps::PushConfig {
                push_endpoint: "https://example.com/push".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
    assert_eq!(code(push), Code::Unimplemented);

    // Updates name their fields; immutable ones are refused.
    let updated = ps
        .subscriber
        .update_subscription(ps::UpdateSubscriptionRequest {
            subscription: Some(ps::Subscription {
                name: subscription_path("workers"),
                ack_deadline_seconds: 30,
                ..Default::default()
            }),
            update_mask: Some(FieldMask {
                paths: vec!["ack_deadline_seconds".into()],
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(updated.ack_deadline_seconds, 30);
    assert_eq!(updated.topic, topic_path("orders"));
    let immutable = ps
        .subscriber
        .update_subscription(ps::UpdateSubscriptionRequest {
            subscription: Some(ps::Subscription {
                name: subscription_path("workers"),
                enable_message_ordering: true,
                ..Default::default()
            }),
            update_mask: Some(FieldMask {
                paths: vec!["enable_message_ordering".into()],
            }),
        })
        .await;
    assert_invalid(immutable, "update_mask");

    // Listings, paged.
    let topics = ps
        .publisher
        .list_topics(ps::ListTopicsRequest {
            project: format!("projects/{PROJECT}"),
            page_size: 1,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(topics.topics.len(), 1);
    let rest = ps
        .publisher
        .list_topics(ps::ListTopicsRequest {
            project: format!("projects/{PROJECT}"),
            page_size: 10,
            page_token: topics.next_page_token,
        })
        .await
        .unwrap()
        .into_inner();
    let mut names: Vec<String> = topics
        .topics
        .into_iter()
        .chain(rest.topics)
        .map(|t| t.name)
        .collect();
    names.sort();
    assert_eq!(names, [topic_path("labelled"), topic_path("orders")]);
    let attached = ps
        .publisher
        .list_topic_subscriptions(ps::ListTopicSubscriptionsRequest {
            topic: topic_path("orders"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(attached.subscriptions, [subscription_path("workers")]);

    // The two APIs share the topic: redq's admin API sees it and its subscription.
    let topic = ps
        .server
        .admin()
        .await
        .get_topic(pb::GetTopicRequest {
            name: "demo.orders".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(topic.subscriptions, ["demo.workers"]);

    // A deleted topic leaves its subscriptions detached, not deleted.
    ps.publisher
        .delete_topic(ps::DeleteTopicRequest {
            topic: topic_path("orders"),
        })
        .await
        .unwrap();
    let detached = ps
        .subscriber
        .get_subscription(ps::GetSubscriptionRequest {
            subscription: subscription_path("workers"),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(detached.topic, "_deleted-topic_");
    let pull = ps
        .subscriber
        .pull(ps::PullRequest {
            subscription: subscription_path("workers"),
            max_messages: 1,
            ..Default::default()
        })
        .await;
    assert_eq!(code(pull), Code::FailedPrecondition);
    ps.subscriber
        .delete_subscription(ps::DeleteSubscriptionRequest {
            subscription: subscription_path("workers"),
        })
        .await
        .unwrap();
    let gone = ps
        .subscriber
        .delete_subscription(ps::DeleteSubscriptionRequest {
            subscription: subscription_path("workers"),
        })
        .await;
    assert_eq!(code(gone), Code::NotFound);

    // What redq does not serve is UNIMPLEMENTED.
    let snapshots = ps
        .publisher
        .list_topic_snapshots(ps::ListTopicSnapshotsRequest {
            topic: topic_path("labelled"),
            ..Default::default()
        })
        .await;
    assert_eq!(code(snapshots), Code::Unimplemented);
}

#[tokio::test]
async fn publishing_holds_pubsub_limits_with_the_default_flags() {
    let mut ps = pubsub().await;
    ps.create_topic("big").await;
    ps.create_subscription("reader", "big", Default::default())
        .await;
    let missing = ps
        .publisher
        .publish(ps::PublishRequest {
            topic: topic_path("nope"),
            messages: vec![data("x")],
        })
        .await;
    assert_eq!(code(missing), Code::NotFound);
    let publish = |messages: Vec<ps::PubsubMessage>| {
        let mut publisher = ps.publisher.clone();
        async move {
            publisher
                .publish(ps::PublishRequest {
                    topic: topic_path("big"),
                    messages,
                })
                .await
        }
    };
    assert_invalid(
        publish(vec![ps::PubsubMessage::default()]).await,
        "messages[0].data",
    );
    assert_invalid(publish(vec![data("x"); 1001]).await, "messages");
    let attributes = |n: usize, key: usize, value: usize| ps::PubsubMessage {
        attributes: (0..n)
            .map(|i| (format!("{i:0>key$}"), "v".repeat(value)))
            .collect(),
        ..Default::default()
    };
    assert_invalid(
        publish(vec![attributes(101, 3, 1)]).await,
        "messages[0].attributes",
    );
    assert_invalid(
        publish(vec![data("x"), attributes(1, 257, 1)]).await,
        "messages[1].attributes",
    );
    assert_invalid(
        publish(vec![attributes(1, 3, 1025)]).await,
        "messages[0].attributes",
    );
    let too_big = ps::PubsubMessage {
        data: vec![b'x'; 5 << 20].into(),
        ..Default::default()
    };
    assert_invalid(publish(vec![too_big]).await, "messages[0].data");

    // At the limits: 100 attributes of 256-byte keys and 1024-byte values,
    // no data; and 3 MiB messages, over redq.v1's default payload limit.
    let widest = attributes(100, 256, 1024);
    let three_mib = ps::PubsubMessage {
        data: vec![b'y'; 3 << 20].into(),
        ..Default::default()
    };
    publish(vec![widest.clone(), three_mib.clone(), three_mib.clone()])
        .await
        .expect("messages at Pub/Sub's limits");
    let (_requests, mut responses) = ps.streaming_pull(open("reader")).await;
    let got = receive(&mut responses, 3).await;
    let mut sizes: Vec<usize> = got
        .iter()
        .map(|m| m.message.as_ref().unwrap().data.len())
        .collect();
    sizes.sort();
    assert_eq!(sizes, [0, 3 << 20, 3 << 20]);
    let empty = got
        .iter()
        .find(|m| m.message.as_ref().unwrap().data.is_empty())
        .unwrap();
    assert_eq!(
        empty.message.as_ref().unwrap().attributes,
        widest.attributes
    );
}

#[tokio::test]
async fn streaming_pull_acks_nacks_and_answers_heartbeats() {
    let mut ps = pubsub().await;
    ps.create_topic("jobs").await;
    ps.publish("jobs", vec![data("before")]).await;
    ps.create_subscription("workers", "jobs", Default::default())
        .await;
    let ids = ps
        .publish("jobs", vec![data("a"), data("b"), data("c")])
        .await;
    let (requests, mut responses) = ps
        .streaming_pull(ps::StreamingPullRequest {
            protocol_version: 1,
            ..open("workers")
        })
        .await;
    let got = receive(&mut responses, 3).await;
    let mut payloads: Vec<String> = got.iter().map(payload).collect();
    payloads.sort();
    assert_eq!(
        payloads,
        ["a", "b", "c"],
        "a new subscription starts at the topic's end"
    );
    for message in &got {
        let inner = message.message.as_ref().unwrap();
        assert!(ids.contains(&inner.message_id));
        assert!(inner.publish_time.is_some());
        assert_eq!(
            message.delivery_attempt, 0,
            "only with a dead-letter policy"
        );
        assert!(message.ack_id.len() <= 164, "{}", message.ack_id);
    }
    // A nack (deadline 0) without a retry policy redelivers at once.
    let nacked = got.iter().find(|m| payload(m) == "b").unwrap();
    let others: Vec<String> = got
        .iter()
        .filter(|m| payload(m) != "b")
        .map(|m| m.ack_id.clone())
        .collect();
    requests
        .send(ps::StreamingPullRequest {
            ack_ids: others,
            modify_deadline_seconds: vec![0],
            modify_deadline_ack_ids: vec![nacked.ack_id.clone()],
            ..Default::default()
        })
        .await
        .unwrap();
    let again = receive(&mut responses, 1).await;
    assert_eq!(payload(&again[0]), "b");
    assert_ne!(again[0].ack_id, nacked.ack_id);
    // A heartbeat is answered.
    requests
        .send(ps::StreamingPullRequest::default())
        .await
        .unwrap();
    let answer = next_with(&mut responses, |r| r.received_messages.is_empty()).await;
    assert_eq!(answer.subscription_properties, Some(Default::default()));
    // Unary Acknowledge takes stream-issued ack ids; the rest stays acked.
    ps.subscriber
        .acknowledge(ps::AcknowledgeRequest {
            subscription: subscription_path("workers"),
            ack_ids: vec![again[0].ack_id.clone()],
        })
        .await
        .unwrap();
    let malformed = ps
        .subscriber
        .acknowledge(ps::AcknowledgeRequest {
            subscription: subscription_path("workers"),
            ack_ids: vec!["not-an-ack-id".into()],
        })
        .await;
    assert_invalid(malformed, "ack_ids[0]");
    // Acking a lease already acked is not an error without exactly-once.
    ps.subscriber
        .acknowledge(ps::AcknowledgeRequest {
            subscription: subscription_path("workers"),
            ack_ids: vec![again[0].ack_id.clone()],
        })
        .await
        .unwrap();
    let stats = ps
        .server
        .admin()
        .await
        .get_subscription(pb::GetSubscriptionRequest {
            topic: "demo.jobs".into(),
            name: "demo.workers".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let stats = stats.stats.unwrap();
    assert_eq!((stats.pending, stats.lag), (0, 0), "{stats:?}");
}

#[tokio::test]
async fn dead_letter_policy_counts_delivery_attempts() {
    let mut ps = pubsub().await;
    ps.create_topic("flaky").await;
    ps.create_topic("flaky-dead").await;
    let policy = ps::Subscription {
        dead_letter_policy: Some(ps::DeadLetterPolicy {
            dead_letter_topic: topic_path("flaky-dead"),
            max_delivery_attempts: 5,
        }),
        ..Default::default()
    };
    let missing_target = ps
        .subscriber
        .create_subscription(ps::Subscription {
            name: subscription_path("misdirected"),
            topic: topic_path("flaky"),
            dead_letter_policy: Some(ps::DeadLetterPolicy {
                dead_letter_topic: topic_path("no-such-topic"),
                max_delivery_attempts: 5,
            }),
            ..Default::default()
        })
        .await;
    assert_eq!(code(missing_target), Code::NotFound);
    ps.create_subscription("retrying", "flaky", policy).await;
    ps.create_subscription("dead-reader", "flaky-dead", Default::default())
        .await;
    ps.publish("flaky", vec![data("poison")]).await;
    let (requests, mut responses) = ps.streaming_pull(open("retrying")).await;
    for attempt in 1..=5 {
        let got = receive(&mut responses, 1).await;
        assert_eq!(got[0].delivery_attempt, attempt);
        requests
            .send(ps::StreamingPullRequest {
                modify_deadline_seconds: vec![0],
                modify_deadline_ack_ids: vec![got[0].ack_id.clone()],
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let sixth = tokio::time::timeout(Duration::from_secs(2), responses.message()).await;
    assert!(sixth.is_err(), "no sixth delivery: {sixth:?}");
    // The fifth nack dead-lettered it: it is republished to the dead-letter
    // topic with the attributes that say where it came from.
    let (_requests, mut dead) = ps.streaming_pull(open("dead-reader")).await;
    let forwarded = receive(&mut dead, 1).await;
    let message = forwarded[0].message.as_ref().unwrap();
    assert_eq!(message.data, "poison");
    let attributes = &message.attributes;
    assert_eq!(attributes["CloudPubSubDeadLetterSourceDeliveryCount"], "5");
    assert_eq!(
        attributes["CloudPubSubDeadLetterSourceSubscription"],
        "retrying"
    );
    assert_eq!(
        attributes["CloudPubSubDeadLetterSourceSubscriptionProject"],
        PROJECT
    );
    assert!(attributes.contains_key("CloudPubSubDeadLetterSourceTopicPublishTime"));
    let stats = ps
        .server
        .admin()
        .await
        .get_subscription(pb::GetSubscriptionRequest {
            topic: "demo.flaky".into(),
            name: "demo.retrying".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    assert_eq!(stats.dead_letters, 0, "forwarded, not kept: {stats:?}");
}

#[tokio::test]
async fn exactly_once_streams_confirm_each_ack_id() {
    let mut ps = pubsub().await;
    ps.create_topic("payments").await;
    let exactly_once = ps::Subscription {
        enable_exactly_once_delivery: true,
        ..Default::default()
    };
    ps.create_subscription("ledger", "payments", exactly_once)
        .await;
    ps.publish("payments", vec![data("one")]).await;
    let (requests, mut responses) = ps.streaming_pull(open("ledger")).await;
    let got = receive(&mut responses, 1).await;
    let ack_id = got[0].ack_id.clone();
    let ack = ps::StreamingPullRequest {
        ack_ids: vec![ack_id.clone()],
        ..Default::default()
    };
    requests.send(ack.clone()).await.unwrap();
    let first = next_with(&mut responses, |r| r.acknowledge_confirmation.is_some()).await;
    let properties = first.subscription_properties.unwrap();
    assert!(properties.exactly_once_delivery_enabled);
    let confirmed = first.acknowledge_confirmation.unwrap();
    assert_eq!(confirmed.ack_ids, std::slice::from_ref(&ack_id));
    // Acked already: the lease is gone.
    requests.send(ack).await.unwrap();
    let second = next_with(&mut responses, |r| r.acknowledge_confirmation.is_some()).await;
    let refused = second.acknowledge_confirmation.unwrap();
    assert!(refused.ack_ids.is_empty());
    assert_eq!(refused.invalid_ack_ids, std::slice::from_ref(&ack_id));
    // Unary calls report failed ack ids in the ErrorInfo the clients read.
    let status = ps
        .subscriber
        .acknowledge(ps::AcknowledgeRequest {
            subscription: subscription_path("ledger"),
            ack_ids: vec![ack_id.clone(), "malformed".into()],
        })
        .await
        .expect_err("INVALID_ARGUMENT");
    assert_eq!(status.code(), Code::InvalidArgument);
    let info = status
        .get_error_details()
        .error_info()
        .cloned()
        .expect("an ErrorInfo");
    assert_eq!(info.reason, "EXACTLY_ONCE_ACKID_FAILURE");
    assert_eq!(info.metadata[&ack_id], "PERMANENT_FAILURE_INVALID_ACK_ID");
    assert_eq!(
        info.metadata["malformed"],
        "PERMANENT_FAILURE_INVALID_ACK_ID"
    );
}

#[tokio::test]
async fn pull_long_polls_until_just_before_the_deadline() {
    let mut ps = pubsub().await;
    ps.create_topic("slow").await;
    ps.create_subscription("poller", "slow", Default::default())
        .await;
    let mut request = Request::new(ps::PullRequest {
        subscription: subscription_path("poller"),
        max_messages: 10,
        ..Default::default()
    });
    request.set_timeout(Duration::from_secs(3));
    let empty = ps
        .subscriber
        .pull(request)
        .await
        .expect("an empty answer, not DEADLINE_EXCEEDED");
    assert!(empty.into_inner().received_messages.is_empty());

    let mut subscriber = ps.subscriber.clone();
    let waiting = tokio::spawn(async move {
        let mut request = Request::new(ps::PullRequest {
            subscription: subscription_path("poller"),
            max_messages: 10,
            ..Default::default()
        });
        request.set_timeout(Duration::from_secs(20));
        subscriber.pull(request).await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    ps.publish("slow", vec![data("late")]).await;
    let pulled = waiting.await.unwrap().unwrap().into_inner();
    assert_eq!(pulled.received_messages.len(), 1);
    assert_eq!(payload(&pulled.received_messages[0]), "late");
}

#[tokio::test]
async fn seek_to_a_time_replays_acked_messages_only_when_retained() {
    let mut ps = pubsub().await;
    ps.create_topic("history").await;
    ps.create_subscription("plain", "history", Default::default())
        .await;
    let retained = ps::Subscription {
        retain_acked_messages: true,
        ..Default::default()
    };
    ps.create_subscription("retained", "history", retained)
        .await;
    let before = std::time::SystemTime::now() - Duration::from_secs(1);
    ps.publish("history", vec![data("1"), data("2")]).await;
    for subscription in ["plain", "retained"] {
        let (requests, mut responses) = ps.streaming_pull(open(subscription)).await;
        let got = receive(&mut responses, 2).await;
        requests
            .send(ps::StreamingPullRequest {
                ack_ids: got.iter().map(|m| m.ack_id.clone()).collect(),
                ..Default::default()
            })
            .await
            .unwrap();
        drop(requests);
        while let Ok(Some(_)) = responses.message().await {}
    }
    for subscription in ["plain", "retained"] {
        let stats = subscription_stats(&ps, subscription).await;
        assert_eq!(stats.pending, 0, "{subscription}: {stats:?}");
        ps.subscriber
            .seek(ps::SeekRequest {
                subscription: subscription_path(subscription),
                target: Some(ps::seek_request::Target::Time(before.into())),
            })
            .await
            .unwrap();
    }
    let (_r, mut replayed) = ps.streaming_pull(open("retained")).await;
    let again = receive(&mut replayed, 2).await;
    let mut payloads: Vec<String> = again.iter().map(payload).collect();
    payloads.sort();
    assert_eq!(payloads, ["1", "2"]);
    let (_p, mut plain) = ps.streaming_pull(open("plain")).await;
    let nothing = messages_within(&mut plain, Duration::from_secs(2)).await;
    assert!(nothing.is_none(), "acked messages came back: {nothing:?}");
    let snapshot = ps
        .subscriber
        .seek(ps::SeekRequest {
            subscription: subscription_path("plain"),
            target: Some(ps::seek_request::Target::Snapshot("s".into())),
        })
        .await;
    assert_eq!(code(snapshot), Code::Unimplemented);
}

async fn subscription_stats(ps: &PubSub, id: &str) -> pb::SubscriptionStats {
    ps.server
        .admin()
        .await
        .get_subscription(pb::GetSubscriptionRequest {
            topic: "demo.history".into(),
            name: format!("demo.{id}"),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap()
}

#[tokio::test]
async fn both_apis_share_topics_and_scheduled_messages_arrive_when_due() {
    let mut ps = pubsub().await;
    ps.create_topic("events").await;
    ps.create_subscription("pubsub-side", "events", Default::default())
        .await;
    // redq.v1 subscribes to the same topic under its redq name.
    let mut client = ps.server.client().await;
    let mut redq_side = subscribe(&mut client, "demo.events", "redq-side", Sub::default()).await;
    let message = ps::PubsubMessage {
        data: b"from pubsub".to_vec().into(),
        attributes: HashMap::from([("origin".to_owned(), "pubsub".to_owned())]),
        ordering_key: String::new(),
        ..Default::default()
    };
    ps.publish("events", vec![message]).await;
    let got = next_messages(&mut redq_side, 1, EVENTUALLY).await;
    assert_eq!(got[0].message.as_ref().unwrap().payload, "from pubsub");
    assert_eq!(
        got[0].message.as_ref().unwrap().attributes["origin"],
        "pubsub"
    );

    // A message scheduled through redq.v1 reaches the Pub/Sub subscriber when due.
    let (_requests, mut responses) = ps.streaming_pull(open("pubsub-side")).await;
    let first = receive(&mut responses, 1).await;
    assert_eq!(payload(&first[0]), "from pubsub");
    client
        .schedule_delayed(pb::ScheduleDelayedRequest {
            topic: "demo.events".into(),
            message: Some(message_with("scheduled")),
            delay: Some(pb_duration(Duration::from_secs(1))),
            ..Default::default()
        })
        .await
        .unwrap();
    let scheduled = receive(&mut responses, 1).await;
    assert_eq!(payload(&scheduled[0]), "scheduled");
}

fn message_with(payload: &str) -> pb::PublishMessage {
    message(payload.as_bytes().to_vec())
}

#[tokio::test]
async fn streams_end_unavailable_never_ok_at_shutdown() {
    let mut ps = pubsub().await;
    ps.create_topic("t-shutdown").await;
    ps.create_subscription("s-shutdown", "t-shutdown", Default::default())
        .await;
    let (_requests, mut responses) = ps.streaming_pull(open("s-shutdown")).await;
    // The stream is open once the server answered it (or a moment passed).
    let _ = tokio::time::timeout(Duration::from_millis(500), responses.message()).await;
    ps.server.sigterm();
    let end = tokio::time::timeout(EVENTUALLY, async {
        loop {
            match responses.message().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the stream ends");
    let status = end.expect_err("an error status, never OK");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
}

#[tokio::test]
async fn filters_deliver_matching_messages_and_ack_the_others() {
    let mut ps = pubsub().await;
    ps.create_topic("regions").await;
    let malformed = ps
        .subscriber
        .create_subscription(ps::Subscription {
            name: subscription_path("bad-filter"),
            topic: topic_path("regions"),
            filter: "attributes.region = europe".into(),
            ..Default::default()
        })
        .await;
    assert_invalid(malformed, "filter");
    let filtered = ps::Subscription {
        filter: r#"attributes.region = "eu" AND NOT attributes:test"#.into(),
        ..Default::default()
    };
    ps.create_subscription("europe", "regions", filtered).await;
    let tagged = |payload: &str, attributes: &[(&str, &str)]| ps::PubsubMessage {
        data: payload.as_bytes().to_vec().into(),
        attributes: attributes
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    ps.publish(
        "regions",
        vec![
            tagged("eu-1", &[("region", "eu")]),
            tagged("us-1", &[("region", "us")]),
            tagged("eu-test", &[("region", "eu"), ("test", "")]),
            tagged("none", &[]),
            tagged("eu-2", &[("region", "eu")]),
        ],
    )
    .await;
    let (_requests, mut responses) = ps.streaming_pull(open("europe")).await;
    let got = receive(&mut responses, 2).await;
    let mut payloads: Vec<String> = got.iter().map(payload).collect();
    payloads.sort();
    assert_eq!(payloads, ["eu-1", "eu-2"]);
    // The others were acked, not left pending, and counted.
    let stats = ps
        .server
        .admin()
        .await
        .get_subscription(pb::GetSubscriptionRequest {
            topic: "demo.regions".into(),
            name: "demo.europe".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        stats.settings.unwrap().filter,
        r#"attributes.region = "eu" AND NOT attributes:test"#
    );
    let stats = stats.stats.unwrap();
    assert_eq!((stats.lag, stats.pending), (0, 2), "{stats:?}");
    let metrics = common::metrics::scrape(ps.server.metrics_addr).await;
    let labels = [("topic", "demo.regions"), ("subscription", "demo.europe")];
    assert_eq!(metrics.value("redq_messages_filtered_total", &labels), 3.0);
}

/// The RPC table of docs/pubsub.md: (`Service/Method`, served).
fn documented_rpcs() -> Vec<(String, bool)> {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/pubsub.md"))
        .expect("docs/pubsub.md");
    let table = page.split("\n## RPCs\n").nth(1).expect("an RPCs section");
    table
        .lines()
        .skip_while(|line| !line.starts_with("| `"))
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let rpc = cells[1].trim_matches('`').to_owned();
            let served = match cells[2] {
                "served" => true,
                "UNIMPLEMENTED" => false,
                other => panic!("docs/pubsub.md: {rpc} is {other:?}"),
            };
            (rpc, served)
        })
        .collect()
}

#[tokio::test]
async fn the_documented_rpc_table_is_what_the_server_serves() {
    let ps = pubsub().await;
    let rpcs = documented_rpcs();
    assert!(rpcs.len() > 25, "{rpcs:?}");
    for (rpc, served) in rpcs {
        let package = if rpc.starts_with("iam.") {
            "google"
        } else {
            "google.pubsub.v1"
        };
        let path = format!("/{package}.{rpc}");
        let mut grpc = tonic::client::Grpc::new(ps.server.channel().await);
        grpc.ready().await.unwrap();
        // An empty request: a served RPC refuses it (no names), never as UNIMPLEMENTED.
        let answer = grpc
            .unary(
                Request::new(()),
                tonic::codegen::http::uri::PathAndQuery::try_from(path.as_str()).unwrap(),
                tonic_prost::ProstCodec::<(), ()>::default(),
            )
            .await;
        let code = answer.map_or_else(|status| status.code(), |_| Code::Ok);
        assert_eq!(code != Code::Unimplemented, served, "{path}: {code:?}");
    }
}

#[tokio::test]
async fn a_stream_reconnecting_with_its_client_id_keeps_its_leases_and_room() {
    let mut ps = pubsub().await;
    ps.create_topic("work").await;
    ps.create_subscription("workers", "work", Default::default())
        .await;
    ps.publish("work", vec![data("1"), data("2"), data("3")])
        .await;
    let with_client = |client_id: &str| ps::StreamingPullRequest {
        client_id: client_id.into(),
        max_outstanding_messages: 2,
        ..open("workers")
    };
    let (requests, mut first) = ps.streaming_pull(with_client("client-a")).await;
    let held = receive(&mut first, 2).await;
    drop(requests);
    let ended = tokio::time::timeout(EVENTUALLY, async {
        loop {
            match first.message().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the first stream ends");

    // Same client id: the two leases it still holds fill its room.
    let (_again, mut second) = ps.streaming_pull(with_client("client-a")).await;
    let early = messages_within(&mut second, Duration::from_millis(1500)).await;
    assert!(early.is_none(), "no room until its leases end: {early:?}");
    // Its ack ids still work, and free the room.
    ps.subscriber
        .acknowledge(ps::AcknowledgeRequest {
            subscription: subscription_path("workers"),
            ack_ids: held.iter().map(|m| m.ack_id.clone()).collect(),
        })
        .await
        .unwrap();
    let third = receive(&mut second, 1).await;
    assert_eq!(payload(&third[0]), "3");
}

#[tokio::test]
async fn a_stream_of_a_deleted_subscription_ends_without_internal() {
    let mut ps = pubsub().await;
    ps.create_topic("short-lived").await;
    ps.create_subscription("gone", "short-lived", Default::default())
        .await;
    let (_requests, mut responses) = ps.streaming_pull(open("gone")).await;
    ps.publish("short-lived", vec![data("x")]).await;
    receive(&mut responses, 1).await;
    ps.publisher
        .delete_topic(ps::DeleteTopicRequest {
            topic: topic_path("short-lived"),
        })
        .await
        .unwrap();
    ps.subscriber
        .delete_subscription(ps::DeleteSubscriptionRequest {
            subscription: subscription_path("gone"),
        })
        .await
        .unwrap();
    let end = tokio::time::timeout(EVENTUALLY, async {
        loop {
            match responses.message().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the stream ends");
    let status = end.expect_err("an error status, never OK");
    eprintln!("deleted subscription's stream ended with {status:?}");
    assert!(
        matches!(status.code(), Code::NotFound | Code::Unavailable),
        "{status:?}"
    );
    // A new stream on it is refused for good.
    let again = ps
        .subscriber
        .streaming_pull(tokio_stream::iter(vec![open("gone")]))
        .await;
    assert_eq!(code(again), Code::NotFound);
}

#[tokio::test]
async fn streaming_pull_holds_max_outstanding_bytes() {
    let mut ps = pubsub().await;
    ps.create_topic("large").await;
    ps.create_subscription("readers", "large", Default::default())
        .await;
    let kilobyte = |n: usize| data(&format!("{n}{}", "x".repeat(999)));
    ps.publish("large", (0..8).map(kilobyte).collect()).await;
    let (_requests, mut responses) = ps
        .streaming_pull(ps::StreamingPullRequest {
            max_outstanding_bytes: 2500,
            ..open("readers")
        })
        .await;
    // Two messages fit in 2,500 bytes; the third is the one that may go past.
    let mut held = receive(&mut responses, 3).await;
    assert_eq!(held.len(), 3, "past the byte limit");
    let more = messages_within(&mut responses, Duration::from_millis(1500)).await;
    assert!(more.is_none(), "past the byte limit: {more:?}");
    // Each ack lets one more through (2 held, 500 bytes left), never more.
    for _ in 0..2 {
        let acked = held.remove(0);
        ps.subscriber
            .acknowledge(ps::AcknowledgeRequest {
                subscription: subscription_path("readers"),
                ack_ids: vec![acked.ack_id],
            })
            .await
            .unwrap();
        let next = receive(&mut responses, 1).await;
        assert_eq!(next.len(), 1, "past the byte limit");
        held.extend(next);
        let more = messages_within(&mut responses, Duration::from_millis(500)).await;
        assert!(more.is_none(), "past the byte limit: {more:?}");
    }
    // Once all are acked, the rest come.
    ps.subscriber
        .acknowledge(ps::AcknowledgeRequest {
            subscription: subscription_path("readers"),
            ack_ids: held.iter().map(|m| m.ack_id.clone()).collect(),
        })
        .await
        .unwrap();
    let rest = receive(&mut responses, 3).await;
    let mut seen: Vec<String> = rest.iter().map(|m| payload(m)[..1].to_owned()).collect();
    seen.sort();
    assert_eq!(seen, ["5", "6", "7"]);
}
