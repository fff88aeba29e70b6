//! AdminService through gRPC: topics, subscriptions, stats, dead letters,
//! seek, retention and the memory guard.

mod common;

use common::*;
use redq::pb;
use std::time::{Duration, SystemTime};
use tonic::Code;

const LONG: Duration = Duration::from_secs(60);

fn topic_request(name: &str, settings: pb::TopicSettings) -> pb::CreateTopicRequest {
    pb::CreateTopicRequest {
        name: name.into(),
        settings: Some(settings),
    }
}

/// Creates a topic that keeps messages for `max_age` (within what
/// subscriptions still need).
async fn create_topic_with_retention(admin: &mut Admin, name: &str, max_age: Duration) {
    let settings = pb::TopicSettings {
        retention_max_age: Some(pb_duration(max_age)),
        ..Default::default()
    };
    admin
        .create_topic(topic_request(name, settings))
        .await
        .unwrap_or_else(|s| panic!("CreateTopic {name}: {s:?}"));
}

async fn get_topic(admin: &mut Admin, name: &str) -> Result<pb::Topic, tonic::Status> {
    admin
        .get_topic(pb::GetTopicRequest { name: name.into() })
        .await
        .map(|r| r.into_inner())
}

async fn get_subscription(
    admin: &mut Admin,
    topic: &str,
    name: &str,
) -> Result<pb::Subscription, tonic::Status> {
    admin
        .get_subscription(pb::GetSubscriptionRequest {
            topic: topic.into(),
            name: name.into(),
        })
        .await
        .map(|r| r.into_inner())
}

async fn topic_stats(admin: &mut Admin, name: &str) -> pb::TopicStats {
    get_topic(admin, name)
        .await
        .unwrap_or_else(|s| panic!("GetTopic {name}: {s:?}"))
        .stats
        .expect("GetTopic has stats")
}

async fn subscription_stats(admin: &mut Admin, topic: &str, name: &str) -> pb::SubscriptionStats {
    get_subscription(admin, topic, name)
        .await
        .unwrap_or_else(|s| panic!("GetSubscription {topic}/{name}: {s:?}"))
        .stats
        .expect("GetSubscription has stats")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_read_listed_updated_and_deleted() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut admin = server.admin().await;
    let mut client = server.client().await;

    let settings = pb::TopicSettings {
        retention_max_age: Some(pb_duration(Duration::from_secs(3600))),
        hard_max_length: Some(1000),
        ..Default::default()
    };
    let created = admin
        .create_topic(topic_request("orders", settings.clone()))
        .await
        .expect("CreateTopic")
        .into_inner();
    assert_eq!(created.name, "orders");
    // Created without a kind: a STREAM topic, and it says so.
    let stream = pb::TopicSettings {
        kind: pb::TopicKind::Stream.into(),
        ..settings.clone()
    };
    assert_eq!(created.settings.as_ref(), Some(&stream));
    let again = admin.create_topic(topic_request("orders", settings)).await;
    assert_eq!(again.unwrap_err().code(), Code::AlreadyExists);

    // Publishing to an unknown topic creates it with defaults.
    publish(&mut client, "implicit", ["x"]).await;
    for name in ["a1", "a2", "a3"] {
        admin
            .create_topic(topic_request(name, Default::default()))
            .await
            .expect("CreateTopic");
    }
    let mut names = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = admin
            .list_topics(pb::ListTopicsRequest {
                page_size: 2,
                page_token: token.clone(),
            })
            .await
            .expect("ListTopics")
            .into_inner();
        pages += 1;
        assert!(page.topics.len() <= 2);
        names.extend(page.topics.into_iter().map(|t| t.name));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(names, ["a1", "a2", "a3", "implicit", "orders"]);
    assert_eq!(pages, 3);

    let updated = admin
        .update_topic(pb::UpdateTopicRequest {
            name: "orders".into(),
            settings: Some(pb::TopicSettings {
                retention_max_length: Some(50),
                ..Default::default()
            }),
        })
        .await
        .expect("UpdateTopic")
        .into_inner();
    let updated = updated.settings.expect("settings");
    assert_eq!(updated.retention_max_length, Some(50));
    assert_eq!(
        updated.hard_max_length,
        Some(1000),
        "settings left out are kept"
    );

    admin
        .delete_topic(pb::DeleteTopicRequest {
            name: "orders".into(),
        })
        .await
        .expect("DeleteTopic");
    assert_eq!(
        get_topic(&mut admin, "orders").await.unwrap_err().code(),
        Code::NotFound
    );
    let missing = admin
        .delete_topic(pb::DeleteTopicRequest {
            name: "orders".into(),
        })
        .await;
    assert_eq!(missing.unwrap_err().code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_created_read_listed_updated_and_deleted() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut admin = server.admin().await;
    let mut client = server.client().await;

    let settings = pb::SubscriptionSettings {
        ack_deadline: Some(pb_duration(Duration::from_millis(500))),
        retry_policy: Some(pb::RetryPolicy {
            minimum_backoff: Some(pb_duration(Duration::ZERO)),
            maximum_backoff: Some(pb_duration(Duration::from_secs(1))),
        }),
        max_delivery_attempts: Some(4),
        dead_lettering: Some(true),
        start: pb::StartPosition::Earliest.into(),
        message_ordering: Some(false),
        max_blocked: None,
        filter: String::new(),
        max_deliveries_per_second: None,
        burst: None,
        max_outstanding: Some(7),
    };
    let created = admin
        .create_subscription(pb::CreateSubscriptionRequest {
            topic: "t".into(),
            name: "s".into(),
            settings: Some(settings.clone()),
        })
        .await
        .expect("CreateSubscription")
        .into_inner();
    let stored = created.settings.expect("settings");
    assert_eq!(stored.ack_deadline, settings.ack_deadline);
    assert_eq!(stored.max_delivery_attempts, Some(4));
    assert_eq!(
        (stored.max_outstanding, stored.max_deliveries_per_second),
        (Some(7), Some(0.0)),
        "a limit left out is none"
    );
    let again = admin
        .create_subscription(pb::CreateSubscriptionRequest {
            topic: "t".into(),
            name: "s".into(),
            settings: None,
        })
        .await;
    assert_eq!(again.unwrap_err().code(), Code::AlreadyExists);

    // Subscribe uses the stored ack deadline (500 ms) when the stream sets none.
    let id = publish(&mut client, "t", ["m"]).await.remove(0);
    let before = std::time::Instant::now();
    let mut stream = subscribe(&mut client, "t", "s", Sub::default()).await;
    let first = expect_messages(&mut stream, 1).await;
    assert_eq!(id_of(&first[0]), id);
    let again = expect_messages(&mut stream, 1).await;
    assert_eq!(
        again[0].delivery_attempt, 2,
        "redelivered after the stored deadline"
    );
    assert!(before.elapsed() >= Duration::from_millis(500));
    drop(stream);

    let updated = admin
        .update_subscription(pb::UpdateSubscriptionRequest {
            topic: "t".into(),
            name: "s".into(),
            settings: Some(pb::SubscriptionSettings {
                max_delivery_attempts: Some(9),
                dead_lettering: Some(false),
                ..Default::default()
            }),
        })
        .await
        .expect("UpdateSubscription")
        .into_inner()
        .settings
        .expect("settings");
    assert_eq!(updated.max_delivery_attempts, Some(9));
    assert_eq!(updated.dead_lettering, Some(false));
    assert_eq!(updated.max_outstanding, Some(7), "left out: kept");
    assert_eq!(
        updated.ack_deadline, settings.ack_deadline,
        "left out: kept"
    );

    let listed = admin
        .list_subscriptions(pb::ListSubscriptionsRequest { topic: "t".into() })
        .await
        .expect("ListSubscriptions")
        .into_inner();
    assert_eq!(
        listed
            .subscriptions
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["s"]
    );

    admin
        .delete_subscription(pb::DeleteSubscriptionRequest {
            topic: "t".into(),
            name: "s".into(),
        })
        .await
        .expect("DeleteSubscription");
    assert_eq!(
        get_subscription(&mut admin, "t", "s")
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_agree_with_what_was_published_acked_and_dead_lettered() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut admin = server.admin().await;
    let mut client = server.client().await;

    let ids = publish(&mut client, "t", payloads("m", 10)).await;
    for i in 0..3 {
        schedule(
            &mut client,
            "t",
            message(format!("later-{i}")),
            Due::After(Duration::from_secs(3600)),
        )
        .await;
    }
    let mut stream = subscribe(
        &mut client,
        "t",
        "s",
        Sub::deadline(LONG).max_outstanding(10).max_attempts(1),
    )
    .await;
    let got = expect_messages(&mut stream, 10).await;
    assert_eq!(ids_of(&got).len(), ids.len());
    ack(&mut client, "t", "s", ack_ids_of(&got[..4]))
        .await
        .expect("ack");
    nack(&mut client, "t", "s", ack_ids_of(&got[4..6]))
        .await
        .expect("nack");

    let topic = topic_stats(&mut admin, "t").await;
    assert_eq!(topic.stream_length, 10);
    assert_eq!(topic.scheduled_count, 3);
    assert_eq!(topic.published_count, 13);
    assert!(topic.next_due.is_some());

    let sub = subscription_stats(&mut admin, "t", "s").await;
    assert_eq!(sub.pending, 4, "10 delivered, 4 acked, 2 dead-lettered");
    assert_eq!(sub.lag, 0);
    assert_eq!(sub.acked_count, 4);
    assert_eq!(sub.dead_letters, 2);
    assert!(sub.oldest_unacked_age.is_some());
    let holding: Vec<_> = sub.consumers.iter().filter(|c| c.pending > 0).collect();
    assert_eq!(holding.len(), 1);
    assert_eq!(holding[0].pending, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_redriven_to_their_subscription_only_and_purged() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut admin = server.admin().await;
    let mut client = server.client().await;

    let mut stream = subscribe(&mut client, "t", "s", Sub::deadline(LONG).max_attempts(1)).await;
    let mut other = subscribe(&mut client, "t", "other", Sub::deadline(LONG)).await;
    let ids = publish(&mut client, "t", payloads("m", 3)).await;
    let got = expect_messages(&mut stream, 3).await;
    let others = expect_messages(&mut other, 3).await;
    ack(&mut client, "t", "other", ack_ids_of(&others))
        .await
        .expect("ack");
    nack(&mut client, "t", "s", ack_ids_of(&got))
        .await
        .expect("nack");
    let dead = wait_dead_letters(&mut admin, "t", "s", 3).await;

    let redriven = admin
        .redrive_dead_letters(pb::RedriveDeadLettersRequest {
            topic: "t".into(),
            subscription: "s".into(),
            dead_letter_ids: vec![dead[0].dead_letter_id.clone()],
            max_per_second: 0,
        })
        .await
        .expect("RedriveDeadLetters")
        .into_inner();
    assert_eq!(redriven.redriven, 1);
    let back = expect_messages(&mut stream, 1).await;
    assert_eq!(
        id_of(&back[0]),
        dead[0].message.as_ref().expect("message").id
    );
    assert!(ids.contains(&id_of(&back[0])));
    assert_eq!(back[0].delivery_attempt, 1, "fresh attempts");
    assert_no_message_within(&mut other, Duration::from_secs(1)).await;

    let purged = admin
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            topic: "t".into(),
            subscription: "s".into(),
            dead_letter_ids: vec![],
        })
        .await
        .expect("PurgeDeadLetters")
        .into_inner();
    assert_eq!(purged.purged, 2);
    assert!(all_dead_letters(&mut admin, "t", "s").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_replays_from_a_time_or_a_message() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &["--trim-interval", "100ms"]).await;
    let mut admin = server.admin().await;
    let mut client = server.client().await;

    // Replaying acked messages needs a retention that keeps them.
    create_topic_with_retention(&mut admin, "t", Duration::from_secs(3600)).await;
    let start = SystemTime::now() - Duration::from_secs(1);
    let ids = publish(&mut client, "t", payloads("m", 5)).await;
    let mut stream = subscribe(&mut client, "t", "s", Sub::deadline(LONG)).await;
    let got = expect_messages(&mut stream, 5).await;
    ack(&mut client, "t", "s", ack_ids_of(&got))
        .await
        .expect("ack");

    admin
        .seek(pb::SeekRequest {
            topic: "t".into(),
            subscription: "s".into(),
            message_id: ids[2].clone(),
            time: None,
        })
        .await
        .expect("Seek to a message");
    let replayed = expect_messages(&mut stream, 3).await;
    assert_eq!(ids_of(&replayed), ids[2..]);
    ack(&mut client, "t", "s", ack_ids_of(&replayed))
        .await
        .expect("ack");

    admin
        .seek(pb::SeekRequest {
            topic: "t".into(),
            subscription: "s".into(),
            message_id: String::new(),
            time: Some(pb_timestamp(start)),
        })
        .await
        .expect("Seek to a time");
    let replayed = expect_messages(&mut stream, 5).await;
    assert_eq!(ids_of(&replayed), ids);

    let both = admin
        .seek(pb::SeekRequest {
            topic: "t".into(),
            subscription: "s".into(),
            message_id: ids[0].clone(),
            time: Some(pb_timestamp(start)),
        })
        .await;
    assert_status(both, Code::InvalidArgument, "time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trimming_never_removes_what_a_slow_subscription_still_needs() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &["--trim-interval", "200ms"]).await;
    let mut admin = server.admin().await;
    let mut client = server.client().await;
    // A retention of 1 ms: only what a subscription needs keeps an entry.
    create_topic_with_retention(&mut admin, "t", Duration::from_millis(1)).await;

    // Both subscriptions exist before the messages; only the fast one reads.
    let mut fast = subscribe(&mut client, "t", "fast", Sub::deadline(LONG)).await;
    let mut slow = subscribe(
        &mut client,
        "t",
        "slow",
        Sub::deadline(LONG).max_outstanding(5),
    )
    .await;
    let ids = publish(&mut client, "t", payloads("m", 20)).await;
    let got = expect_messages(&mut fast, 20).await;
    ack(&mut client, "t", "fast", ack_ids_of(&got))
        .await
        .expect("ack");
    // The slow one holds 5 unacked and has 15 undelivered.
    let held = expect_messages(&mut slow, 5).await;

    // Many trim passes later, nothing the slow one needs is gone.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(topic_stats(&mut admin, "t").await.stream_length, 20);

    // Acking the first two lets retention trim exactly those.
    ack(&mut client, "t", "slow", ack_ids_of(&held[..2]))
        .await
        .expect("ack");
    eventually("trim of the acked head", || {
        let mut admin = admin.clone();
        async move { topic_stats(&mut admin, "t").await.stream_length == 18 }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(topic_stats(&mut admin, "t").await.stream_length, 18);

    // Everything the slow one still reads arrives, five at a time.
    ack(&mut client, "t", "slow", ack_ids_of(&held[2..]))
        .await
        .expect("ack");
    let mut seen = ids_of(&held);
    while seen.len() < ids.len() {
        let more = expect_messages(&mut slow, 1).await;
        seen.extend(ids_of(&more));
        ack(&mut client, "t", "slow", ack_ids_of(&more))
            .await
            .expect("ack");
    }
    assert_eq!(seen, ids);
    eventually("trim of everything acked", || {
        let mut admin = admin.clone();
        async move { topic_stats(&mut admin, "t").await.stream_length == 0 }
    })
    .await;
}

/// With `--default-retention 0`, what every subscription acked is trimmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_entries_do_not_pile_up() {
    let redis = RedisServer::start();
    let server = TestServer::start(
        &redis.url(),
        &["--trim-interval", "100ms", "--default-retention", "0s"],
    )
    .await;
    let admin = server.admin().await;
    let mut client = server.client().await;
    let mut stream = subscribe(&mut client, "t", "s", Sub::deadline(LONG)).await;
    publish(&mut client, "t", payloads("m", 10)).await;
    let got = expect_messages(&mut stream, 10).await;
    ack(&mut client, "t", "s", ack_ids_of(&got[..7]))
        .await
        .expect("ack");
    eventually("trim of the acked entries", || {
        let mut admin = admin.clone();
        async move { topic_stats(&mut admin, "t").await.stream_length == 3 }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_cap_drops_the_oldest_and_counts_them() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &["--trim-interval", "200ms"]).await;
    let mut admin = server.admin().await;
    let mut client = server.client().await;
    admin
        .create_topic(topic_request(
            "t",
            pb::TopicSettings {
                hard_max_length: Some(5),
                ..Default::default()
            },
        ))
        .await
        .expect("CreateTopic");
    let _unread = subscribe(
        &mut client,
        "t",
        "s",
        Sub::deadline(LONG).max_outstanding(1),
    )
    .await;
    publish(&mut client, "t", payloads("m", 12)).await;
    eventually("the hard cap", || {
        let mut admin = admin.clone();
        async move {
            let stats = topic_stats(&mut admin, "t").await;
            stats.stream_length == 5 && stats.dropped_count == 7
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_is_refused_before_redis_reaches_maxmemory() {
    let redis =
        RedisServer::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]);
    let server = TestServer::start(&redis.url(), &["--memory-limit-ratio", "0.6"]).await;
    let mut client = server.client().await;
    let payload = vec![b'x'; 64 * 1024];
    let mut refused = None;
    for _ in 0..200 {
        let result = client
            .publish(pb::PublishRequest {
                topic: "t".into(),
                messages: vec![message(payload.clone())],
                dedupe_id: String::new(),
            })
            .await;
        if let Err(status) = result {
            refused = Some(status);
            break;
        }
        // Slow enough for the guard, which reads Redis' memory every second,
        // to stop publishing well before maxmemory.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = refused.expect("publishing was refused before 200 × 64 KiB");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("memory"), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_limits_and_bad_admin_requests_are_rejected_naming_the_field() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut admin = server.admin().await;
    let mut client = server.client().await;

    let bad_name = admin
        .create_topic(topic_request("a b", Default::default()))
        .await;
    assert_status(bad_name, Code::InvalidArgument, "name");
    let too_big = admin
        .create_topic(topic_request(
            "t",
            pb::TopicSettings {
                max_payload_bytes: Some(u32::MAX),
                ..Default::default()
            },
        ))
        .await;
    assert_status(too_big, Code::InvalidArgument, "settings.max_payload_bytes");
    let page = admin
        .list_topics(pb::ListTopicsRequest {
            page_size: 5000,
            page_token: String::new(),
        })
        .await;
    assert_status(page, Code::InvalidArgument, "page_size");
    let unknown = get_subscription(&mut admin, "nope", "s").await;
    assert_eq!(unknown.unwrap_err().code(), Code::NotFound);

    // A topic's own payload limit applies to Publish.
    admin
        .create_topic(topic_request(
            "small",
            pb::TopicSettings {
                max_payload_bytes: Some(4),
                ..Default::default()
            },
        ))
        .await
        .expect("CreateTopic");
    let result = client
        .publish(pb::PublishRequest {
            topic: "small".into(),
            messages: vec![message("fits"), message("too long")],
            dedupe_id: String::new(),
        })
        .await;
    assert_status(result, Code::InvalidArgument, "messages[1].payload");
}

#[tokio::test]
async fn a_subscription_filter_delivers_matching_messages_and_is_fixed_at_creation() {
    let (_redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    let create = |filter: &str| pb::CreateSubscriptionRequest {
        topic: "orders".into(),
        name: "paid".into(),
        settings: Some(pb::SubscriptionSettings {
            filter: filter.into(),
            ..Default::default()
        }),
    };
    let malformed = admin
        .create_subscription(create("attributes.state = paid"))
        .await;
    assert_status(malformed, Code::InvalidArgument, "settings.filter");
    admin
        .create_subscription(create(r#"hasPrefix(attributes.state, "paid")"#))
        .await
        .expect("a valid filter");
    let change = admin
        .update_subscription(pb::UpdateSubscriptionRequest {
            topic: "orders".into(),
            name: "paid".into(),
            settings: Some(pb::SubscriptionSettings {
                filter: "attributes:state".into(),
                ..Default::default()
            }),
        })
        .await;
    assert_status(change, Code::InvalidArgument, "settings.filter");

    let with_state = |payload: &str, state: Option<&str>| pb::PublishMessage {
        attributes: state
            .map(|s| [("state".to_owned(), s.to_owned())].into())
            .unwrap_or_default(),
        ..message(payload.as_bytes().to_vec())
    };
    client
        .publish(pb::PublishRequest {
            topic: "orders".into(),
            messages: vec![
                with_state("a", Some("paid-card")),
                with_state("b", Some("open")),
                with_state("c", None),
                with_state("d", Some("paid")),
            ],
            ..Default::default()
        })
        .await
        .unwrap();
    let mut stream = subscribe(&mut client, "orders", "paid", Sub::default()).await;
    let got = expect_messages(&mut stream, 2).await;
    let mut payloads: Vec<_> = payloads_of(&got);
    payloads.sort();
    assert_eq!(payloads, ["a", "d"]);
    assert_no_message_within(&mut stream, Duration::from_millis(500)).await;
}
