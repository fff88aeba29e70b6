//! The human CLI (`redq publish`, `subscribe`, `schedule`, `cancel`, `topics`,
//! `stats`, `dlq`): each subcommand runs as a process against a test server,
//! and what it did is checked through the gRPC API (or the other way round).
//!
//! `topics`, `stats` and `dlq redrive|purge` need AdminService RPCs that this
//! branch does not serve yet; their tests are ignored until they are merged.

#![allow(clippy::needless_update)]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use common::cli::{redq, redq_at};
use common::*;
use redq::pb;

const TOPIC: &str = "cli-orders";
const SUB: &str = "cli-billing";

async fn start() -> (RedisServer, TestServer) {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    (redis, server)
}

/// Every delivery of `n` messages on a new subscription, by message id.
async fn deliveries(server: &TestServer, topic: &str, n: usize) -> HashMap<String, pb::Message> {
    let mut client = server.client().await;
    let mut stream = subscribe(&mut client, topic, "cli-check", Sub::default()).await;
    expect_messages(&mut stream, n)
        .await
        .into_iter()
        .map(|m| (id_of(&m), m.message.expect("message")))
        .collect()
}

fn attrs(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_takes_the_payload_from_the_argument_or_stdin() {
    let (_redis, server) = start().await;

    let from_arg = redq(
        &server,
        &[
            "publish",
            TOPIC,
            "hello",
            "--attr",
            "kind=created",
            "--attr",
            "n=a=b",
            "--ordering-key",
            "customer-7",
        ],
        None,
    )
    .await
    .ok_lines();
    assert_eq!(from_arg.len(), 1, "{from_arg:?}");
    // The whole of stdin is one message; only its last newline is dropped.
    let from_stdin = redq(
        &server,
        &["publish", TOPIC],
        Some(b"first line\nsecond line\n"),
    )
    .await
    .ok_lines();
    assert_eq!(from_stdin.len(), 1, "{from_stdin:?}");
    // --lines: one message per non-empty line, \r\n or \n, last line without one.
    let from_lines = redq(
        &server,
        &["publish", TOPIC, "--lines", "--batch", "2"],
        Some(b"one\n\ntwo\r\nthree"),
    )
    .await
    .ok_lines();
    assert_eq!(from_lines.len(), 3, "{from_lines:?}");

    let got = deliveries(&server, TOPIC, 5).await;
    let hello = &got[&from_arg[0]];
    assert_eq!(hello.payload, Bytes::from("hello"));
    assert_eq!(
        hello.attributes,
        attrs(&[("kind", "created"), ("n", "a=b")])
    );
    assert_eq!(hello.ordering_key, "customer-7");
    assert_eq!(
        got[&from_stdin[0]].payload,
        Bytes::from("first line\nsecond line")
    );
    let lines: Vec<&Bytes> = from_lines.iter().map(|id| &got[id].payload).collect();
    assert_eq!(lines, ["one", "two", "three"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_file_sends_jsonl_messages_in_batches() {
    let (_redis, server) = start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("events.jsonl");
    std::fs::write(
        &path,
        concat!(
            r#"{"payload": "a", "attributes": {"k": "v"}, "ordering_key": "o-1"}"#,
            "\n",
            r#"{"payload_base64": "/wA="}"#,
            "\n\n",
            r#"{"payload": "once", "dedupe_id": "d-1"}"#,
            "\n",
            r#"{"payload": "once again", "dedupe_id": "d-1"}"#,
            "\n",
            r#"{"payload": "later", "delay": "1h"}"#,
            "\n",
        ),
    )
    .expect("write jsonl");
    let path = path.to_str().expect("utf-8 path");

    let ids = redq(
        &server,
        &[
            "publish", TOPIC, "--file", path, "--batch", "2", "--attr", "src=file",
        ],
        None,
    )
    .await
    .ok_lines();
    assert_eq!(ids.len(), 5, "one id per message: {ids:?}");
    // The duplicate's slot holds the first message's id, flagged.
    assert_eq!(ids[3], format!("{} duplicate", ids[2]), "{ids:?}");
    // The delayed one is scheduled: cancelling it works.
    let cancelled = redq(&server, &["cancel", TOPIC, &ids[4]], None)
        .await
        .ok_lines();
    assert_eq!(cancelled, ["cancelled"]);

    let got = deliveries(&server, TOPIC, 3).await;
    assert_eq!(got.len(), 3, "{got:?}");
    let a = &got[&ids[0]];
    assert_eq!(a.payload, Bytes::from("a"));
    assert_eq!(a.attributes, attrs(&[("k", "v"), ("src", "file")]));
    assert_eq!(a.ordering_key, "o-1");
    assert_eq!(got[&ids[1]].payload, Bytes::from_static(&[0xff, 0x00]));
    assert_eq!(got[&ids[2]].payload, Bytes::from("once"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_jsonl_line_publishes_nothing_and_names_the_line() {
    let (_redis, server) = start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.jsonl");
    std::fs::write(
        &path,
        "{\"payload\": \"fine\"}\n{\"payload\": \"x\", \"delay\": \"soon\"}\n",
    )
    .expect("write jsonl");
    let path = path.to_str().expect("utf-8 path");

    let out = redq(&server, &["publish", TOPIC, "--file", path], None).await;
    let line = out.one_line_error(&format!("{path}:2: delay"));
    assert!(out.stdout.is_empty(), "{out:?}");
    let unknown_field = dir.path().join("typo.jsonl");
    std::fs::write(&unknown_field, "{\"payloda\": \"x\"}\n").expect("write jsonl");
    redq(
        &server,
        &["publish", TOPIC, "--file", unknown_field.to_str().unwrap()],
        None,
    )
    .await
    .one_line_error("");

    // Nothing of the bad file reached the topic: a marker is its first message.
    let marker = redq(&server, &["publish", TOPIC, "marker"], None)
        .await
        .ok_lines();
    let mut client = server.client().await;
    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::default()).await;
    let got = expect_messages(&mut stream, 1).await;
    assert_eq!(ids_of(&got), marker, "after {line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_prints_acks_and_stops_after_max() {
    let (_redis, server) = start().await;
    let mut client = server.client().await;
    let mut messages: Vec<pb::PublishMessage> =
        ["m0", "m1", "m2"].into_iter().map(message).collect();
    messages.push(pb::PublishMessage {
        payload: Bytes::from("tagged"),
        attributes: attrs(&[("kind", "created")]),
        ..Default::default()
    });
    messages.push(message(Bytes::from_static(&[0xff, 0xfe])));
    let ids = publish_messages(&mut client, TOPIC, messages)
        .await
        .message_ids;

    let json = redq(
        &server,
        &["subscribe", TOPIC, SUB, "--ack", "--max", "3", "--json"],
        None,
    )
    .await
    .ok_lines();
    assert_eq!(json.len(), 3, "{json:?}");
    let mut seen = HashSet::new();
    for line in &json {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        assert_eq!(v["attempt"], 1, "{line}");
        assert!(v["ack_id"].is_string(), "{line}");
        assert!(
            v["payload"].is_string() || v["payload_base64"] == "//4=",
            "{line}"
        );
        seen.insert(v["id"].as_str().expect("id").to_string());
    }
    assert_eq!(seen.len(), 3, "distinct messages: {json:?}");

    // The first three were acked: a second run gets the other two.
    let text = redq(
        &server,
        &["subscribe", TOPIC, SUB, "--ack", "--max", "2"],
        None,
    )
    .await
    .ok_lines();
    assert_eq!(text.len(), 2, "{text:?}");
    for line in &text {
        let id = line.split(' ').next().expect("id first");
        assert!(
            seen.insert(id.to_string()),
            "{id} delivered again: {text:?}"
        );
        assert!(line.contains(" attempt="), "{line}");
    }
    assert_eq!(seen, ids.iter().cloned().collect::<HashSet<_>>());
    // Text lines: id, attempt, attributes, payload (base64 when not UTF-8).
    let everything = redq(
        &server,
        &["subscribe", TOPIC, "cli-text", "--max", "5"],
        None,
    )
    .await
    .ok_lines();
    assert!(
        everything.contains(&format!("{} attempt=1 {{kind=created}} tagged", ids[3])),
        "{everything:?}"
    );
    assert!(
        everything.contains(&format!("{} attempt=1 {{}} base64://4=", ids[4])),
        "{everything:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_prints_id_and_due_time_and_cancel_says_whether_it_cancelled() {
    let (_redis, server) = start().await;

    let before = now_ms();
    let line = redq(
        &server,
        &["schedule", TOPIC, "wake up", "--delay", "1h"],
        None,
    )
    .await
    .ok_lines();
    assert_eq!(line.len(), 1, "{line:?}");
    let words: Vec<&str> = line[0].split(' ').collect();
    assert_eq!(words.len(), 3, "<id> due <time>: {line:?}");
    assert_eq!(words[1], "due");
    let due: prost_types::Timestamp = words[2].parse().expect("an RFC 3339 due time");
    let hour = 3_600_000;
    assert!(
        ts_ms(&due) >= before + hour && ts_ms(&due) <= now_ms() + hour,
        "{line:?}"
    );

    let id = words[0];
    let cancel = redq(&server, &["cancel", TOPIC, id], None).await.ok_lines();
    assert_eq!(cancel, ["cancelled"]);
    let again = redq(&server, &["cancel", TOPIC, id], None).await.ok_lines();
    assert_eq!(again.len(), 1);
    assert!(again[0].starts_with("not cancelled"), "{again:?}");

    // --at takes RFC 3339 with any offset; the due time comes back in UTC.
    let at = redq(
        &server,
        &[
            "schedule",
            TOPIC,
            "new year",
            "--at",
            "2030-01-01T10:00:00+01:00",
        ],
        None,
    )
    .await
    .ok_lines();
    assert_eq!(at.len(), 1, "{at:?}");
    assert!(at[0].ends_with(" due 2030-01-01T09:00:00Z"), "{at:?}");

    // Exactly one of --delay and --at.
    redq(&server, &["schedule", TOPIC, "x"], None)
        .await
        .one_line_error("");
    redq(
        &server,
        &[
            "schedule",
            TOPIC,
            "x",
            "--delay",
            "1s",
            "--at",
            "2030-01-01T00:00:00Z",
        ],
        None,
    )
    .await
    .one_line_error("");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_one_line_with_the_status_code_and_a_failing_exit() {
    let (_redis, server) = start().await;

    let line = redq(&server, &["publish", "bad topic!", "hello"], None)
        .await
        .one_line_error("INVALID_ARGUMENT: topic");
    assert!(line.contains("must match"), "{line}");
    redq(
        &server,
        &["subscribe", TOPIC, "no/slashes", "--max", "1"],
        None,
    )
    .await
    .one_line_error("INVALID_ARGUMENT: subscription");
    redq(&server, &["publish", TOPIC, ""], None)
        .await
        .one_line_error("INVALID_ARGUMENT: messages[0].payload");
    redq(&server, &["cancel", "bad topic!", "s123"], None)
        .await
        .one_line_error("INVALID_ARGUMENT: topic");
    redq(&server, &["dlq", "list", "bad topic!", SUB], None)
        .await
        .one_line_error("INVALID_ARGUMENT: topic");

    // Bad input the CLI itself rejects.
    redq(
        &server,
        &["publish", TOPIC, "--attr", "no-equals", "x"],
        None,
    )
    .await
    .one_line_error("");
    redq(&server, &["publish", TOPIC, "--delay", "soon", "x"], None)
        .await
        .one_line_error("");
    redq(&server, &["subscribe", TOPIC, SUB, "--max", "0"], None)
        .await
        .one_line_error("");
    redq(
        &server,
        &["publish", TOPIC, "--file", "/nonexistent/x.jsonl"],
        None,
    )
    .await
    .one_line_error("/nonexistent/x.jsonl: ");
    // Purging every dead letter takes --all.
    redq(&server, &["dlq", "purge", TOPIC, SUB], None)
        .await
        .one_line_error("");

    // No server there.
    let line = redq_at("http://127.0.0.1:1", &["publish", TOPIC, "x"], None)
        .await
        .one_line_error("cannot reach http://127.0.0.1:1");
    assert!(line.contains("refused"), "{line}");
    redq_at("not a url", &["topics"], None)
        .await
        .one_line_error("--server not a url");
}

/// Two dead letters of TOPIC/SUB: one nacked, one whose lease ran out.
/// Returns their message ids (nacked first).
async fn make_dead_letters(server: &TestServer) -> (String, String) {
    let mut client = server.client().await;
    let ids = publish(&mut client, TOPIC, ["nacked", "expired"]).await;
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(Duration::from_millis(300))
            .max_outstanding(2)
            .max_attempts(1),
    )
    .await;
    let got = expect_messages(&mut stream, 2).await;
    let nacked: Vec<_> = got
        .iter()
        .filter(|m| id_of(m) == ids[0])
        .map(|m| m.ack_id.clone())
        .collect();
    nack(&mut client, TOPIC, SUB, nacked).await.expect("nack");
    let mut admin = server.admin().await;
    // The stream stays open while the other lease runs out.
    wait_dead_letters(&mut admin, TOPIC, SUB, 2).await;
    drop(stream);
    (ids[0].clone(), ids[1].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_list_shows_every_dead_letter() {
    let (_redis, server) = start().await;
    let (nacked, expired) = make_dead_letters(&server).await;

    let table = redq(&server, &["dlq", "list", TOPIC, SUB], None)
        .await
        .ok_lines();
    assert_eq!(table.len(), 3, "header and two rows: {table:?}");
    assert!(table[0].starts_with("DEAD LETTER ID"), "{table:?}");
    let row = |id: &str| {
        table
            .iter()
            .find(|line| line.contains(id))
            .unwrap_or_else(|| panic!("no row for {id}: {table:?}"))
            .clone()
    };
    assert!(row(&nacked).contains("nacked"), "{table:?}");
    assert!(row(&nacked).ends_with("nacked"), "payload last: {table:?}");
    assert!(row(&expired).contains("deadline exceeded"), "{table:?}");

    let json = redq(&server, &["dlq", "list", TOPIC, SUB, "--json"], None)
        .await
        .ok_lines();
    assert_eq!(json.len(), 2, "{json:?}");
    let by_message: HashMap<String, serde_json::Value> = json
        .iter()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            (v["message_id"].as_str().expect("message_id").to_string(), v)
        })
        .collect();
    assert_eq!(by_message[&nacked]["reason"], "nacked");
    assert_eq!(by_message[&nacked]["attempts"], 1);
    assert_eq!(by_message[&nacked]["payload"], "nacked");
    assert_eq!(by_message[&expired]["reason"], "deadline exceeded");
    assert!(by_message[&expired]["dead_letter_id"].is_string());

    // An unknown subscription has no dead letters (or is not found): either
    // way, no panic and a clean result.
    let other = redq(&server, &["dlq", "list", TOPIC, "nobody"], None).await;
    assert!(!other.stderr.contains("panicked"), "{other:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_lists_every_topic() {
    let (_redis, server) = start().await;
    redq(&server, &["publish", "cli-a", "x"], None)
        .await
        .ok_lines();
    redq(&server, &["publish", "cli-b", "x"], None)
        .await
        .ok_lines();
    let mut client = server.client().await;
    let _stream = subscribe(&mut client, "cli-b", SUB, Sub::default()).await;

    let table = redq(&server, &["topics"], None).await.ok_lines();
    assert!(table[0].starts_with("TOPIC"), "{table:?}");
    let row_of = |name: &str| -> Vec<String> {
        let line = table
            .iter()
            .find(|line| line.split("  ").next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}: {table:?}"));
        cells(line)
    };
    assert_eq!(row_of("cli-a")[1..3], ["STREAM", "0"], "{table:?}");
    assert_eq!(row_of("cli-b")[1..3], ["STREAM", "1"], "{table:?}");
}

/// A table row's cells: separated by two spaces or more (a cell such as
/// `4s 120ms` holds single spaces).
fn cells(line: &str) -> Vec<String> {
    line.split("  ")
        .map(str::trim)
        .filter(|cell| !cell.is_empty())
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_shows_the_topic_and_its_subscriptions() {
    let (_redis, server) = start().await;
    let mut client = server.client().await;
    publish(&mut client, TOPIC, ["a", "b", "c"]).await;
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(Duration::from_secs(300)),
    )
    .await;
    let got = expect_messages(&mut stream, 3).await;
    ack(&mut client, TOPIC, SUB, vec![got[0].ack_id.clone()])
        .await
        .expect("ack");
    redq(
        &server,
        &["schedule", TOPIC, "later", "--delay", "1h"],
        None,
    )
    .await
    .ok_lines();

    let text = redq(&server, &["stats", TOPIC], None).await.ok_lines();
    let value = |label: &str| -> String {
        let line = text
            .iter()
            .find(|line| line.starts_with(label))
            .unwrap_or_else(|| panic!("no {label:?} line: {text:?}"));
        cells(line)[1].clone()
    };
    assert_eq!(value("TOPIC"), TOPIC, "{text:?}");
    // Retention may already have trimmed the acked first entry.
    let length: u64 = value("stream length").parse().expect("a number");
    assert!((2..=3).contains(&length), "{text:?}");
    assert_eq!(value("scheduled"), "1", "{text:?}");
    assert!(value("next due").contains("(in "), "{text:?}");
    let header = text
        .iter()
        .position(|line| line.starts_with("SUBSCRIPTION  PENDING"))
        .unwrap_or_else(|| panic!("no subscription table: {text:?}"));
    let row = cells(&text[header + 1]);
    // SUBSCRIPTION PENDING LAG OLDEST-UNACKED DEAD-LETTERS ACKED CONSUMERS
    assert_eq!(row[0], SUB, "{text:?}");
    assert_eq!(row[1], "2", "pending: {text:?}");
    assert_eq!(row[2], "0", "lag: {text:?}");
    assert_ne!(row[3], "-", "oldest unacked age: {text:?}");
    assert_eq!(row[4], "0", "dead letters: {text:?}");
    assert_eq!(row[5], "1", "acked: {text:?}");
    let consumers: u64 = row[6].parse().expect("a number");
    assert!(consumers >= 1, "the open stream is a consumer: {text:?}");
    assert!(
        text.iter()
            .any(|line| line.starts_with("SUBSCRIPTION  CONSUMER")),
        "consumer table: {text:?}"
    );
    drop(stream);

    redq(&server, &["stats", "cli-unknown"], None)
        .await
        .one_line_error("NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_redrive_gives_dead_letters_back() {
    let (_redis, server) = start().await;
    let (nacked, expired) = make_dead_letters(&server).await;
    let mut admin = server.admin().await;
    let dead = all_dead_letters(&mut admin, TOPIC, SUB).await;
    let nacked_dead = dead
        .iter()
        .find(|d| d.message.as_ref().map(|m| m.id.as_str()) == Some(nacked.as_str()))
        .expect("the nacked dead letter");

    let out = redq(
        &server,
        &["dlq", "redrive", TOPIC, SUB, &nacked_dead.dead_letter_id],
        None,
    )
    .await
    .ok_lines();
    assert_eq!(out, ["redriven: 1"]);
    let left = all_dead_letters(&mut admin, TOPIC, SUB).await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(
        left[0].message.as_ref().map(|m| m.id.clone()),
        Some(expired)
    );

    let mut client = server.client().await;
    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::default()).await;
    let got = expect_messages(&mut stream, 1).await;
    assert_eq!(ids_of(&got), [nacked]);

    let all = redq(&server, &["dlq", "redrive", TOPIC, SUB], None)
        .await
        .ok_lines();
    assert_eq!(all, ["redriven: 1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_purge_deletes_named_or_all_dead_letters() {
    let (_redis, server) = start().await;
    make_dead_letters(&server).await;
    let mut admin = server.admin().await;
    let dead = all_dead_letters(&mut admin, TOPIC, SUB).await;

    let one = redq(
        &server,
        &["dlq", "purge", TOPIC, SUB, &dead[0].dead_letter_id],
        None,
    )
    .await
    .ok_lines();
    assert_eq!(one, ["purged: 1"]);
    assert_eq!(all_dead_letters(&mut admin, TOPIC, SUB).await.len(), 1);

    let rest = redq(&server, &["dlq", "purge", TOPIC, SUB, "--all"], None)
        .await
        .ok_lines();
    assert_eq!(rest, ["purged: 1"]);
    let table = redq(&server, &["dlq", "list", TOPIC, SUB], None)
        .await
        .ok_lines();
    assert_eq!(table.len(), 1, "header only: {table:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_show_in_topics_and_stats_and_subscribe_takes_a_pattern() {
    let (_redis, server) = start().await;
    let mut admin = server.admin().await;
    for (name, kind, list_key) in [
        ("cli-live.hall", pb::TopicKind::Ephemeral, ""),
        ("cli-jobs", pb::TopicKind::List, "legacy:cli-jobs"),
    ] {
        admin
            .create_topic(pb::CreateTopicRequest {
                name: name.into(),
                settings: Some(pb::TopicSettings {
                    kind: kind.into(),
                    list_key: list_key.into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap_or_else(|s| panic!("create {name}: {s:?}"));
    }
    let table = redq(&server, &["topics"], None).await.ok_lines();
    let kind_of = |name: &str| -> String {
        let line = table
            .iter()
            .find(|line| line.split("  ").next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}: {table:?}"));
        cells(line)[1].clone()
    };
    assert_eq!(kind_of("cli-live.hall"), "EPHEMERAL", "{table:?}");
    assert_eq!(kind_of("cli-jobs"), "LIST legacy:cli-jobs", "{table:?}");
    let stats = redq(&server, &["stats", "cli-live.hall"], None)
        .await
        .ok_lines();
    assert!(
        stats
            .iter()
            .any(|l| l.starts_with("kind") && l.ends_with("EPHEMERAL")),
        "{stats:?}"
    );

    // A pattern stream prints each message after its topic. It opens once
    // the CLI has run, so the message is published until the CLI prints it.
    let cli = tokio::spawn({
        let server_url = server.grpc_url();
        async move {
            common::cli::redq_at(
                &server_url,
                &[
                    "subscribe",
                    "cli-live.*",
                    "screens",
                    "--pattern",
                    "--max",
                    "1",
                ],
                None,
            )
            .await
        }
    });
    let mut client = server.client().await;
    while !cli.is_finished() {
        publish(&mut client, "cli-live.hall", ["21.5"]).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let lines = cli.await.unwrap().ok_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("cli-live.hall "), "{lines:?}");
    assert!(lines[0].ends_with(" 21.5"), "{lines:?}");
}
