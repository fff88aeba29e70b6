//! LIST topics: redq consumers on a Redis list that legacy producers
//! `LPUSH` to, and legacy consumers reading what redq publishes. Elements
//! leave the list only as consumers take them, are leased, redelivered,
//! dead-lettered and given back like stream entries, and an idle topic
//! waits on the list with a blocking move instead of polling it.

mod common;

use bytes::Bytes;
use common::*;
use redq::pb;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::Code;

const LIST: &str = "queue:jobs";

async fn create_list_topic(admin: &mut Admin, name: &str, list_key: &str) {
    admin
        .create_topic(pb::CreateTopicRequest {
            name: name.into(),
            settings: Some(pb::TopicSettings {
                kind: pb::TopicKind::List.into(),
                list_key: list_key.into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap_or_else(|s| panic!("CreateTopic {name} on {list_key}: {s:?}"));
}

/// `LPUSH key values…` the way a legacy producer does, with `redis-cli`.
fn legacy_lpush(redis: &RedisServer, key: &str, values: &[String]) {
    let mut args = vec!["LPUSH", key];
    args.extend(values.iter().map(String::as_str));
    redis.cli(&args);
}

/// A plain Redis connection, as a legacy consumer has.
fn legacy_connection(redis: &RedisServer) -> redis::Connection {
    redis::Client::open(redis.url())
        .expect("redis url")
        .get_connection()
        .expect("connect to redis")
}

fn list_length(redis: &RedisServer, key: &str) -> u64 {
    redis.cli(&["LLEN", key]).trim().parse().expect("LLEN")
}

/// The list from its LPUSH end to its RPOP end (the next to pop is last).
fn list_contents(redis: &RedisServer, key: &str) -> Vec<String> {
    let mut conn = legacy_connection(redis);
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .expect("LRANGE")
}

async fn subscription_stats(admin: &mut Admin, topic: &str, name: &str) -> pb::SubscriptionStats {
    admin
        .get_subscription(pb::GetSubscriptionRequest {
            topic: topic.into(),
            name: name.into(),
        })
        .await
        .expect("GetSubscription")
        .into_inner()
        .stats
        .expect("stats")
}

fn payload_text(m: &pb::ReceivedMessage) -> String {
    String::from_utf8(m.message.as_ref().expect("a message").payload.to_vec()).expect("utf-8")
}

/// Every element processed at least once across three replicas, with
/// random nacks and one replica killed while holding deliveries; the
/// redeliveries carry a higher attempt.
#[tokio::test]
async fn legacy_producers_and_three_replicas_with_nacks_and_a_kill_lose_nothing() {
    let redis = RedisServer::start();
    let a = TestServer::start(&redis.url(), &[]).await;
    let b = TestServer::start(&redis.url(), &[]).await;
    let mut c = TestServer::start(&redis.url(), &[]).await;
    let mut admin = a.admin().await;
    create_list_topic(&mut admin, "jobs", LIST).await;

    let opts = Sub::deadline(Duration::from_secs(2))
        .retry(Duration::from_millis(50), Duration::from_millis(200))
        .max_outstanding(8);
    // (payload, attempt) of every ack, and of every nack.
    let acked: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
    let nacked: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
    let mut consumers = Vec::new();
    for server in [&a, &b] {
        for n in 0..2 {
            let mut client = server.client().await;
            let mut stream = subscribe(&mut client, "jobs", "workers", opts.clone()).await;
            let (acked, nacked) = (acked.clone(), nacked.clone());
            consumers.push(tokio::spawn(async move {
                let mut coin = n as u64 + 7;
                while let Ok(Some(response)) = stream.message().await {
                    for m in response.messages {
                        let payload = payload_text(&m);
                        coin = coin
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        // A first attempt is nacked one time in five.
                        if m.delivery_attempt == 1 && (coin >> 33).is_multiple_of(5) {
                            nacked.lock().unwrap().push((payload, m.delivery_attempt));
                            nack(&mut client, "jobs", "workers", vec![m.ack_id])
                                .await
                                .unwrap();
                        } else {
                            acked.lock().unwrap().push((payload, m.delivery_attempt));
                            ack(&mut client, "jobs", "workers", vec![m.ack_id])
                                .await
                                .unwrap();
                        }
                    }
                }
            }));
        }
    }
    // Replica C's stream takes deliveries and never acks them.
    let mut c_client = c.client().await;
    let mut c_stream = subscribe(&mut c_client, "jobs", "workers", opts.clone()).await;

    let all: Vec<String> = (0..400).map(|i| format!("job-{i}")).collect();
    for chunk in all[..200].chunks(20) {
        legacy_lpush(&redis, LIST, chunk);
    }
    let held_by_c: Vec<String> = expect_messages(&mut c_stream, 1)
        .await
        .iter()
        .map(payload_text)
        .collect();
    c.kill9();
    for chunk in all[200..].chunks(20) {
        legacy_lpush(&redis, LIST, chunk);
    }

    let expected: HashSet<&String> = all.iter().collect();
    let deadline = tokio::time::Instant::now() + EVENTUALLY * 3;
    loop {
        let done: HashSet<String> = acked
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _)| p.clone())
            .collect();
        if expected.iter().all(|p| done.contains(*p)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} elements acked; list holds {}",
            done.len(),
            all.len(),
            list_length(&redis, LIST)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let acked = acked.lock().unwrap().clone();
    let nacked = nacked.lock().unwrap().clone();
    // Attempts are counted: what was nacked, and what the killed replica
    // held, came back with a higher attempt.
    let last_attempt: HashMap<&str, u32> = acked.iter().map(|(p, n)| (p.as_str(), *n)).collect();
    for (payload, attempt) in &nacked {
        assert!(
            last_attempt[payload.as_str()] > *attempt,
            "{payload} nacked at attempt {attempt}, acked at {}",
            last_attempt[payload.as_str()]
        );
    }
    for payload in &held_by_c {
        assert!(
            last_attempt[payload.as_str()] > 1,
            "{payload} held by the killed replica"
        );
    }
    assert!(!nacked.is_empty(), "some elements were nacked");
    assert_eq!(list_length(&redis, LIST), 0);
    let distinct: HashSet<&str> = acked.iter().map(|(p, _)| p.as_str()).collect();
    eprintln!(
        "{} elements: {} acked, {} acked twice, {} nacks, {} held by the killed replica, none lost",
        all.len(),
        distinct.len(),
        acked.len() - distinct.len(),
        nacked.len(),
        held_by_c.len()
    );
    for task in consumers {
        task.abort();
    }
}

#[tokio::test]
async fn a_legacy_brpop_consumer_reads_exactly_what_redq_published_oldest_first() {
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    create_list_topic(&mut admin, "jobs", LIST).await;
    let binary = Bytes::from_static(&[0, 0xff, b'\n', 0x80]);
    let ids = publish(
        &mut client,
        "jobs",
        [
            Bytes::from_static(b"first"),
            binary.clone(),
            Bytes::from_static(b"{\"job\":3}"),
        ],
    )
    .await;
    assert!(ids.iter().all(|id| id.starts_with('l')), "{ids:?}");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 3);
    let mut conn = legacy_connection(&redis);
    let mut popped = Vec::new();
    for _ in 0..3 {
        let (_, value): (String, Vec<u8>) = redis::cmd("BRPOP")
            .arg(LIST)
            .arg(5)
            .query(&mut conn)
            .expect("BRPOP");
        popped.push(Bytes::from(value));
    }
    assert_eq!(
        popped,
        [
            Bytes::from_static(b"first"),
            binary,
            Bytes::from_static(b"{\"job\":3}")
        ]
    );
}

#[tokio::test]
async fn elements_come_oldest_first_and_equal_ones_are_acked_independently() {
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    create_list_topic(&mut admin, "jobs", LIST).await;
    legacy_lpush(
        &redis,
        LIST,
        &["old".into(), "same".into(), "same".into(), "same".into()],
    );
    let mut stream = subscribe(&mut client, "jobs", "workers", Sub::default()).await;
    let got = expect_messages(&mut stream, 4).await;
    let texts: Vec<String> = got.iter().map(payload_text).collect();
    assert_eq!(texts, ["old", "same", "same", "same"]);
    let ids: HashSet<String> = ids_of(&got).into_iter().collect();
    assert_eq!(ids.len(), 4, "one entry per element: {ids:?}");
    assert_eq!(list_length(&redis, LIST), 0);

    ack(&mut client, "jobs", "workers", vec![got[1].ack_id.clone()])
        .await
        .unwrap();
    assert_eq!(
        subscription_stats(&mut admin, "jobs", "workers")
            .await
            .pending,
        3
    );
    nack(&mut client, "jobs", "workers", vec![got[2].ack_id.clone()])
        .await
        .unwrap();
    let again = expect_messages(&mut stream, 1).await;
    assert_eq!(payload_text(&again[0]), "same");
    assert_eq!(id_of(&again[0]), id_of(&got[2]));
    assert_eq!(again[0].delivery_attempt, 2);
    let rest = vec![
        got[0].ack_id.clone(),
        got[3].ack_id.clone(),
        again[0].ack_id.clone(),
    ];
    ack(&mut client, "jobs", "workers", rest).await.unwrap();
    let stats = subscription_stats(&mut admin, "jobs", "workers").await;
    assert_eq!((stats.pending, stats.lag, stats.acked_count), (0, 0, 4));
    // What is acked leaves redq: the topic's stream holds nothing more.
    assert_eq!(redis.cli(&["XLEN", "redq:{jobs}:stream"]).trim(), "0");
}

#[tokio::test]
async fn dead_letters_after_the_last_attempt_and_redrive_pushes_them_back() {
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    create_list_topic(&mut admin, "jobs", LIST).await;
    let opts = Sub::default()
        .retry(Duration::from_millis(10), Duration::from_millis(20))
        .max_attempts(2);
    let mut stream = subscribe(&mut client, "jobs", "workers", opts).await;
    legacy_lpush(&redis, LIST, &["poison".into()]);
    for attempt in 1..=2 {
        let got = expect_messages(&mut stream, 1).await;
        assert_eq!(got[0].delivery_attempt, attempt);
        nack(&mut client, "jobs", "workers", ack_ids_of(&got))
            .await
            .unwrap();
    }
    let dead = wait_dead_letters(&mut admin, "jobs", "workers", 1).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].delivery_attempts, 2);
    assert_eq!(
        dead[0].message.as_ref().unwrap().payload,
        Bytes::from_static(b"poison")
    );
    assert_eq!(list_length(&redis, LIST), 0);
    let stats = subscription_stats(&mut admin, "jobs", "workers").await;
    assert_eq!((stats.pending, stats.dead_letters), (0, 1));

    let redriven = admin
        .redrive_dead_letters(pb::RedriveDeadLettersRequest {
            topic: "jobs".into(),
            subscription: "workers".into(),
            ..Default::default()
        })
        .await
        .expect("RedriveDeadLetters")
        .into_inner()
        .redriven;
    assert_eq!(redriven, 1);
    // Back on the list, and from there to the open stream as a new element.
    let again = expect_messages(&mut stream, 1).await;
    assert_eq!(payload_text(&again[0]), "poison");
    assert_eq!(again[0].delivery_attempt, 1);
    assert!(
        all_dead_letters(&mut admin, "jobs", "workers")
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn a_scheduled_message_is_pushed_onto_the_list_when_due_not_before() {
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    create_list_topic(&mut admin, "jobs", LIST).await;
    let due = Due::in_ms(1500);
    let scheduled = schedule(&mut client, "jobs", message("later"), due).await;
    let due_ms = ts_ms(scheduled.deliver_at.as_ref().expect("deliver_at"));
    publish(&mut client, "jobs", ["now"]).await;
    let mut conn = legacy_connection(&redis);
    let pop = |conn: &mut redis::Connection| {
        let (_, value): (String, String) = redis::cmd("BRPOP")
            .arg(LIST)
            .arg(EVENTUALLY.as_secs())
            .query(conn)
            .expect("BRPOP");
        let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(conn).expect("TIME");
        (value, seconds * 1000 + micros / 1000)
    };
    assert_eq!(pop(&mut conn).0, "now");
    let (value, popped_ms) = pop(&mut conn);
    assert_eq!(value, "later");
    assert!(
        popped_ms >= due_ms,
        "pushed at {popped_ms}, due at {due_ms}"
    );
}

#[tokio::test]
async fn delete_topic_gives_held_elements_back_and_keeps_the_list() {
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    create_list_topic(&mut admin, "jobs", LIST).await;
    let opts = Sub::default().max_attempts(1).max_outstanding(2);
    let mut stream = subscribe(&mut client, "jobs", "workers", opts).await;
    legacy_lpush(&redis, LIST, &["dead".into()]);
    let got = expect_messages(&mut stream, 1).await;
    nack(&mut client, "jobs", "workers", ack_ids_of(&got))
        .await
        .unwrap();
    wait_dead_letters(&mut admin, "jobs", "workers", 1).await;
    let elements: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
    legacy_lpush(&redis, LIST, &elements);
    // The stream holds two elements (its room); three wait in the list.
    let held = expect_messages(&mut stream, 2).await;
    assert_eq!(
        held.iter().map(payload_text).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(list_length(&redis, LIST), 3);
    // The lag is what waits in the list.
    let stats = subscription_stats(&mut admin, "jobs", "workers").await;
    assert_eq!((stats.pending, stats.lag, stats.dead_letters), (2, 3, 1));
    let (_, metrics) = http_get_with_body(server.metrics_addr, "/metrics").await;
    assert!(
        metrics.contains("redq_subscription_lag{topic=\"jobs\",subscription=\"workers\"} 3"),
        "{metrics}"
    );

    admin
        .delete_topic(pb::DeleteTopicRequest {
            name: "jobs".into(),
        })
        .await
        .expect("DeleteTopic");
    // Held ones next at the RPOP end, in their order; dead letters last.
    assert_eq!(
        list_contents(&redis, LIST),
        ["dead", "e", "d", "c", "b", "a"]
    );
    // The stream, left open, ends: the topic is gone.
    let ended = tokio::time::timeout(EVENTUALLY, async {
        while let Ok(Some(_)) = stream.message().await {}
    })
    .await;
    assert!(ended.is_ok(), "the stream of a deleted topic ends");
    assert_eq!(list_length(&redis, LIST), 6);
    let left = redis.cli(&["EXISTS", "redq:{jobs}:stream", "redq:{jobs}:list:staging"]);
    assert_eq!(left.trim(), "0", "redq's keys of the topic are gone");
}

#[tokio::test]
async fn refusals_name_the_field_and_the_kind() {
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    create_list_topic(&mut admin, "jobs", LIST).await;
    let _first = subscribe(&mut client, "jobs", "workers", Sub::default()).await;
    let second = client
        .subscribe(Sub::default().request("jobs", "others"))
        .await;
    assert_status(second.map(drop), Code::FailedPrecondition, "subscription");
    let created = admin
        .create_subscription(pb::CreateSubscriptionRequest {
            topic: "jobs".into(),
            name: "others".into(),
            settings: None,
        })
        .await;
    let status = created.expect_err("a second subscription");
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(status.message().contains("subscription") && status.message().contains("LIST"));
    // The first name is the topic's: another stream of it is welcome.
    let _again = subscribe(&mut client, "jobs", "workers", Sub::default()).await;

    let with = |f: fn(&mut pb::PublishMessage)| {
        let mut m = message("x");
        f(&mut m);
        vec![message("fine"), m]
    };
    for (messages, field) in [
        (
            with(|m| {
                m.attributes.insert("k".into(), "v".into());
            }),
            "messages[1].attributes",
        ),
        (
            with(|m| m.ordering_key = "k".into()),
            "messages[1].ordering_key",
        ),
        (with(|m| m.dedupe_id = "d".into()), "messages[1].dedupe_id"),
    ] {
        assert_status(
            try_publish_messages(&mut client, "jobs", messages).await,
            Code::InvalidArgument,
            field,
        );
    }
    let request_dedupe = client
        .publish(pb::PublishRequest {
            topic: "jobs".into(),
            messages: vec![message("x")],
            dedupe_id: "once".into(),
        })
        .await;
    assert_status(request_dedupe, Code::InvalidArgument, "dedupe_id");
    assert_eq!(list_length(&redis, LIST), 0, "nothing refused was pushed");
}

/// An idle LIST topic with an open stream waits on the list with one
/// blocking move, and does not poll it.
#[tokio::test]
async fn an_idle_list_topic_waits_on_a_blocking_move_instead_of_polling() {
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    create_list_topic(&mut admin, "jobs", LIST).await;
    let mut stream = subscribe(&mut client, "jobs", "workers", Sub::default()).await;
    let info_field = |section: &str, field: &str| -> u64 {
        redis
            .cli(&["INFO", section])
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{field}:")).map(str::to_owned))
            .map_or(0, |value| {
                let calls = value.split(',').next().unwrap_or_default();
                calls
                    .trim_start_matches("calls=")
                    .trim()
                    .parse()
                    .unwrap_or(0)
            })
    };
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while info_field("clients", "blocked_clients") < 1 {
        assert!(tokio::time::Instant::now() < deadline, "no blocking move");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rpop = info_field("commandstats", "cmdstat_rpop");
    let blmove = info_field("commandstats", "cmdstat_blmove");
    tokio::time::sleep(Duration::from_secs(2)).await;
    // At most one safety-net look (every 5 s: two RPOPs), never a poll.
    assert!(
        info_field("commandstats", "cmdstat_rpop") <= rpop + 2,
        "RPOP while idle: {rpop} -> {}",
        info_field("commandstats", "cmdstat_rpop")
    );
    assert_eq!(info_field("commandstats", "cmdstat_blmove"), blmove);
    assert_eq!(info_field("clients", "blocked_clients"), 1);
    // The blocking move wakes the stream when an element comes.
    legacy_lpush(&redis, LIST, &["wake".into()]);
    let got = expect_messages(&mut stream, 1).await;
    assert_eq!(payload_text(&got[0]), "wake");
}

/// DeleteSubscription gives the held elements back, even under an open
/// stream with room (whose blocking move may take one once more: its end
/// puts it back), and frees the topic for another subscription name.
#[tokio::test]
async fn delete_subscription_under_an_open_stream_gives_back_and_frees_the_name() {
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    create_list_topic(&mut admin, "jobs", LIST).await;
    let mut stream = subscribe(&mut client, "jobs", "first", Sub::default()).await;
    legacy_lpush(&redis, LIST, &["x".into(), "y".into()]);
    let got = expect_messages(&mut stream, 2).await;
    ack(&mut client, "jobs", "first", ack_ids_of(&got[..1]))
        .await
        .unwrap();
    admin
        .delete_subscription(pb::DeleteSubscriptionRequest {
            topic: "jobs".into(),
            name: "first".into(),
        })
        .await
        .expect("DeleteSubscription");
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while list_contents(&redis, LIST) != ["y"] {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            list_contents(&redis, LIST)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut next = subscribe(&mut client, "jobs", "second", Sub::default()).await;
    let again = expect_messages(&mut next, 1).await;
    assert_eq!(payload_text(&again[0]), "y");
}

/// Acks sent on a StreamingSubscribe stream take the next element at once
/// (a full stream's fetch rides on its ack) and delete the acked entries.
#[tokio::test]
async fn acks_on_a_streaming_subscribe_stream_take_the_next_element_and_forget_the_acked() {
    let (redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    create_list_topic(&mut admin, "jobs", LIST).await;
    let all: Vec<String> = (0..50).map(|i| format!("job-{i}")).collect();
    legacy_lpush(&redis, LIST, &all);
    let (requests, receiver) = tokio::sync::mpsc::channel(100);
    requests
        .send(pb::StreamingSubscribeRequest {
            subscribe: Some(Sub::default().max_outstanding(1).request("jobs", "workers")),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut responses = client
        .streaming_subscribe(tokio_stream::wrappers::ReceiverStream::new(receiver))
        .await
        .expect("StreamingSubscribe")
        .into_inner();
    let mut received = Vec::new();
    while received.len() < all.len() {
        let response = tokio::time::timeout(EVENTUALLY, responses.message())
            .await
            .expect("a delivery in time")
            .expect("stream ok")
            .expect("open");
        for m in response.messages {
            received.push(payload_text(&m));
            requests
                .send(pb::StreamingSubscribeRequest {
                    ack_ids: vec![m.ack_id],
                    ..Default::default()
                })
                .await
                .unwrap();
        }
    }
    assert_eq!(received, all, "oldest first, each once");
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    loop {
        let stats = subscription_stats(&mut admin, "jobs", "workers").await;
        let stream_length = redis.cli(&["XLEN", "redq:{jobs}:stream"]);
        if stats.acked_count == 50 && stream_length.trim() == "0" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{stats:?}, stream length {stream_length}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
