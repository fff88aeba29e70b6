//! Recurring schedules through gRPC: runs exactly once per nominal time
//! across replicas and a kill -9, cron in a time zone, replacing and
//! pausing, catch-up after every replica was down, validation, paging, and
//! what deleting does.

mod common;

use common::*;
use redq::pb;
use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, SystemTime};
use tonic::Code;

/// Long enough for anything that should happen "soon", here bounded polling.
const LONG: Duration = Duration::from_secs(60);

fn every(topic: &str, name: &str, period: Duration) -> pb::Schedule {
    pb::Schedule {
        topic: topic.into(),
        name: name.into(),
        every: Some(pb_duration(period)),
        message: Some(pb::PublishMessage {
            payload: format!("run of {name}").into(),
            attributes: [("team".to_owned(), "reports".to_owned())].into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn put(admin: &mut Admin, schedule: pb::Schedule) -> Result<pb::Schedule, tonic::Status> {
    admin
        .put_schedule(pb::PutScheduleRequest {
            schedule: Some(schedule),
        })
        .await
        .map(|r| r.into_inner())
}

async fn get(admin: &mut Admin, topic: &str, name: &str) -> Result<pb::Schedule, tonic::Status> {
    admin
        .get_schedule(pb::GetScheduleRequest {
            topic: topic.into(),
            name: name.into(),
        })
        .await
        .map(|r| r.into_inner())
}

/// Polls GetSchedule until it has published at least `runs` messages.
async fn wait_runs(admin: &mut Admin, topic: &str, name: &str, runs: u64) -> pb::Schedule {
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let schedule = get(admin, topic, name).await.expect("GetSchedule");
        if schedule.runs >= runs {
            return schedule;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name}: {} runs, not {runs}, within {LONG:?}",
            schedule.runs
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The nominal time a run's message carries, in ms since the epoch.
fn nominal_ms(message: &pb::ReceivedMessage) -> i64 {
    let attributes = &message.message.as_ref().expect("message").attributes;
    let time = attributes
        .get("redq-scheduled-time")
        .expect("redq-scheduled-time attribute");
    assert!(time.ends_with('Z'), "{time} is not in UTC with Z");
    chrono::DateTime::parse_from_rfc3339(time)
        .unwrap_or_else(|e| panic!("{time}: {e}"))
        .timestamp_millis()
}

/// Exactly `n` messages from the stream (at least `n` within the bound,
/// and none more in a short look after).
async fn receive(
    stream: &mut tonic::Streaming<pb::SubscribeResponse>,
    n: usize,
) -> Vec<pb::ReceivedMessage> {
    let got = next_messages(stream, n, LONG).await;
    assert!(got.len() >= n, "{} messages, not {n}", got.len());
    got
}

#[tokio::test(flavor = "multi_thread")]
async fn every_second_on_three_replicas_runs_each_nominal_time_once_across_a_kill9() {
    let redis = RedisServer::start();
    let mut a = TestServer::start(&redis.url(), &[]).await;
    let b = TestServer::start(&redis.url(), &[]).await;
    let c = TestServer::start(&redis.url(), &[]).await;
    let mut admin_a = a.admin().await;
    let mut admin_b = b.admin().await;
    let mut client = c.client().await;
    // The subscription exists before the first run, so it gets every one.
    let mut stream = subscribe(&mut client, "ticks", "all", Sub::deadline(LONG)).await;

    let put_on_a = put(&mut admin_a, every("ticks", "tick", Duration::from_secs(1)))
        .await
        .expect("PutSchedule");
    assert!(put_on_a.next_run.is_some());
    assert_eq!(put_on_a.runs, 0);
    wait_runs(&mut admin_b, "ticks", "tick", 10).await;
    // The replica the schedule was put on dies mid-run; the others go on.
    a.kill9();
    let before_stop = wait_runs(&mut admin_b, "ticks", "tick", 22).await;
    let stopped = put(
        &mut admin_b,
        pb::Schedule {
            paused: true,
            ..every("ticks", "tick", Duration::from_secs(1))
        },
    )
    .await
    .expect("pause");
    assert!(
        stopped.next_run.is_none(),
        "a paused schedule has no next run"
    );
    assert!(stopped.runs >= before_stop.runs);
    let runs = stopped.runs as usize;

    let messages = receive(&mut stream, runs).await;
    assert_eq!(messages.len(), runs, "one message per run");
    let nominal: Vec<i64> = messages.iter().map(nominal_ms).collect();
    let distinct: BTreeSet<i64> = nominal.iter().copied().collect();
    assert_eq!(distinct.len(), runs, "no nominal time twice: {nominal:?}");
    let first = *distinct.first().unwrap();
    let last = *distinct.last().unwrap();
    assert_eq!(first % 1000, 0, "runs at whole seconds since the epoch");
    // Never skipped while a replica runs: every second from first to last.
    assert_eq!(
        (last - first) / 1000 + 1,
        runs as i64,
        "a second was skipped: {nominal:?}"
    );
    let in_twenty_seconds = distinct.iter().filter(|&&t| t < first + 20_000).count();
    println!(
        "every 1s on 3 replicas, kill -9 of one: {runs} runs, {in_twenty_seconds} in the first 20 s"
    );
    assert!((19..=21).contains(&in_twenty_seconds));
    for m in &messages {
        let attributes = &m.message.as_ref().unwrap().attributes;
        assert_eq!(attributes["redq-schedule"], "tick");
        assert_eq!(attributes["team"], "reports");
    }
    let after = get(&mut admin_b, "ticks", "tick").await.unwrap();
    assert_eq!(after.runs, stopped.runs);
    assert_eq!(after.last_run.as_ref().map(ts_ms), Some(last));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_six_field_cron_in_a_time_zone_runs_every_two_seconds() {
    let (_redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    let mut stream = subscribe(&mut client, "cron", "all", Sub::deadline(LONG)).await;
    let schedule = pb::Schedule {
        cron: "*/2 * * * * *".into(),
        every: None,
        // Half an hour off UTC: the zone's offset applies to the seconds field too.
        time_zone: "Asia/Kolkata".into(),
        ..every("cron", "even", Duration::from_secs(1))
    };
    let put_reply = put(&mut admin, schedule).await.expect("PutSchedule");
    assert_eq!(put_reply.time_zone, "Asia/Kolkata");
    let next = ts_ms(put_reply.next_run.as_ref().unwrap());
    assert_eq!(next % 2000, 0);

    let messages = receive(&mut stream, 3).await;
    let nominal: Vec<i64> = messages.iter().take(3).map(nominal_ms).collect();
    assert_eq!(
        nominal[0], next,
        "the first run is the next_run PutSchedule gave"
    );
    assert_eq!(nominal[1] - nominal[0], 2000);
    assert_eq!(nominal[2] - nominal[1], 2000);
    let attributes = &messages[0].message.as_ref().unwrap().attributes;
    assert_eq!(attributes["redq-schedule"], "even");
    assert_eq!(
        messages[0].message.as_ref().unwrap().payload.as_ref(),
        b"run of even"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn replacing_continues_after_the_last_run_and_pausing_skips_the_runs_due_meanwhile() {
    let (_redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    let mut stream = subscribe(&mut client, "jobs", "all", Sub::deadline(LONG)).await;
    put(&mut admin, every("jobs", "job", Duration::from_secs(1)))
        .await
        .unwrap();
    let before = wait_runs(&mut admin, "jobs", "job", 2).await;

    // Replace mid-run: another period and payload; runs are kept.
    let mut replacement = every("jobs", "job", Duration::from_secs(2));
    replacement.message.as_mut().unwrap().payload = "replaced".into();
    let replaced = put(&mut admin, replacement.clone()).await.unwrap();
    assert!(
        replaced.runs >= before.runs,
        "runs kept across replacements"
    );
    let after = wait_runs(&mut admin, "jobs", "job", replaced.runs + 2).await;

    // Pause: nothing runs however long it stays paused.
    let paused = put(
        &mut admin,
        pb::Schedule {
            paused: true,
            ..replacement.clone()
        },
    )
    .await
    .unwrap();
    assert!(paused.next_run.is_none());
    assert!(paused.runs >= after.runs);
    let messages = receive(&mut stream, paused.runs as usize).await;
    assert_no_message_within(&mut stream, Duration::from_secs(3)).await;
    assert_eq!(
        get(&mut admin, "jobs", "job").await.unwrap().runs,
        paused.runs
    );

    // Resume: the first run is the next one from now, none of the missed.
    let resumed = put(&mut admin, replacement).await.unwrap();
    let resumed_next = ts_ms(resumed.next_run.as_ref().expect("next run when resumed"));
    let last_paused = ts_ms(paused.last_run.as_ref().unwrap());
    assert!(resumed_next >= last_paused + 3000, "missed runs skipped");
    let more = receive(&mut stream, 1).await;
    assert_eq!(nominal_ms(&more[0]), resumed_next);

    let nominal: Vec<i64> = messages.iter().chain(&more).map(nominal_ms).collect();
    assert!(
        nominal.windows(2).all(|w| w[0] < w[1]),
        "nominal times only go forward, none twice: {nominal:?}"
    );
    let replaced_payloads = messages
        .iter()
        .chain(&more)
        .filter(|m| m.message.as_ref().unwrap().payload.as_ref() == b"replaced")
        .count();
    assert!(replaced_payloads >= 3, "the replacement took effect");
}

#[tokio::test(flavor = "multi_thread")]
async fn after_every_replica_was_down_at_most_catch_up_missed_runs_are_published() {
    let redis = RedisServer::start();
    let mut first = TestServer::start(&redis.url(), &[]).await;
    let mut admin = first.admin().await;
    let mut client = first.client().await;
    // Creates the subscription before the first run.
    drop(subscribe(&mut client, "nightly", "all", Sub::deadline(LONG)).await);
    let schedule = pb::Schedule {
        catch_up: 2,
        ..every("nightly", "report", Duration::from_secs(1))
    };
    put(&mut admin, schedule).await.unwrap();
    wait_runs(&mut admin, "nightly", "report", 2).await;
    first.kill9();
    let down_since = unix_ms(SystemTime::now());
    // No replica runs for 5 s: about five runs are missed.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let restarted_at = unix_ms(SystemTime::now());
    let second = TestServer::start(&redis.url(), &[]).await;
    let mut admin = second.admin().await;
    let state = get(&mut admin, "nightly", "report").await.unwrap();
    let done = wait_runs(&mut admin, "nightly", "report", state.runs + 4).await;

    let mut client = second.client().await;
    let mut stream = subscribe(&mut client, "nightly", "all", Sub::deadline(LONG)).await;
    let messages = receive(&mut stream, done.runs as usize).await;
    let nominal: Vec<i64> = messages.iter().map(nominal_ms).collect();
    let distinct: HashSet<i64> = nominal.iter().copied().collect();
    assert_eq!(distinct.len(), nominal.len(), "no nominal time twice");
    // Runs more than a second before the new replica's first pass were
    // missed (a run less late is on time, and published as usual): those
    // before `restarted_at` less a second certainly were.
    let missed_published = nominal
        .iter()
        .filter(|&&t| t > down_since && t < restarted_at - 1000)
        .count();
    println!("5 s without replicas, catch_up 2: {missed_published} missed runs published");
    assert!(
        missed_published <= 2,
        "{missed_published} catch-up runs: {nominal:?}"
    );
    assert!(
        nominal.iter().any(|&t| t < down_since),
        "runs before the stop were published: {nominal:?}"
    );
    let scrape = metrics::scrape(second.metrics_addr).await;
    let catch_up = scrape.value("redq_schedule_catch_up_runs_total", &[("topic", "nightly")]);
    // The first pass found about five missed runs and published two.
    assert!(catch_up >= 2.0, "catch-up metric {catch_up}");
    let skipped = scrape.value("redq_schedule_skipped_runs_total", &[("topic", "nightly")]);
    assert!(skipped >= 2.0, "the others were skipped: {skipped}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_schedules_are_invalid_arguments_naming_the_field() {
    let (_redis, server, _client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    let base = every("t", "s", Duration::from_secs(1));
    let cron = |expression: &str, zone: &str| pb::Schedule {
        cron: expression.into(),
        every: None,
        time_zone: zone.into(),
        ..base.clone()
    };
    let cases: Vec<(pb::Schedule, &str)> = vec![
        (
            cron("61 * * * *", ""),
            "schedule.cron: field 1 (minute): 61 is out of range 0-59",
        ),
        (
            cron("* * * * *", "Mars/Base"),
            "schedule.time_zone: unknown time zone \"Mars/Base\"",
        ),
        (
            pb::Schedule {
                cron: "* * * * *".into(),
                ..base.clone()
            },
            "schedule.cron, schedule.every: exactly one must be set",
        ),
        (
            pb::Schedule {
                every: None,
                ..base.clone()
            },
            "schedule.cron, schedule.every: exactly one must be set",
        ),
        (
            every("t", "s", Duration::from_millis(500)),
            "schedule.every: must be at least 1s",
        ),
        (
            pb::Schedule {
                start_time: Some(pb_timestamp(SystemTime::now())),
                end_time: Some(pb_timestamp(SystemTime::now() - Duration::from_secs(60))),
                ..base.clone()
            },
            "schedule.end_time: before schedule.start_time",
        ),
        (
            pb::Schedule {
                name: "bad name".into(),
                ..base.clone()
            },
            "schedule.name",
        ),
        (
            pb::Schedule {
                message: None,
                ..base.clone()
            },
            "schedule.message",
        ),
    ];
    for (schedule, expected) in cases {
        let status = put(&mut admin, schedule).await.unwrap_err();
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{expected}: {status:?}"
        );
        assert!(
            status.message().starts_with(expected),
            "{:?} is not {expected:?}",
            status.message()
        );
    }
    let template = |change: fn(&mut pb::PublishMessage)| {
        let mut schedule = base.clone();
        change(schedule.message.as_mut().unwrap());
        schedule
    };
    for (schedule, field) in [
        (
            template(|m| m.deliver_at = Some(pb_timestamp(SystemTime::now()))),
            "schedule.message.deliver_at",
        ),
        (
            template(|m| m.delay = Some(pb_duration(Duration::from_secs(1)))),
            "schedule.message.delay",
        ),
        (
            template(|m| m.dedupe_id = "once".into()),
            "schedule.message.dedupe_id",
        ),
        (
            template(|m| {
                m.attributes.insert("redq-schedule".into(), "mine".into());
            }),
            "schedule.message.attributes[\"redq-schedule\"]",
        ),
    ] {
        assert_status(
            put(&mut admin, schedule).await,
            Code::InvalidArgument,
            field,
        );
    }
    assert_status(
        admin
            .put_schedule(pb::PutScheduleRequest { schedule: None })
            .await,
        Code::InvalidArgument,
        "schedule",
    );
    assert_status(
        admin
            .list_schedules(pb::ListSchedulesRequest {
                topic: "t".into(),
                page_size: 1001,
                page_token: String::new(),
            })
            .await,
        Code::InvalidArgument,
        "page_size",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn schedules_are_listed_by_name_in_full_pages() {
    let (_redis, server, _client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    for name in ["e", "b", "d", "a", "c"] {
        let schedule = pb::Schedule {
            paused: true,
            ..every("listed", name, Duration::from_secs(3600))
        };
        put(&mut admin, schedule).await.unwrap();
    }
    let mut pages = Vec::new();
    let mut token = String::new();
    loop {
        let page = admin
            .list_schedules(pb::ListSchedulesRequest {
                topic: "listed".into(),
                page_size: 2,
                page_token: token,
            })
            .await
            .unwrap()
            .into_inner();
        pages.push(
            page.schedules
                .iter()
                .map(|s| s.name.clone())
                .collect::<Vec<_>>(),
        );
        assert!(
            page.schedules
                .iter()
                .all(|s| s.topic == "listed" && s.paused)
        );
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(pages, [vec!["a", "b"], vec!["c", "d"], vec!["e"]]);
    let all = admin
        .list_schedules(pb::ListSchedulesRequest {
            topic: "listed".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.schedules.len(), 5);
    assert!(all.next_page_token.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_a_schedule_or_its_topic_removes_it_and_unknown_ones_are_not_found() {
    let (_redis, server, _client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    let delete = |topic: &str, name: &str| pb::DeleteScheduleRequest {
        topic: topic.into(),
        name: name.into(),
    };
    assert_status(
        get(&mut admin, "gone", "none").await,
        Code::NotFound,
        "schedule",
    );
    assert_status(
        admin.delete_schedule(delete("gone", "none")).await,
        Code::NotFound,
        "schedule",
    );

    // PutSchedule on an unknown topic creates it.
    put(&mut admin, every("gone", "one", Duration::from_secs(1)))
        .await
        .unwrap();
    put(&mut admin, every("gone", "two", Duration::from_secs(1)))
        .await
        .unwrap();
    admin
        .get_topic(pb::GetTopicRequest {
            name: "gone".into(),
        })
        .await
        .expect("the topic was created");
    admin.delete_schedule(delete("gone", "one")).await.unwrap();
    assert_status(
        get(&mut admin, "gone", "one").await,
        Code::NotFound,
        "schedule",
    );
    assert_status(
        admin.delete_schedule(delete("gone", "one")).await,
        Code::NotFound,
        "schedule",
    );

    wait_runs(&mut admin, "gone", "two", 1).await;
    admin
        .delete_topic(pb::DeleteTopicRequest {
            name: "gone".into(),
        })
        .await
        .unwrap();
    assert_status(
        get(&mut admin, "gone", "two").await,
        Code::NotFound,
        "schedule",
    );
    let listed = admin
        .list_schedules(pb::ListSchedulesRequest {
            topic: "gone".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(listed.schedules.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_publish_to_list_topics_too() {
    let (redis, server, _client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    admin
        .create_topic(pb::CreateTopicRequest {
            name: "legacy".into(),
            settings: Some(pb::TopicSettings {
                kind: pb::TopicKind::List.into(),
                list_key: "queue:legacy".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    put(&mut admin, every("legacy", "push", Duration::from_secs(1)))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + LONG;
    loop {
        let length: u64 = redis.cli(&["LLEN", "queue:legacy"]).trim().parse().unwrap();
        if length >= 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no runs on the list"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A list element is the payload alone.
    assert_eq!(
        redis.cli(&["LINDEX", "queue:legacy", "0"]).trim(),
        "run of push"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_puts_lists_and_deletes_schedules() {
    let (_redis, server, _client) = redis_server_and_client().await;
    let put = cli::redq(
        &server,
        &[
            "schedule",
            "put",
            "cli",
            "nightly",
            "--cron",
            "0 2 * * *",
            "--time-zone",
            "Europe/Paris",
            "--payload",
            "run",
            "--attr",
            "team=reports",
        ],
        None,
    )
    .await
    .ok_lines();
    assert!(put[1].contains("cron 0 2 * * * Europe/Paris"), "{put:?}");
    cli::redq(
        &server,
        &[
            "schedule",
            "put",
            "cli",
            "tick",
            "--every",
            "1h",
            "--payload",
            "t",
            "--paused",
        ],
        None,
    )
    .await
    .ok_lines();
    let listed = cli::redq(&server, &["schedules", "cli"], None)
        .await
        .ok_lines();
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(
        listed[1].starts_with("nightly") && listed[1].contains(":00:00Z"),
        "{listed:?}"
    );
    assert!(
        listed[2].starts_with("tick") && listed[2].contains("paused"),
        "{listed:?}"
    );
    let deleted = cli::redq(&server, &["schedule", "delete", "cli", "tick"], None)
        .await
        .ok_lines();
    assert_eq!(deleted, ["deleted tick"]);
    cli::redq(&server, &["schedule", "delete", "cli", "tick"], None)
        .await
        .one_line_error("NOT_FOUND");
    cli::redq(
        &server,
        &[
            "schedule",
            "put",
            "cli",
            "bad",
            "--cron",
            "61 * * * *",
            "--payload",
            "x",
        ],
        None,
    )
    .await
    .one_line_error("INVALID_ARGUMENT: schedule.cron: field 1 (minute)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_run_on_a_redis_cluster_on_topics_of_every_master() {
    let cluster = common::cluster::RedisCluster::start();
    let server = TestServer::start(&cluster.url(), &[]).await;
    server.wait_serving().await;
    let mut client = server.client().await;
    let mut admin = server.admin().await;
    // One topic whose keys live on each master.
    let mut topics: std::collections::HashMap<u16, String> = Default::default();
    for i in 0.. {
        let topic = format!("topic-{i}");
        let port = cluster.master_of(&format!("redq:{{{topic}}}:stream"));
        topics.entry(port).or_insert(topic);
        if topics.len() == 3 {
            break;
        }
    }
    for topic in topics.values() {
        let mut stream = subscribe(&mut client, topic, "all", Sub::deadline(LONG)).await;
        put(&mut admin, every(topic, "tick", Duration::from_secs(1)))
            .await
            .unwrap_or_else(|s| panic!("{topic}: {s:?}"));
        let messages = receive(&mut stream, 2).await;
        let nominal: Vec<i64> = messages.iter().take(2).map(nominal_ms).collect();
        assert_eq!(nominal[1] - nominal[0], 1000, "{topic}: {nominal:?}");
        let listed = admin
            .list_schedules(pb::ListSchedulesRequest {
                topic: topic.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(listed.schedules.len(), 1, "{topic}");
        admin
            .delete_topic(pb::DeleteTopicRequest {
                name: topic.clone(),
            })
            .await
            .unwrap();
        assert_status(
            get(&mut admin, topic, "tick").await,
            Code::NotFound,
            "schedule",
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_publish_to_ephemeral_topics_live() {
    let (_redis, server, mut client) = redis_server_and_client().await;
    let mut admin = server.admin().await;
    admin
        .create_topic(pb::CreateTopicRequest {
            name: "live".into(),
            settings: Some(pb::TopicSettings {
                kind: pb::TopicKind::Ephemeral.into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let mut stream = subscribe(&mut client, "live", "watch", Sub::deadline(LONG)).await;
    put(&mut admin, every("live", "beat", Duration::from_secs(1)))
        .await
        .unwrap();
    let messages = receive(&mut stream, 2).await;
    let nominal: Vec<i64> = messages.iter().take(2).map(nominal_ms).collect();
    assert!(nominal[0] < nominal[1], "{nominal:?}");
    assert_eq!(
        messages[0].message.as_ref().unwrap().attributes["redq-schedule"],
        "beat"
    );
}
