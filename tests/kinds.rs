//! Topic kinds, the part every kind shares: a kind is set by CreateTopic
//! only, reported by GetTopic and ListTopics, fixed afterwards, kept by the
//! replicas that saw it, and each kind refuses the calls that make no sense
//! for it. EPHEMERAL and LIST delivery have suites of their own.

mod common;

use common::*;
use redq::pb;
use tonic::Code;

fn settings(kind: pb::TopicKind, list_key: &str) -> pb::TopicSettings {
    pb::TopicSettings {
        kind: kind.into(),
        list_key: list_key.into(),
        ..Default::default()
    }
}

async fn create(
    admin: &mut Admin,
    name: &str,
    settings: pb::TopicSettings,
) -> Result<pb::Topic, tonic::Status> {
    admin
        .create_topic(pb::CreateTopicRequest {
            name: name.into(),
            settings: Some(settings),
        })
        .await
        .map(|response| response.into_inner())
}

async fn update(
    admin: &mut Admin,
    name: &str,
    settings: pb::TopicSettings,
) -> Result<pb::Topic, tonic::Status> {
    admin
        .update_topic(pb::UpdateTopicRequest {
            name: name.into(),
            settings: Some(settings),
        })
        .await
        .map(|response| response.into_inner())
}

async fn kind_of(admin: &mut Admin, name: &str) -> (pb::TopicKind, String) {
    let topic = admin
        .get_topic(pb::GetTopicRequest { name: name.into() })
        .await
        .expect("GetTopic")
        .into_inner();
    let settings = topic.settings.expect("settings");
    (settings.kind(), settings.list_key)
}

#[tokio::test]
async fn each_kind_is_created_reported_and_listed() {
    let (_redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    create(
        &mut admin,
        "durable",
        settings(pb::TopicKind::Unspecified, ""),
    )
    .await
    .expect("an unspecified kind");
    create(&mut admin, "live", settings(pb::TopicKind::Ephemeral, ""))
        .await
        .expect("EPHEMERAL");
    let created = create(
        &mut admin,
        "jobs",
        settings(pb::TopicKind::List, "queue:jobs"),
    )
    .await
    .expect("LIST");
    assert_eq!(created.settings.unwrap().kind(), pb::TopicKind::List);
    // Publishing to an unknown topic creates a STREAM topic, as before.
    publish(&mut client, "implicit", ["x"]).await;

    assert_eq!(
        kind_of(&mut admin, "durable").await,
        (pb::TopicKind::Stream, String::new())
    );
    assert_eq!(
        kind_of(&mut admin, "live").await,
        (pb::TopicKind::Ephemeral, String::new())
    );
    assert_eq!(
        kind_of(&mut admin, "jobs").await,
        (pb::TopicKind::List, "queue:jobs".into())
    );
    assert_eq!(
        kind_of(&mut admin, "implicit").await,
        (pb::TopicKind::Stream, String::new())
    );
    let listed = admin
        .list_topics(pb::ListTopicsRequest::default())
        .await
        .expect("ListTopics")
        .into_inner()
        .topics;
    let kinds: Vec<(String, pb::TopicKind)> = listed
        .into_iter()
        .map(|topic| (topic.name, topic.settings.unwrap().kind()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("durable".to_string(), pb::TopicKind::Stream),
            ("implicit".to_string(), pb::TopicKind::Stream),
            ("jobs".to_string(), pb::TopicKind::List),
            ("live".to_string(), pb::TopicKind::Ephemeral),
        ]
    );
}

#[tokio::test]
async fn a_kind_and_a_list_key_are_fixed_at_creation() {
    let (_redis, server, _client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    create(&mut admin, "live", settings(pb::TopicKind::Ephemeral, ""))
        .await
        .expect("EPHEMERAL");
    create(
        &mut admin,
        "jobs",
        settings(pb::TopicKind::List, "queue:jobs"),
    )
    .await
    .expect("LIST");
    create(&mut admin, "durable", settings(pb::TopicKind::Stream, ""))
        .await
        .expect("STREAM");

    let to_stream = update(&mut admin, "live", settings(pb::TopicKind::Stream, "")).await;
    assert_status(to_stream, Code::InvalidArgument, "settings.kind");
    let to_list = update(
        &mut admin,
        "durable",
        settings(pb::TopicKind::List, "other"),
    )
    .await;
    assert_status(to_list, Code::InvalidArgument, "settings.kind");
    let moved = update(&mut admin, "jobs", settings(pb::TopicKind::List, "other")).await;
    assert_status(moved, Code::InvalidArgument, "settings.list_key");
    // The same kind (or none) changes nothing, and other settings still change.
    update(&mut admin, "live", settings(pb::TopicKind::Ephemeral, ""))
        .await
        .expect("the same kind");
    let payload = pb::TopicSettings {
        max_payload_bytes: Some(100),
        ..settings(pb::TopicKind::List, "queue:jobs")
    };
    let updated = update(&mut admin, "jobs", payload)
        .await
        .expect("max_payload_bytes");
    assert_eq!(updated.settings.unwrap().max_payload_bytes, Some(100));
    assert_eq!(
        kind_of(&mut admin, "jobs").await,
        (pb::TopicKind::List, "queue:jobs".into())
    );
}

#[tokio::test]
async fn kinds_and_list_keys_are_checked() {
    let (redis, server, _client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    let no_key = create(&mut admin, "a", settings(pb::TopicKind::List, "")).await;
    assert_status(no_key, Code::InvalidArgument, "settings.list_key");
    let long = "k".repeat(513);
    let too_long = create(&mut admin, "a", settings(pb::TopicKind::List, &long)).await;
    assert_status(too_long, Code::InvalidArgument, "settings.list_key");
    let ours = create(
        &mut admin,
        "a",
        settings(pb::TopicKind::List, "redq:topics"),
    )
    .await;
    assert_status(ours, Code::InvalidArgument, "settings.list_key");
    let key_on_ephemeral = create(&mut admin, "a", settings(pb::TopicKind::Ephemeral, "k")).await;
    assert_status(key_on_ephemeral, Code::InvalidArgument, "settings.list_key");
    let unknown = pb::TopicSettings {
        kind: 9,
        ..Default::default()
    };
    assert_status(
        create(&mut admin, "a", unknown).await,
        Code::InvalidArgument,
        "settings.kind",
    );
    // Retention and dedupe are STREAM settings.
    for (field, settings) in [
        (
            "settings.retention_max_age",
            pb::TopicSettings {
                retention_max_age: Some(pb_duration(std::time::Duration::from_secs(60))),
                ..settings(pb::TopicKind::Ephemeral, "")
            },
        ),
        (
            "settings.hard_max_length",
            pb::TopicSettings {
                hard_max_length: Some(10),
                ..settings(pb::TopicKind::List, "queue:a")
            },
        ),
        (
            "settings.dedupe_window",
            pb::TopicSettings {
                dedupe_window: Some(pb_duration(std::time::Duration::from_secs(60))),
                ..settings(pb::TopicKind::List, "queue:a")
            },
        ),
    ] {
        assert_status(
            create(&mut admin, "a", settings).await,
            Code::InvalidArgument,
            field,
        );
    }
    // A key of another type, and a list another LIST topic consumes.
    redis.cli(&["SET", "a-string", "x"]);
    let string = create(&mut admin, "a", settings(pb::TopicKind::List, "a-string")).await;
    assert_status(string, Code::FailedPrecondition, "settings.list_key");
    create(&mut admin, "first", settings(pb::TopicKind::List, "shared"))
        .await
        .expect("the first LIST topic of the key");
    let second = create(
        &mut admin,
        "second",
        settings(pb::TopicKind::List, "shared"),
    )
    .await;
    assert_status(second, Code::FailedPrecondition, "settings.list_key");
    // None of the refused creations left a topic behind.
    let names: Vec<String> = admin
        .list_topics(pb::ListTopicsRequest::default())
        .await
        .expect("ListTopics")
        .into_inner()
        .topics
        .into_iter()
        .map(|topic| topic.name)
        .collect();
    assert_eq!(names, ["first"]);
    // Deleting the topic gives the key up, and never deletes the list.
    redis.cli(&["LPUSH", "shared", "legacy"]);
    admin
        .delete_topic(pb::DeleteTopicRequest {
            name: "first".into(),
        })
        .await
        .expect("DeleteTopic");
    assert_eq!(redis.cli(&["LLEN", "shared"]).trim(), "1");
    create(
        &mut admin,
        "second",
        settings(pb::TopicKind::List, "shared"),
    )
    .await
    .expect("the key is free again");
}

/// Redis lost a topic's kind (a restart without persistence, a failover
/// that lost the write): a replica that saw the kind stores it again rather
/// than letting the topic become a STREAM topic.
#[tokio::test]
async fn a_replica_stores_again_a_kind_redis_lost() {
    let (redis, server, _client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    create(&mut admin, "live", settings(pb::TopicKind::Ephemeral, ""))
        .await
        .expect("EPHEMERAL");
    redis.cli(&["HDEL", "redq:{live}:settings", "kind"]);
    assert_eq!(
        kind_of(&mut admin, "live").await,
        (pb::TopicKind::Ephemeral, String::new())
    );
    assert_eq!(
        redis.cli(&["HGET", "redq:{live}:settings", "kind"]).trim(),
        "ephemeral"
    );
}

#[tokio::test]
async fn calls_that_make_no_sense_for_a_kind_are_refused_naming_it() {
    let (_redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    create(&mut admin, "live", settings(pb::TopicKind::Ephemeral, ""))
        .await
        .expect("EPHEMERAL");
    create(
        &mut admin,
        "jobs",
        settings(pb::TopicKind::List, "queue:jobs"),
    )
    .await
    .expect("LIST");
    let ack_id = "1-0/1/c-1/00000000".to_string();
    let refused = |result: Result<(), tonic::Status>, field: &str, kind: &str| {
        let status = result.expect_err("refused");
        assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
        assert!(status.message().contains(field), "{status:?}");
        assert!(status.message().contains(kind), "{status:?}");
    };
    let ack = client
        .ack(pb::AckRequest {
            topic: "live".into(),
            subscription: "s".into(),
            ack_ids: vec![ack_id.clone()],
        })
        .await;
    refused(ack.map(drop), "ack_ids", "EPHEMERAL");
    let nack = client
        .nack(pb::NackRequest {
            topic: "live".into(),
            subscription: "s".into(),
            ack_ids: vec![ack_id.clone()],
            delay: None,
        })
        .await;
    refused(nack.map(drop), "ack_ids", "EPHEMERAL");
    let dead_letters = admin
        .list_dead_letters(pb::ListDeadLettersRequest {
            topic: "live".into(),
            subscription: "s".into(),
            ..Default::default()
        })
        .await;
    refused(dead_letters.map(drop), "topic", "EPHEMERAL");
    for topic in ["live", "jobs"] {
        let seek = admin
            .seek(pb::SeekRequest {
                topic: topic.into(),
                subscription: "s".into(),
                time: Some(prost_types::Timestamp::default()),
                message_id: String::new(),
            })
            .await;
        let kind = if topic == "live" { "EPHEMERAL" } else { "LIST" };
        refused(seek.map(drop), "Seek", kind);
        let ordered = pb::SubscribeRequest {
            enable_message_ordering: true,
            ..Sub::default().request(topic, "s")
        };
        let ordered = client.subscribe(ordered).await;
        refused(ordered.map(drop), "enable_message_ordering", kind);
    }
}

#[tokio::test]
async fn a_pattern_is_checked_and_excludes_a_topic() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let both = pb::SubscribeRequest {
        pattern: "sensors.>".into(),
        ..Sub::default().request("sensors.a", "s")
    };
    assert_status(
        client.subscribe(both).await.map(drop),
        Code::InvalidArgument,
        "pattern",
    );
    let invalid = pb::SubscribeRequest {
        pattern: "sensors..x".into(),
        ..Sub::default().request("", "s")
    };
    assert_status(
        client.subscribe(invalid).await.map(drop),
        Code::InvalidArgument,
        "pattern",
    );
    let neither = Sub::default().request("", "s");
    assert_status(
        client.subscribe(neither).await.map(drop),
        Code::InvalidArgument,
        "topic",
    );
}
