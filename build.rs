//! Compiles `proto/` with protox (no system protoc needed) into tonic/prost code,
//! writes the encoded descriptor set that gRPC reflection serves, and
//! generates the server traits of Google Pub/Sub's `Publisher` and
//! `Subscriber` over the message types of `googleapis-tonic-google-pubsub-v1`
//! (a crate of client code only). Only the RPCs redq serves are listed: the
//! others answer `UNIMPLEMENTED`.

use prost::Message;
use std::path::PathBuf;
use tonic_build::manual::{Method, Service};

const PROTOS: &[&str] = &[
    "proto/redq/v1/queue.proto",
    "proto/redq/v1/admin.proto",
    "proto/google/rpc/status.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("redq_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        // Payloads are passed through without copying.
        .bytes(".redq.v1")
        // A request that does not decode is INVALID_ARGUMENT (see src/grpc/codec.rs).
        .codec_path("crate::grpc::codec::Codec")
        .compile_fds(descriptors)?;
    tonic_build::manual::Builder::new()
        .build_client(false)
        .build_transport(false)
        .compile(&[pubsub_publisher(), pubsub_subscriber()]);
    Ok(())
}

/// The Rust path of a `google.pubsub.v1` message type.
const PUBSUB: &str = "googleapis_tonic_google_pubsub_v1::google::pubsub::v1";

fn pubsub_method(name: &str, route: &str, input: &str, output: &str) -> Method {
    // `google.protobuf.Empty` is prost's `()`, which the builder cannot name.
    let path = |ty: &str| match ty {
        "Empty" => "crate::grpc::pubsub::Empty".to_owned(),
        _ => format!("{PUBSUB}::{ty}"),
    };
    Method::builder()
        .name(name)
        .route_name(route)
        .input_type(path(input))
        .output_type(path(output))
        .codec_path("crate::grpc::codec::Codec")
        .build()
}

fn pubsub_publisher() -> Service {
    [
        ("create_topic", "CreateTopic", "Topic", "Topic"),
        ("update_topic", "UpdateTopic", "UpdateTopicRequest", "Topic"),
        ("publish", "Publish", "PublishRequest", "PublishResponse"),
        ("get_topic", "GetTopic", "GetTopicRequest", "Topic"),
        (
            "list_topics",
            "ListTopics",
            "ListTopicsRequest",
            "ListTopicsResponse",
        ),
        (
            "list_topic_subscriptions",
            "ListTopicSubscriptions",
            "ListTopicSubscriptionsRequest",
            "ListTopicSubscriptionsResponse",
        ),
        ("delete_topic", "DeleteTopic", "DeleteTopicRequest", "Empty"),
        (
            "detach_subscription",
            "DetachSubscription",
            "DetachSubscriptionRequest",
            "DetachSubscriptionResponse",
        ),
    ]
    .into_iter()
    .fold(
        Service::builder()
            .name("Publisher")
            .package("google.pubsub.v1"),
        |service, (name, route, input, output)| {
            service.method(pubsub_method(name, route, input, output))
        },
    )
    .build()
}

fn pubsub_subscriber() -> Service {
    let streaming_pull = Method::builder()
        .name("streaming_pull")
        .route_name("StreamingPull")
        .input_type(format!("{PUBSUB}::StreamingPullRequest"))
        .output_type(format!("{PUBSUB}::StreamingPullResponse"))
        .codec_path("crate::grpc::codec::Codec")
        .client_streaming()
        .server_streaming()
        .build();
    [
        (
            "create_subscription",
            "CreateSubscription",
            "Subscription",
            "Subscription",
        ),
        (
            "get_subscription",
            "GetSubscription",
            "GetSubscriptionRequest",
            "Subscription",
        ),
        (
            "update_subscription",
            "UpdateSubscription",
            "UpdateSubscriptionRequest",
            "Subscription",
        ),
        (
            "list_subscriptions",
            "ListSubscriptions",
            "ListSubscriptionsRequest",
            "ListSubscriptionsResponse",
        ),
        (
            "delete_subscription",
            "DeleteSubscription",
            "DeleteSubscriptionRequest",
            "Empty",
        ),
        (
            "modify_ack_deadline",
            "ModifyAckDeadline",
            "ModifyAckDeadlineRequest",
            "Empty",
        ),
        ("acknowledge", "Acknowledge", "AcknowledgeRequest", "Empty"),
        ("pull", "Pull", "PullRequest", "PullResponse"),
        ("seek", "Seek", "SeekRequest", "SeekResponse"),
    ]
    .into_iter()
    .fold(
        Service::builder()
            .name("Subscriber")
            .package("google.pubsub.v1")
            .method(streaming_pull),
        |service, (name, route, input, output)| {
            service.method(pubsub_method(name, route, input, output))
        },
    )
    .build()
}
