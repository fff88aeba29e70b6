//! Validation: bad input gets INVALID_ARGUMENT naming the offending field, limits
//! come from the server's flags, and the server keeps serving afterwards.

#![allow(clippy::needless_update)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use redq::pb;
use tonic::{Code, Status};

const TOPIC: &str = "valid.topic_name-1";
const SUB: &str = "valid-sub";

/// Small limits so the boundaries are cheap to hit.
const LIMITS: &[&str] = &[
    "--max-payload-bytes",
    "16",
    "--max-batch-size",
    "3",
    "--max-attributes",
    "2",
    "--max-attribute-bytes",
    "20",
    "--max-outstanding-limit",
    "50",
    "--default-max-outstanding",
    "10",
    "--max-ack-deadline",
    "1m",
];

async fn start() -> (RedisServer, TestServer, Client) {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), LIMITS).await;
    let client = server.client().await;
    (redis, server, client)
}

fn long_name(len: usize) -> String {
    "a".repeat(len)
}

fn bad_names() -> Vec<String> {
    vec![
        String::new(),
        long_name(201),
        "a b".to_string(),
        "/x".to_string(),
        "-leading-dash".to_string(),
        ".dot".to_string(),
        "x/y".to_string(),
        "ünïcode".to_string(),
        "a:b".to_string(),
        "{tag}".to_string(),
    ]
}

fn good_names() -> Vec<String> {
    vec![
        "a".to_string(),
        long_name(200),
        "A9._-z".to_string(),
        "0start".to_string(),
    ]
}

async fn publish_raw(
    client: &mut Client,
    topic: &str,
    messages: Vec<pb::PublishMessage>,
) -> Result<Vec<String>, Status> {
    client
        .publish(pb::PublishRequest {
            topic: topic.to_string(),
            messages,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().message_ids)
}

/// The status a Subscribe call ends with, whether the server rejects the call
/// itself or fails the stream right away.
async fn subscribe_error(client: &mut Client, request: pb::SubscribeRequest) -> Result<(), Status> {
    let mut stream = match client.subscribe(request.clone()).await {
        Err(status) => return Err(status),
        Ok(resp) => resp.into_inner(),
    };
    match tokio::time::timeout(Duration::from_secs(5), stream.message()).await {
        Ok(Err(status)) => Err(status),
        other => panic!("Subscribe {request:?} was accepted: {other:?}"),
    }
}

fn with_attributes(pairs: &[(&str, &str)]) -> pb::PublishMessage {
    pb::PublishMessage {
        payload: Bytes::from_static(b"x"),
        attributes: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
        ..Default::default()
    }
}

/// After a run of rejected calls the server still works normally.
async fn assert_still_serving(server: &TestServer, client: &mut Client) {
    server.wait_serving().await;
    let ids = publish(client, TOPIC, ["still alive"]).await;
    assert_eq!(ids.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_rejects_bad_topic_names() {
    let (_redis, server, mut client) = start().await;
    for name in bad_names() {
        let result = publish_raw(&mut client, &name, vec![message("x")]).await;
        assert_status(result, Code::InvalidArgument, "topic");
    }
    for name in good_names() {
        publish_raw(&mut client, &name, vec![message("x")])
            .await
            .unwrap_or_else(|s| panic!("topic {name:?} is valid: {s:?}"));
    }
    assert_still_serving(&server, &mut client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_rejects_bad_batches_and_payloads() {
    let (_redis, server, mut client) = start().await;

    assert_status(
        publish_raw(&mut client, TOPIC, vec![]).await,
        Code::InvalidArgument,
        "messages",
    );
    let four = (0..4).map(|i| message(format!("m{i}"))).collect();
    assert_status(
        publish_raw(&mut client, TOPIC, four).await,
        Code::InvalidArgument,
        "messages",
    );
    let three = (0..3).map(|i| message(format!("m{i}"))).collect();
    publish_raw(&mut client, TOPIC, three)
        .await
        .expect("a batch of max-batch-size is fine");

    assert_status(
        publish_raw(&mut client, TOPIC, vec![message(Bytes::new())]).await,
        Code::InvalidArgument,
        "messages[0].payload",
    );
    assert_status(
        publish_raw(
            &mut client,
            TOPIC,
            vec![message("ok"), message(vec![b'x'; 17])],
        )
        .await,
        Code::InvalidArgument,
        "messages[1].payload",
    );
    publish_raw(&mut client, TOPIC, vec![message(vec![b'x'; 16])])
        .await
        .expect("a payload of max-payload-bytes is fine");

    // A rejected batch publishes nothing, not even its valid messages.
    let mut stream = subscribe(&mut client, "untouched", "probe", Sub::default()).await;
    let rejected = publish_raw(
        &mut client,
        "untouched",
        vec![message("ok"), message(Bytes::new())],
    )
    .await;
    assert_status(rejected, Code::InvalidArgument, "messages[1].payload");
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;

    assert_still_serving(&server, &mut client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_rejects_bad_attributes() {
    let (_redis, server, mut client) = start().await;

    let too_many = with_attributes(&[("a", "1"), ("b", "2"), ("c", "3")]);
    assert_status(
        publish_raw(&mut client, TOPIC, vec![too_many]).await,
        Code::InvalidArgument,
        "messages[0].attributes",
    );
    publish_raw(
        &mut client,
        TOPIC,
        vec![with_attributes(&[("a", "1"), ("b", "2")])],
    )
    .await
    .expect("max-attributes attributes are fine");

    // key + value = 21 bytes > 20.
    let oversize = with_attributes(&[("key-0123", "value-0123456")]);
    assert_status(
        publish_raw(&mut client, TOPIC, vec![oversize]).await,
        Code::InvalidArgument,
        "messages[0].attributes",
    );
    publish_raw(
        &mut client,
        TOPIC,
        vec![with_attributes(&[("key-0123", "value-012345")])],
    )
    .await
    .expect("key + value of max-attribute-bytes is fine");

    assert_still_serving(&server, &mut client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_rejects_bad_names() {
    let (_redis, server, mut client) = start().await;
    for name in bad_names() {
        let bad_topic = Sub::default().request(&name, SUB);
        assert_status(
            subscribe_error(&mut client, bad_topic).await,
            Code::InvalidArgument,
            "topic",
        );
        let bad_sub = Sub::default().request(TOPIC, &name);
        assert_status(
            subscribe_error(&mut client, bad_sub).await,
            Code::InvalidArgument,
            "subscription",
        );
    }
    // The consumer name is optional, but when given it must be a valid name.
    for name in bad_names().into_iter().filter(|n| !n.is_empty()) {
        let bad_consumer = Sub::default().consumer(&name).request(TOPIC, SUB);
        assert_status(
            subscribe_error(&mut client, bad_consumer).await,
            Code::InvalidArgument,
            "consumer",
        );
    }
    assert_still_serving(&server, &mut client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_rejects_bad_limits_and_deadlines() {
    let (_redis, server, mut client) = start().await;

    let over = Sub::default().max_outstanding(51).request(TOPIC, SUB);
    assert_status(
        subscribe_error(&mut client, over).await,
        Code::InvalidArgument,
        "max_outstanding_messages",
    );

    for (label, deadline) in [
        (
            "zero",
            prost_types::Duration {
                seconds: 0,
                nanos: 0,
            },
        ),
        (
            "negative",
            prost_types::Duration {
                seconds: -5,
                nanos: 0,
            },
        ),
        ("over max", pb_duration(Duration::from_secs(61))),
    ] {
        let mut request = Sub::default().request(TOPIC, SUB);
        request.ack_deadline = Some(deadline);
        let result = subscribe_error(&mut client, request).await;
        assert!(result.is_err(), "{label} ack_deadline accepted");
        assert_status(result, Code::InvalidArgument, "ack_deadline");
    }

    // The boundaries themselves are accepted and deliver.
    let ids = publish(&mut client, TOPIC, ["x"]).await;
    let opts = Sub::deadline(Duration::from_secs(60)).max_outstanding(50);
    let mut stream = subscribe(&mut client, TOPIC, SUB, opts).await;
    let got = expect_messages(&mut stream, 1).await;
    assert_eq!(ids_of(&got), ids);

    assert_still_serving(&server, &mut client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_nack_and_modify_reject_bad_ack_ids_and_names() {
    let (_redis, server, mut client) = start().await;

    // One genuine ack id, to show that the bad one is reported by its index.
    publish(&mut client, TOPIC, ["x"]).await;
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(Duration::from_secs(60)),
    )
    .await;
    let got = expect_messages(&mut stream, 1).await;
    let good = got[0].ack_id.clone();
    let minute = Duration::from_secs(30);

    for (ids, field) in [
        (vec![], "ack_ids"),
        (vec!["garbage".to_string()], "ack_ids[0]"),
        (vec![String::new()], "ack_ids[0]"),
        (
            vec![good.clone(), "not-an-ack-id".to_string()],
            "ack_ids[1]",
        ),
    ] {
        assert_status(
            ack(&mut client, TOPIC, SUB, ids.clone()).await,
            Code::InvalidArgument,
            field,
        );
        assert_status(
            nack(&mut client, TOPIC, SUB, ids.clone()).await,
            Code::InvalidArgument,
            field,
        );
        assert_status(
            modify_ack_deadline(&mut client, TOPIC, SUB, ids, minute).await,
            Code::InvalidArgument,
            field,
        );
    }

    for name in bad_names() {
        assert_status(
            ack(&mut client, &name, SUB, vec![good.clone()]).await,
            Code::InvalidArgument,
            "topic",
        );
        assert_status(
            ack(&mut client, TOPIC, &name, vec![good.clone()]).await,
            Code::InvalidArgument,
            "subscription",
        );
        assert_status(
            nack(&mut client, &name, SUB, vec![good.clone()]).await,
            Code::InvalidArgument,
            "topic",
        );
        assert_status(
            modify_ack_deadline(&mut client, TOPIC, &name, vec![good.clone()], minute).await,
            Code::InvalidArgument,
            "subscription",
        );
    }

    for (label, deadline) in [
        (
            "negative",
            prost_types::Duration {
                seconds: -1,
                nanos: 0,
            },
        ),
        ("over max", pb_duration(Duration::from_secs(61))),
    ] {
        let result = client
            .modify_ack_deadline(pb::ModifyAckDeadlineRequest {
                topic: TOPIC.to_string(),
                subscription: SUB.to_string(),
                ack_ids: vec![good.clone()],
                ack_deadline: Some(deadline),
                ..Default::default()
            })
            .await;
        assert!(result.is_err(), "{label} ack_deadline accepted");
        assert_status(result, Code::InvalidArgument, "ack_deadline");
    }

    // None of the rejected calls touched the genuine delivery: it still acks.
    ack(&mut client, TOPIC, SUB, vec![good])
        .await
        .expect("genuine ack");
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;
    assert_still_serving(&server, &mut client).await;
}
