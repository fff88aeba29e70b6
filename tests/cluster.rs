//! redq on a real Redis Cluster (3 masters, 3 replicas): the delivery,
//! scheduling, retry, dead-letter and admin paths on topics of every master,
//! and a manual failover of every shard in turn under a publish + consume load.

#![allow(clippy::needless_update)]
// The tests run on two runtime threads: the harness waits for the cluster by
// polling it (blocking), and the load must go on meanwhile.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::cli::redq;
use common::cluster::{RedisCluster, cli};
use common::load::Load;
use common::sockets::assert_nagle_is_off;
use common::*;
use futures::StreamExt;
use redq::pb;
use tonic::Code;

/// One topic name whose keys live on each master.
fn topic_per_master(cluster: &RedisCluster) -> Vec<String> {
    let mut by_master: HashMap<u16, String> = HashMap::new();
    for i in 0.. {
        let topic = format!("topic-{i}");
        let port = cluster.master_of(&format!("redq:{{{topic}}}:stream"));
        by_master.entry(port).or_insert(topic);
        if by_master.len() == 3 {
            break;
        }
    }
    by_master.into_values().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_feature_works_on_topics_of_every_master() {
    let cluster = RedisCluster::start();
    let server = TestServer::start(&cluster.url(), &["--retry-min-backoff", "100ms"]).await;
    server.wait_serving().await;
    let mut client = server.client().await;
    let mut admin = server.admin().await;
    for topic in topic_per_master(&cluster) {
        let topic = topic.as_str();
        let sub = Sub::deadline(Duration::from_secs(2))
            .retry(Duration::from_millis(100), Duration::from_millis(200))
            .max_attempts(2);
        let mut stream = subscribe(&mut client, topic, "s", sub).await;
        let ids = publish(&mut client, topic, ["a", "b"]).await;
        let first = publish_messages(&mut client, topic, vec![deduped_message("c", "d")]).await;
        let again = publish_messages(&mut client, topic, vec![deduped_message("c", "d")]).await;
        assert_eq!(again.duplicates, [true], "{topic}: dedupe");
        assert_eq!(again.message_ids, first.message_ids);
        let scheduled = schedule(&mut client, topic, message("later"), Due::in_ms(500)).await;

        let got = expect_messages(&mut stream, 4).await;
        let by_payload = |p: &str| {
            got.iter()
                .find(|m| m.message.as_ref().unwrap().payload == p)
                .cloned()
                .unwrap()
        };
        assert_eq!(id_of(&by_payload("a")), ids[0]);
        assert_eq!(id_of(&by_payload("later")), scheduled.message_id);
        ack(
            &mut client,
            topic,
            "s",
            vec![
                by_payload("a").ack_id,
                by_payload("c").ack_id,
                by_payload("later").ack_id,
            ],
        )
        .await
        .unwrap();
        // b: nacked twice, then it is a dead letter.
        nack(&mut client, topic, "s", vec![by_payload("b").ack_id])
            .await
            .unwrap();
        let retry = expect_messages(&mut stream, 1).await.remove(0);
        assert_eq!((id_of(&retry), retry.delivery_attempt), (ids[1].clone(), 2));
        nack(&mut client, topic, "s", vec![retry.ack_id])
            .await
            .unwrap();
        let dead = wait_dead_letters(&mut admin, topic, "s", 1).await;
        assert_eq!(dead[0].message.as_ref().unwrap().id, ids[1]);
        let redriven = admin
            .redrive_dead_letters(pb::RedriveDeadLettersRequest {
                topic: topic.into(),
                subscription: "s".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .redriven;
        assert_eq!(redriven, 1);
        let back = expect_messages(&mut stream, 1).await.remove(0);
        assert_eq!(back.message.as_ref().unwrap().payload, "b");
        ack(&mut client, topic, "s", vec![back.ack_id])
            .await
            .unwrap();

        let stats = admin
            .get_topic(pb::GetTopicRequest { name: topic.into() })
            .await
            .unwrap()
            .into_inner()
            .stats
            .unwrap();
        assert_eq!(stats.published_count, 4, "{topic}: {stats:?}");
        // Streaming publish on the same topic.
        let subscription = admin
            .get_subscription(pb::GetSubscriptionRequest {
                topic: topic.into(),
                name: "s".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(subscription.stats.unwrap().pending, 0, "{topic}");
        let deleted = admin
            .delete_topic(pb::DeleteTopicRequest { name: topic.into() })
            .await;
        assert!(deleted.is_ok(), "{topic}: {deleted:?}");
        let gone = admin
            .get_topic(pb::GetTopicRequest { name: topic.into() })
            .await;
        assert_eq!(gone.unwrap_err().code(), Code::NotFound);
    }
    // A LIST topic's list and redq's keys for it would be in different
    // slots: the kind is refused on a cluster, naming it.
    let list = admin
        .create_topic(pb::CreateTopicRequest {
            name: "jobs".into(),
            settings: Some(pb::TopicSettings {
                kind: pb::TopicKind::List.into(),
                list_key: "queue:jobs".into(),
                ..Default::default()
            }),
        })
        .await;
    assert_status(list, Code::FailedPrecondition, "settings.kind");
    // The keys of every script map to one slot: the scripts ran on a
    // cluster without CROSSSLOT errors, and the server logged none.
    assert!(!server.log().contains("CROSSSLOT"), "{}", server.log());
    let ports: Vec<u16> = cluster.nodes.iter().map(|node| node.port).collect();
    assert_nagle_is_off(&server, &ports);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_of_every_shard_under_load_loses_nothing() {
    let cluster = RedisCluster::start();
    let server = TestServer::start(&cluster.url(), &[]).await;
    server.wait_serving().await;
    let load = Load::start(&server, &topic_per_master(&cluster)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (master, _) in cluster.masters() {
        let replica = cluster.replicas_of(master)[0];
        cluster.wait_replicas_synced();
        let answer = cli(replica, &["CLUSTER", "FAILOVER"]);
        assert!(
            answer.contains("OK"),
            "CLUSTER FAILOVER on {replica}: {answer}"
        );
        cluster.wait_master(replica);
        cluster.wait_ok();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (published, failed, lost, duplicates) = load.finish().await;
    println!(
        "cluster manual failover of 3 shards: {published} publishes acknowledged, {failed} failed \
         (retryable), {lost} lost, {duplicates} deliveries beyond the first"
    );
    assert_eq!(lost, 0, "acknowledged publishes lost in a manual failover");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_master_under_load_reports_what_was_lost() {
    let mut cluster = RedisCluster::start();
    let server = TestServer::start(&cluster.url(), &[]).await;
    server.wait_serving().await;
    let topics = topic_per_master(&cluster);
    let load = Load::start(&server, &topics).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let victim = cluster.master_of(&format!("redq:{{{}}}:stream", topics[0]));
    cluster.kill9_master(victim);
    cluster.wait_ok();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (published, failed, lost, duplicates) = load.finish().await;
    // Without --durability replicated an acknowledged write can die with its
    // master before it reached the replica: this documents how many.
    println!(
        "cluster kill -9 of a master (default durability): {published} publishes acknowledged, \
         {failed} failed (retryable), {lost} lost, {duplicates} deliveries beyond the first"
    );
    assert!(published > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_master_with_replicated_durability_loses_nothing_acknowledged() {
    let mut cluster = RedisCluster::start();
    let server = TestServer::start(
        &cluster.url(),
        &["--durability", "replicated", "--replica-wait-timeout", "1s"],
    )
    .await;
    server.wait_serving().await;
    let topics = topic_per_master(&cluster);
    let load = Load::start(&server, &topics).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let victim = cluster.master_of(&format!("redq:{{{}}}:stream", topics[0]));
    let (victim_index, _) = cluster.kill9_master(victim);
    // The old master comes back as the new one's replica, so that writes
    // can be confirmed by a replica again.
    cluster.launch(victim_index);
    cluster.wait_ok();
    cluster.wait_replicas_synced();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (published, failed, lost, duplicates) = load.finish().await;
    println!(
        "cluster kill -9 of a master (--durability replicated): {published} publishes acknowledged, \
         {failed} failed (UNAVAILABLE: not confirmed by a replica, retryable), {lost} lost, \
         {duplicates} deliveries beyond the first"
    );
    assert!(published > 0);
    assert_eq!(
        lost, 0,
        "acknowledged publishes lost under --durability replicated"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_is_down_fails_its_topics_only_and_lists_still_list() {
    let mut cluster = RedisCluster::start();
    let server = TestServer::start(&cluster.url(), &[]).await;
    server.wait_serving().await;
    let mut client = server.client().await;
    let mut admin = server.admin().await;
    let registry = cluster.master_of("redq:topics");
    let topics = topic_per_master(&cluster);
    let (down, up): (Vec<String>, Vec<String>) = {
        let mut down = Vec::new();
        let mut up = Vec::new();
        for topic in topics {
            let master = cluster.master_of(&format!("redq:{{{topic}}}:stream"));
            if master != registry && down.is_empty() {
                down.push(topic);
            } else {
                up.push(topic);
            }
        }
        (down, up)
    };
    let dead = &down[0];
    let five_minutes = pb_duration(Duration::from_secs(300));
    for topic in down.iter().chain(&up) {
        publish(&mut client, topic, ["before"]).await;
        let settings = pb::TopicSettings {
            dedupe_window: Some(five_minutes),
            ..Default::default()
        };
        admin
            .update_topic(pb::UpdateTopicRequest {
                name: topic.clone(),
                settings: Some(settings),
            })
            .await
            .unwrap_or_else(|s| panic!("update {topic}: {s:?}"));
    }
    // Handles on the dead shard's topic, taken while it is up: an ack id
    // and a scheduled message's id.
    let mut stream = subscribe(&mut client, dead, "sub", Sub::default()).await;
    let ack_id = ack_ids_of(&expect_messages(&mut stream, 1).await)[0].clone();
    drop(stream);
    let scheduled_id = schedule(&mut client, dead, message("later"), Due::in_ms(3_600_000))
        .await
        .message_id;
    for topic in &up {
        let mut stream = subscribe(&mut client, topic, "sub", Sub::default()).await;
        expect_messages(&mut stream, 1).await;
    }

    // The whole shard goes: its master and its replica.
    let master = cluster.master_of(&format!("redq:{{{dead}}}:stream"));
    let replica = cluster.replicas_of(master)[0];
    cluster.kill9(cluster.index_of(replica));
    cluster.kill9(cluster.index_of(master));
    let answer = try_publish_messages(&mut client, dead, vec![message("lost shard")]).await;
    assert_eq!(answer.unwrap_err().code(), Code::Unavailable);
    for topic in &up {
        try_publish_messages(&mut client, topic, vec![message("still served")])
            .await
            .unwrap_or_else(|s| panic!("{topic} on a healthy shard: {s:?}"));
    }
    assert_eq!(
        server.health_status("").await.unwrap(),
        tonic_health::pb::health_check_response::ServingStatus::Serving,
        "the registry's shard is up: the server keeps serving"
    );

    // ListTopics lists every topic: the live ones with their settings and
    // subscriptions, the dead shard's by name, marked unavailable.
    let listed = admin
        .list_topics(pb::ListTopicsRequest::default())
        .await
        .expect("ListTopics with one shard down")
        .into_inner()
        .topics;
    let mut names: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    let mut all: Vec<&str> = down.iter().chain(&up).map(String::as_str).collect();
    all.sort_unstable();
    assert_eq!(names, all);
    for topic in &listed {
        if topic.name == *dead {
            assert!(topic.unavailable, "{topic:?}");
            assert!(topic.subscriptions.is_empty(), "{topic:?}");
        } else {
            assert!(!topic.unavailable, "{topic:?}");
            let settings = topic.settings.clone().expect("settings of a live topic");
            assert_eq!(settings.dedupe_window, Some(five_minutes), "{topic:?}");
            assert_eq!(topic.subscriptions, ["sub"], "{topic:?}");
        }
    }

    // The CLI says so; `stats` of a live topic works, of the dead one is
    // UNAVAILABLE on one line.
    let table = redq(&server, &["topics"], None).await.ok_lines();
    let row = |name: &str| {
        let row = table.iter().find(|l| l.starts_with(&format!("{name} ")));
        row.unwrap_or_else(|| panic!("no row for {name}: {table:?}"))
            .split_whitespace()
            .nth(2) // TOPIC KIND SUBSCRIPTIONS …
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(row(dead), "unavailable", "{table:?}");
    for topic in &up {
        assert_eq!(row(topic), "1", "{table:?}");
    }
    assert!(
        table
            .iter()
            .any(|l| l.starts_with("1 topic(s) unavailable")),
        "{table:?}"
    );
    let stats = redq(&server, &["stats", &up[0]], None).await.ok_lines();
    assert!(stats.iter().any(|l| l.starts_with("sub ")), "{stats:?}");
    let refused = redq(&server, &["stats", dead], None).await;
    let line = refused.one_line_error("");
    assert!(line.contains("unavailable"), "{line}");

    // No RPC answers INTERNAL, on the dead shard's topic or a live one.
    for (topic, ack_id, scheduled_id) in [
        (dead.as_str(), ack_id.as_str(), scheduled_id.as_str()),
        (up[0].as_str(), "1-0/1/c/0", "s0"),
    ] {
        let codes = codes_of_every_rpc(&server, topic, ack_id, scheduled_id).await;
        let internal: Vec<_> = codes.iter().filter(|(_, c)| *c == Code::Internal).collect();
        assert!(internal.is_empty(), "{topic}: {codes:?}\n{}", server.log());
        if topic == dead {
            for (rpc, code) in &codes {
                let expected = match *rpc {
                    // Answered by the registry, which is up.
                    "CreateTopic" => Code::AlreadyExists,
                    "ListTopics" => Code::Ok,
                    _ => Code::Unavailable,
                };
                assert_eq!(*code, expected, "{rpc} on {topic}: {codes:?}");
            }
        }
    }

    // The registry's own shard down: listing fails as a whole, UNAVAILABLE.
    let replica = cluster.replicas_of(registry)[0];
    cluster.kill9(cluster.index_of(replica));
    cluster.kill9(cluster.index_of(registry));
    let answer = admin.list_topics(pb::ListTopicsRequest::default()).await;
    assert_eq!(answer.unwrap_err().code(), Code::Unavailable);
}

/// Each RPC of both services, called once with valid input on `topic` (and
/// its subscription `sub`), and the code it answered (`Ok` for a stream that
/// opened and stayed quiet).
async fn codes_of_every_rpc(
    server: &TestServer,
    topic: &str,
    ack_id: &str,
    scheduled_id: &str,
) -> Vec<(&'static str, Code)> {
    fn code<T>(answer: Result<tonic::Response<T>, tonic::Status>) -> Code {
        answer.map_or_else(|s| s.code(), |_| Code::Ok)
    }
    /// The code of a response stream's first item (Ok when none came soon).
    async fn first_code<T>(
        answer: Result<tonic::Response<tonic::Streaming<T>>, tonic::Status>,
    ) -> Code {
        match answer {
            Err(status) => status.code(),
            Ok(response) => {
                let mut stream = response.into_inner();
                match tokio::time::timeout(Duration::from_secs(5), stream.message()).await {
                    Ok(Err(status)) => status.code(),
                    Ok(Ok(_)) | Err(_) => Code::Ok,
                }
            }
        }
    }
    let mut client = server.client().await;
    let mut admin = server.admin().await;
    let (t, s) = (topic.to_owned(), "sub".to_owned());
    let ids = vec![ack_id.to_owned()];
    let mut codes = Vec::new();
    let answer = client
        .publish(pb::PublishRequest {
            topic: t.clone(),
            messages: vec![message("x")],
            ..Default::default()
        })
        .await;
    codes.push(("Publish", code(answer)));
    let answer = client
        .schedule_delayed(pb::ScheduleDelayedRequest {
            topic: t.clone(),
            message: Some(message("x")),
            delay: Some(pb_duration(Duration::from_secs(3600))),
            ..Default::default()
        })
        .await;
    codes.push(("ScheduleDelayed", code(answer)));
    let answer = client
        .reschedule_delayed(pb::RescheduleDelayedRequest {
            topic: t.clone(),
            message_id: scheduled_id.to_owned(),
            delay: Some(pb_duration(Duration::from_secs(7200))),
            ..Default::default()
        })
        .await;
    codes.push(("RescheduleDelayed", code(answer)));
    let answer = client
        .cancel_scheduled(pb::CancelScheduledRequest {
            topic: t.clone(),
            message_id: scheduled_id.to_owned(),
        })
        .await;
    codes.push(("CancelScheduled", code(answer)));
    let answer = client.subscribe(Sub::default().request(topic, "sub")).await;
    codes.push(("Subscribe", first_code(answer).await));
    let first = pb::StreamingSubscribeRequest {
        subscribe: Some(Sub::default().request(topic, "sub")),
        ..Default::default()
    };
    let requests = futures::stream::iter([first]).chain(futures::stream::pending());
    let answer = client.streaming_subscribe(requests).await;
    codes.push(("StreamingSubscribe", first_code(answer).await));
    let request = pb::PublishStreamRequest {
        request_id: 1,
        topic: t.clone(),
        messages: vec![message("x")],
        ..Default::default()
    };
    let requests = futures::stream::iter([request]).chain(futures::stream::pending());
    let publish_stream = match client.publish_stream(requests).await {
        Err(status) => status.code(),
        Ok(response) => match response.into_inner().message().await {
            Err(status) => status.code(),
            Ok(Some(pb::PublishStreamResponse {
                status: Some(status),
                ..
            })) => Code::from(status.code),
            Ok(_) => Code::Ok,
        },
    };
    codes.push(("PublishStream", publish_stream));
    let answer = client
        .ack(pb::AckRequest {
            topic: t.clone(),
            subscription: s.clone(),
            ack_ids: ids.clone(),
        })
        .await;
    codes.push(("Ack", code(answer)));
    let answer = client
        .modify_ack_deadline(pb::ModifyAckDeadlineRequest {
            topic: t.clone(),
            subscription: s.clone(),
            ack_ids: ids.clone(),
            ack_deadline: Some(pb_duration(Duration::from_secs(60))),
        })
        .await;
    codes.push(("ModifyAckDeadline", code(answer)));
    let answer = client
        .nack(pb::NackRequest {
            topic: t.clone(),
            subscription: s.clone(),
            ack_ids: ids.clone(),
            ..Default::default()
        })
        .await;
    codes.push(("Nack", code(answer)));
    let answer = admin
        .create_topic(pb::CreateTopicRequest {
            name: t.clone(),
            settings: None,
        })
        .await;
    codes.push(("CreateTopic", code(answer)));
    let answer = admin
        .get_topic(pb::GetTopicRequest { name: t.clone() })
        .await;
    codes.push(("GetTopic", code(answer)));
    let answer = admin.list_topics(pb::ListTopicsRequest::default()).await;
    codes.push(("ListTopics", code(answer)));
    let answer = admin
        .update_topic(pb::UpdateTopicRequest {
            name: t.clone(),
            settings: Some(pb::TopicSettings::default()),
        })
        .await;
    codes.push(("UpdateTopic", code(answer)));
    let answer = admin
        .create_subscription(pb::CreateSubscriptionRequest {
            topic: t.clone(),
            name: "another".into(),
            settings: None,
        })
        .await;
    codes.push(("CreateSubscription", code(answer)));
    let answer = admin
        .get_subscription(pb::GetSubscriptionRequest {
            topic: t.clone(),
            name: s.clone(),
        })
        .await;
    codes.push(("GetSubscription", code(answer)));
    let answer = admin
        .list_subscriptions(pb::ListSubscriptionsRequest { topic: t.clone() })
        .await;
    codes.push(("ListSubscriptions", code(answer)));
    let answer = admin
        .update_subscription(pb::UpdateSubscriptionRequest {
            topic: t.clone(),
            name: s.clone(),
            settings: Some(pb::SubscriptionSettings {
                ack_deadline: Some(pb_duration(Duration::from_secs(45))),
                ..Default::default()
            }),
        })
        .await;
    codes.push(("UpdateSubscription", code(answer)));
    let answer = admin
        .list_dead_letters(pb::ListDeadLettersRequest {
            topic: t.clone(),
            subscription: s.clone(),
            ..Default::default()
        })
        .await;
    codes.push(("ListDeadLetters", code(answer)));
    let answer = admin
        .redrive_dead_letters(pb::RedriveDeadLettersRequest {
            topic: t.clone(),
            subscription: s.clone(),
            ..Default::default()
        })
        .await;
    codes.push(("RedriveDeadLetters", code(answer)));
    let answer = admin
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            topic: t.clone(),
            subscription: s.clone(),
            ..Default::default()
        })
        .await;
    codes.push(("PurgeDeadLetters", code(answer)));
    let answer = admin
        .seek(pb::SeekRequest {
            topic: t.clone(),
            subscription: s.clone(),
            time: Some(pb_timestamp(std::time::SystemTime::now())),
            ..Default::default()
        })
        .await;
    codes.push(("Seek", code(answer)));
    let answer = admin
        .delete_subscription(pb::DeleteSubscriptionRequest {
            topic: t.clone(),
            name: s.clone(),
        })
        .await;
    codes.push(("DeleteSubscription", code(answer)));
    let answer = admin.delete_topic(pb::DeleteTopicRequest { name: t }).await;
    codes.push(("DeleteTopic", code(answer)));
    codes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_from_one_replica_wakes_a_stream_on_another() {
    let cluster = RedisCluster::start();
    let a = TestServer::start(&cluster.url(), &[]).await;
    let b = TestServer::start(&cluster.url(), &[]).await;
    a.wait_serving().await;
    b.wait_serving().await;
    let (mut on_a, mut on_b) = (a.client().await, b.client().await);
    let topic = &topic_per_master(&cluster)[0];
    let mut stream = subscribe(
        &mut on_a,
        topic,
        "s",
        Sub::deadline(Duration::from_secs(60)),
    )
    .await;
    publish(&mut on_b, topic, ["m"]).await;
    let first = expect_messages(&mut stream, 1).await.remove(0);
    // Nacked through the other replica: its hint wakes the stream on this one,
    // which otherwise would look again only after its 5 s safety net.
    let nacked_at = std::time::Instant::now();
    nack_after(&mut on_b, topic, "s", vec![first.ack_id], Duration::ZERO)
        .await
        .unwrap();
    let again = next_messages(&mut stream, 1, Duration::from_secs(4)).await;
    assert_eq!(again.len(), 1, "no redelivery within 4 s of the nack");
    println!(
        "cluster hint: redelivered {:?} after a nack on the other replica",
        nacked_at.elapsed()
    );
}

/// The node id of the master on `port`.
fn node_id(port: u16) -> String {
    cli(port, &["CLUSTER", "MYID"]).trim().to_owned()
}

/// Moves `slots` slots from the master on `from` to the one on `to`, with
/// redis-cli (MIGRATE of every key, ASK redirections meanwhile).
async fn reshard(cluster: &RedisCluster, from: u16, to: u16, slots: usize) {
    cluster.wait_agreed();
    let (from_id, to_id) = (node_id(from), node_id(to));
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("redis-cli")
            .args(["--cluster", "reshard", &format!("127.0.0.1:{from}")])
            .args(["--cluster-from", &from_id, "--cluster-to", &to_id])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster reshard")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let tail: Vec<&str> = stdout.lines().rev().take(8).collect();
    assert!(
        out.status.success(),
        "reshard failed: {}\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resharding_a_master_away_and_back_under_load_loses_and_duplicates_nothing() {
    let cluster = RedisCluster::start();
    let server = TestServer::start(&cluster.url(), &[]).await;
    server.wait_serving().await;
    let mut client = server.client().await;
    let topics = topic_per_master(&cluster);
    let moved = &topics[0];
    let from = cluster.master_of(&format!("redq:{{{moved}}}:stream"));
    let to = cluster.another_master(from);
    let slots = cluster.slots_of(from);
    let original = publish_messages(&mut client, moved, vec![deduped_message("once", "d-1")]).await;
    let scheduled = schedule(&mut client, moved, message("due later"), Due::in_ms(4_000)).await;
    let load = Load::start(&server, &topics).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    reshard(&cluster, from, to, slots).await;
    assert_eq!(cluster.master_of(&format!("redq:{{{moved}}}:stream")), to);
    let again = publish_messages(&mut client, moved, vec![deduped_message("once", "d-1")]).await;
    assert_eq!(again.duplicates, [true], "dedupe after the move");
    assert_eq!(again.message_ids, original.message_ids);
    // Back: as many slots (redis-cli picks which; the topic's may stay).
    reshard(&cluster, to, from, slots).await;
    let back = cluster.slots_of(from);
    assert_eq!(back, slots, "the master has as many slots as before");

    // The scheduled message is promoted by whichever master owns it then.
    let deadline = std::time::Instant::now() + EVENTUALLY;
    while !load.was_delivered(&scheduled.message_id) {
        assert!(
            std::time::Instant::now() < deadline,
            "the scheduled message was not delivered after the reshard"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let duplicated_entries = load.duplicated_entries();
    let (published, failed, lost, duplicates) = load.finish().await;
    println!(
        "cluster reshard of {slots} slots away and back under load: {published} publishes acknowledged, \
         {failed} failed (retryable), {lost} lost, {duplicated_entries} stream entries written twice, \
         {duplicates} deliveries beyond the first"
    );
    assert_eq!(lost, 0, "publishes lost in a reshard");
    assert_eq!(
        duplicated_entries, 0,
        "stream entries written twice in a reshard"
    );
}

/// The topic's watchers move with its slot: after a reshard, a publish on
/// one replica still hints the stream on another at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_on_another_replica_are_hinted_after_their_topic_moved_to_another_master() {
    let cluster = RedisCluster::start();
    let a = TestServer::start(&cluster.url(), &[]).await;
    let b = TestServer::start(&cluster.url(), &[]).await;
    a.wait_serving().await;
    b.wait_serving().await;
    let mut publisher = a.client().await;
    let mut client_b = b.client().await;
    let topic = topic_per_master(&cluster).remove(0);
    let key = format!("redq:{{{topic}}}:stream");
    let mut stream = subscribe(&mut client_b, &topic, "s", Sub::default()).await;
    publish(&mut publisher, &topic, ["before"]).await;
    expect_messages(&mut stream, 1).await;
    let from = cluster.master_of(&key);
    let to = cluster.another_master(from);
    let slots = cluster.slots_of(from);
    reshard(&cluster, from, to, slots).await;
    assert_eq!(cluster.master_of(&key), to);
    // Idle again: the safety net is 5 s away.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let published = std::time::Instant::now();
    publish(&mut publisher, &topic, ["after"]).await;
    let got = next_messages(&mut stream, 1, Duration::from_secs(3)).await;
    assert_eq!(got.len(), 1, "no delivery after the topic moved");
    let took = published.elapsed();
    println!("cluster hint: delivered across replicas {took:?} after a publish to the moved topic");
    assert!(took < Duration::from_secs(2), "delivered after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_the_registry_lost_are_found_again_on_every_master() {
    let cluster = RedisCluster::start();
    let first = TestServer::start(&cluster.url(), &[]).await;
    first.wait_serving().await;
    let mut client = first.client().await;
    let topics = topic_per_master(&cluster);
    for topic in &topics {
        publish(&mut client, topic, ["kept"]).await;
    }
    // What a failover of the registry's master can do: the topics live on,
    // their registrations are gone.
    let registry = cluster.master_of("redq:topics");
    assert_eq!(cli(registry, &["DEL", "redq:topics"]).trim(), "1");
    let second = TestServer::start(&cluster.url(), &[]).await;
    second.wait_serving().await;
    let mut admin = second.admin().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut listed = admin
            .list_topics(pb::ListTopicsRequest {
                page_size: 100,
                page_token: String::new(),
            })
            .await
            .expect("ListTopics")
            .into_inner()
            .topics
            .into_iter()
            .map(|t| t.name)
            .collect::<Vec<_>>();
        listed.sort();
        let mut want = topics.clone();
        want.sort();
        if listed == want {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "registry not repaired: {listed:?}, want {want:?}\n{}",
            second.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        second.log().contains("registered topics missing"),
        "{}",
        second.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_a_failover_lost_comes_back_without_a_log_flood() {
    let cluster = RedisCluster::start();
    let server = TestServer::start(&cluster.url(), &[]).await;
    server.wait_serving().await;
    let mut client = server.client().await;
    let topic = &topic_per_master(&cluster)[0];
    let stream_key = format!("redq:{{{topic}}}:stream");
    let master = cluster.master_of(&stream_key);
    let sub = Sub::deadline(Duration::from_secs(60));
    let mut stream = subscribe(&mut client, topic, "s", sub.clone()).await;
    publish(&mut client, topic, ["one"]).await;
    let got = expect_messages(&mut stream, 1).await;
    // What a failover can lose (a write not yet replicated): the consumer
    // group. The subscription then does not exist, so an open stream ends
    // and acks are refused with NOT_FOUND, once each, not in a loop.
    cli(master, &["XGROUP", "DESTROY", &stream_key, "s"]);
    let acked = ack(&mut client, topic, "s", ack_ids_of(&got)).await;
    assert_eq!(acked.unwrap_err().code(), Code::NotFound);
    publish(&mut client, topic, ["two"]).await;
    let ended = tokio::time::timeout(Duration::from_secs(5), stream.message()).await;
    assert_eq!(
        ended.expect("the stream ends").unwrap_err().code(),
        Code::NotFound
    );
    // Subscribing again creates it from the earliest entry: nothing is lost,
    // what was acked in the lost state comes again.
    let mut again = subscribe(&mut client, topic, "s", sub.clone()).await;
    publish(&mut client, topic, ["three"]).await;
    let got = next_messages(&mut again, 3, EVENTUALLY).await;
    let payloads: Vec<_> = got
        .iter()
        .map(|m| m.message.as_ref().expect("a message").payload.clone())
        .collect();
    assert_eq!(payloads, ["one", "two", "three"]);
    // The whole topic lost: the same, and the background loops, which keep
    // sweeping the registered topic, stay quiet about it.
    cli(master, &["DEL", &stream_key]);
    // Nothing is published to wake the stream: it learns of the loss at the
    // next safety-net recheck (every 5 s), so allow that and then some.
    let ended = tokio::time::timeout(EVENTUALLY, again.message()).await;
    assert_eq!(
        ended.expect("the stream ends").unwrap_err().code(),
        Code::NotFound
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = server.log();
    let noisy: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("NOGROUP"))
        .collect();
    assert!(noisy.is_empty(), "{log}");
}
