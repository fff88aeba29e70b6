//! Delayed delivery: ScheduleDelayed and scheduled Publish messages are never
//! delivered before their due time (invariant 1), several promoting replicas never
//! duplicate or lose one (invariant 2), CancelScheduled and RescheduleDelayed act
//! only on messages not yet delivered, and cancel racing promotion either cancels
//! or delivers exactly once (invariant 7).
//!
//! "Not early" compares the test's wall clock at arrival with `Message.deliver_at`:
//! the test, redq and Redis share one machine and one clock. Due times are chosen in
//! whole milliseconds, the server's precision, so they compare exactly.

#![allow(clippy::needless_update)]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use common::*;
use redq::pb;
use tonic::{Code, Status};

const TOPIC: &str = "reminders";
const SUB: &str = "mailer";

/// Long enough that no lease expires during a test: a redelivery is a duplicate.
const NO_REDELIVERY: Duration = Duration::from_secs(300);

/// Generous bound for a test's deliveries; only keeps a broken server from hanging.
const PATIENCE: Duration = Duration::from_secs(120);

/// What a test knows about a message it scheduled.
#[derive(Clone, Debug)]
struct Expected {
    payload: Bytes,
    /// The due time asked for with `deliver_at` (whole ms), if that was used.
    requested_ms: Option<i64>,
    /// Lower bound of the due time: the requested time, or the test's clock
    /// before the request plus the delay.
    earliest_ms: i64,
    /// `deliver_at` returned by ScheduleDelayed, if that was used.
    returned_ms: Option<i64>,
}

/// Checks each arrival against what was scheduled: right payload, not early, due
/// time as requested (exact for deliver_at, at least now+delay for delay).
#[track_caller]
fn check_due_times(arrivals: &[Arrival], expected: &HashMap<String, Expected>) {
    for a in arrivals {
        let id = a.id();
        let want = expected
            .get(&id)
            .unwrap_or_else(|| panic!("unexpected message {id}: {:?}", a.received));
        assert_eq!(a.message().payload, want.payload, "payload of {id}");
        a.assert_not_early();
        let due = a.deliver_at_ms();
        if let Some(requested) = want.requested_ms {
            assert_eq!(
                due, requested,
                "deliver_at of {id} (requested at ms precision)"
            );
        }
        assert!(
            due >= want.earliest_ms,
            "deliver_at of {id} is {} ms before the earliest possible due time",
            want.earliest_ms - due
        );
        if let Some(returned) = want.returned_ms {
            assert_eq!(
                due, returned,
                "deliver_at of {id} vs ScheduleDelayed's answer"
            );
        }
    }
}

/// CancelScheduled that must not fail; whether it cancelled.
async fn cancel(client: &mut Client, topic: &str, message_id: &str) -> bool {
    cancel_scheduled(client, topic, message_id)
        .await
        .unwrap_or_else(|s| panic!("cancel {message_id:?} on {topic}: {s:?}"))
}

/// RescheduleDelayed that must not fail; whether it rescheduled.
async fn rescheduled(client: &mut Client, topic: &str, message_id: &str, due: Due) -> bool {
    reschedule(client, topic, message_id, due)
        .await
        .unwrap_or_else(|s| panic!("reschedule {message_id:?} on {topic}: {s:?}"))
        .rescheduled
}

async fn schedule_raw(
    client: &mut Client,
    request: pb::ScheduleDelayedRequest,
) -> Result<pb::ScheduleDelayedResponse, Status> {
    client
        .schedule_delayed(request)
        .await
        .map(|r| r.into_inner())
}

/// A random due time `0..max_ms` ahead: half by `deliver_at` (at least 500 ms
/// ahead, so it is still in the future when the server sees it), half by `delay`.
/// Returns the due and the fields of `Expected` that follow from it.
fn random_due(max_ms: i64) -> (Due, Option<i64>, i64) {
    let now = now_ms();
    if rand::random::<bool>() {
        let at = now + rand::random_range(500..max_ms);
        (Due::At(at_ms(at)), Some(at), at)
    } else {
        let ahead = rand::random_range(0..max_ms);
        (
            Due::After(Duration::from_millis(ahead as u64)),
            None,
            now + ahead,
        )
    }
}

/// A requested time that had already passed when the server answered is
/// published at once; its delivered `deliver_at` is then only bounded below.
fn forget_if_past(want: &mut Expected, answered_ms: i64) {
    if want.requested_ms.is_some_and(|at| at <= answered_ms) {
        want.requested_ms = None;
        want.returned_ms = None;
    }
}

/// Promoted exactly at the due time (`--promote-ahead 0s`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_messages_are_never_delivered_before_due() {
    never_delivered_before_due(&["--promote-ahead", "0s"]).await;
}

/// With `--promote-ahead` (250 ms by default), messages reach the stream early
/// and the delivery loop holds them: they must still arrive exactly once and
/// never early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_promoted_ahead_are_still_never_delivered_before_due() {
    never_delivered_before_due(&["--promote-ahead", "700ms"]).await;
}

async fn never_delivered_before_due(server_args: &[&str]) {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), server_args).await;
    let mut client = server.client().await;
    let mut stream = subscribe(
        &mut client,
        TOPIC,
        SUB,
        Sub::deadline(NO_REDELIVERY).max_outstanding(1000),
    )
    .await;

    let mut expected: HashMap<String, Expected> = HashMap::new();
    // 150 through Publish, in batches of 50 with a mix of deliver_at and delay.
    for batch in 0..3 {
        let mut messages = Vec::new();
        let mut wants = Vec::new();
        for i in 0..50 {
            let payload = Bytes::from(format!("publish-{batch}-{i}"));
            let (due, requested_ms, earliest_ms) = random_due(3000);
            let mut m = scheduled_message(payload.clone(), due);
            m.attributes.insert("n".to_string(), i.to_string());
            messages.push(m);
            wants.push(Expected {
                payload,
                requested_ms,
                earliest_ms,
                returned_ms: None,
            });
        }
        let resp = publish_messages(&mut client, TOPIC, messages).await;
        assert!(
            resp.duplicates.iter().all(|d| !d),
            "no dedupe_id, no duplicates: {resp:?}"
        );
        for (id, want) in resp.message_ids.into_iter().zip(wants) {
            assert!(
                expected.insert(id.clone(), want).is_none(),
                "id {id} returned twice"
            );
        }
    }
    // 150 through ScheduleDelayed.
    for i in 0..150 {
        let payload = Bytes::from(format!("schedule-{i}"));
        let (due, requested_ms, earliest_ms) = random_due(3000);
        let resp = schedule(&mut client, TOPIC, message(payload.clone()), due).await;
        assert!(!resp.duplicate, "no dedupe_id, no duplicate: {resp:?}");
        let returned = ts_ms(resp.deliver_at.as_ref().expect("deliver_at in the answer"));
        if let Some(requested) = requested_ms {
            assert_eq!(
                returned, requested,
                "ScheduleDelayed answers the requested time"
            );
        }
        assert!(returned >= earliest_ms, "due {returned} < {earliest_ms}");
        let want = Expected {
            payload,
            requested_ms,
            earliest_ms,
            returned_ms: Some(returned),
        };
        assert!(
            expected.insert(resp.message_id.clone(), want).is_none(),
            "id {} returned twice",
            resp.message_id
        );
    }
    assert_eq!(expected.len(), 300);

    let arrivals = collect_timed(
        std::slice::from_mut(&mut stream),
        300,
        PATIENCE,
        Some(AckTo {
            client: &mut client,
            topic: TOPIC,
            subscription: SUB,
        }),
    )
    .await;
    check_due_times(&arrivals, &expected);
    assert_exactly_once("scheduled messages", &arrivals, expected.keys());
    assert!(arrivals.iter().all(|a| a.received.delivery_attempt == 1));
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_due_time_is_delivered_at_once() {
    let (_redis, _server, mut client) = redis_server_and_client().await;

    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let resp = schedule(&mut client, TOPIC, message("late"), Due::At(an_hour_ago)).await;
    let due = ts_ms(resp.deliver_at.as_ref().expect("deliver_at in the answer"));
    assert!(
        due <= now_ms(),
        "a past due time is not in the future: {resp:?}"
    );
    // Published at once: it is an ordinary stream entry, no longer cancellable.
    assert!(
        !cancel(&mut client, TOPIC, &resp.message_id).await,
        "a message published at once cannot be cancelled"
    );
    let batch = publish_messages(
        &mut client,
        TOPIC,
        vec![
            scheduled_message("also late", Due::At(an_hour_ago)),
            scheduled_message("no delay", Due::After(Duration::ZERO)),
        ],
    )
    .await;

    // An unscheduled message is due when it is published.
    let plain = publish(&mut client, TOPIC, ["now"]).await.remove(0);

    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::deadline(NO_REDELIVERY)).await;
    let got: Vec<_> = collect_timed(std::slice::from_mut(&mut stream), 4, PATIENCE, None).await;
    let mut want: Vec<String> = batch.message_ids.clone();
    want.push(resp.message_id.clone());
    want.push(plain.clone());
    assert_exactly_once("past-due messages", &got, &want);
    for a in &got {
        a.assert_not_early();
        assert_eq!(a.received.delivery_attempt, 1);
    }
    let plain = got.iter().find(|a| a.id() == plain).expect("plain message");
    assert_eq!(
        Some(plain.deliver_at_ms()),
        plain.message().publish_time.as_ref().map(ts_ms),
        "deliver_at of an unscheduled message is its publish time: {:?}",
        plain.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_before_due_is_never_delivered() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::deadline(NO_REDELIVERY)).await;

    let due = Due::in_ms(3000);
    let doomed = schedule(&mut client, TOPIC, message("doomed"), due).await;
    // Scheduled through Publish: cancellable by the id Publish returned.
    let doomed_too = publish_messages(
        &mut client,
        TOPIC,
        vec![scheduled_message("doomed too", due)],
    )
    .await
    .message_ids
    .remove(0);
    // Due later than the cancelled ones: once it arrived, they would have too.
    let witness = schedule(&mut client, TOPIC, message("witness"), Due::in_ms(4000)).await;

    assert!(cancel(&mut client, TOPIC, &doomed.message_id).await);
    assert!(cancel(&mut client, TOPIC, &doomed_too).await);
    assert!(
        !cancel(&mut client, TOPIC, &doomed.message_id).await,
        "cancelling twice"
    );
    assert!(!cancel(&mut client, TOPIC, "1-0").await, "unknown id");
    assert!(
        !cancel(&mut client, "no-such-topic", &witness.message_id).await,
        "an id of another topic"
    );
    assert!(
        !rescheduled(&mut client, TOPIC, &doomed.message_id, Due::in_ms(100)).await,
        "a cancelled message cannot be rescheduled"
    );

    let got = expect_messages(&mut stream, 1).await;
    assert_eq!(ids_of(&got), vec![witness.message_id.clone()]);
    assert_no_message_within(&mut stream, Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_reschedule_after_delivery_return_false() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::deadline(NO_REDELIVERY)).await;

    let resp = schedule(&mut client, TOPIC, message("soon"), Due::in_ms(300)).await;
    let got = expect_messages(&mut stream, 1).await;
    assert_eq!(ids_of(&got), vec![resp.message_id.clone()]);

    // Delivered but not acked yet: still too late to cancel or move.
    assert!(!cancel(&mut client, TOPIC, &resp.message_id).await);
    assert!(!rescheduled(&mut client, TOPIC, &resp.message_id, Due::in_ms(5000)).await);
    ack(&mut client, TOPIC, SUB, ack_ids_of(&got))
        .await
        .expect("ack");
    assert!(!cancel(&mut client, TOPIC, &resp.message_id).await);
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reschedule_moves_the_due_time_later_and_earlier() {
    let (_redis, _server, mut client) = redis_server_and_client().await;
    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::deadline(NO_REDELIVERY)).await;

    let later = schedule(&mut client, TOPIC, message("later"), Due::in_ms(2000)).await;
    let new_due_ms = now_ms() + 4000;
    let moved = reschedule(
        &mut client,
        TOPIC,
        &later.message_id,
        Due::At(at_ms(new_due_ms)),
    )
    .await
    .expect("reschedule later");
    assert!(moved.rescheduled, "{moved:?}");
    assert_eq!(moved.deliver_at.as_ref().map(ts_ms), Some(new_due_ms));

    let earlier = schedule(
        &mut client,
        TOPIC,
        message("earlier"),
        Due::in_ms(3_600_000),
    )
    .await;
    let before = now_ms();
    let pulled = reschedule(
        &mut client,
        TOPIC,
        &earlier.message_id,
        Due::After(Duration::from_millis(500)),
    )
    .await
    .expect("reschedule earlier");
    assert!(pulled.rescheduled, "{pulled:?}");
    let pulled_ms = ts_ms(pulled.deliver_at.as_ref().expect("new deliver_at"));
    assert!(
        pulled_ms >= before + 500,
        "due {pulled_ms} < {}",
        before + 500
    );

    assert!(
        !rescheduled(&mut client, TOPIC, "1-0", Due::in_ms(100)).await,
        "unknown id"
    );

    let got = collect_timed(std::slice::from_mut(&mut stream), 2, PATIENCE, None).await;
    let by_id: HashMap<String, &Arrival> = got.iter().map(|a| (a.id(), a)).collect();
    assert_exactly_once(
        "rescheduled messages",
        &got,
        &[later.message_id.clone(), earlier.message_id.clone()],
    );
    for a in &got {
        a.assert_not_early();
    }
    assert_eq!(by_id[&later.message_id].deliver_at_ms(), new_due_ms);
    assert_eq!(by_id[&earlier.message_id].deliver_at_ms(), pulled_ms);
    // The old due time left nothing behind.
    assert_no_message_within(&mut stream, Duration::from_secs(1)).await;
}

/// `n_servers` replicas on one Redis promote 3000 messages falling due within about
/// a second; two subscriptions, with a consumer on every replica, each get every
/// message exactly once.
async fn concurrent_promotion(n_servers: usize) {
    const N: usize = 3000;
    let redis = RedisServer::start();
    let mut servers = Vec::new();
    for _ in 0..n_servers {
        servers.push(TestServer::start(&redis.url(), &[]).await);
    }
    let mut clients = Vec::new();
    for s in &servers {
        clients.push(s.client().await);
    }
    let subs = ["first", "second"];
    let opts = Sub::deadline(NO_REDELIVERY).max_outstanding(N as u32);
    let mut streams: [Vec<_>; 2] = [Vec::new(), Vec::new()];
    for (k, sub) in subs.iter().enumerate() {
        for (i, client) in clients.iter_mut().enumerate() {
            let consumer = format!("{sub}-on-{i}");
            streams[k].push(subscribe(client, TOPIC, sub, opts.clone().consumer(&consumer)).await);
        }
    }

    // Everything falls due in [base, base + 1 s); the scheduling calls are spread
    // over the replicas, and a few go through ScheduleDelayed.
    let base = now_ms() + 2000;
    let mut expected: HashMap<String, Expected> = HashMap::new();
    let mut i = 0;
    let mut batch_no = 0;
    while i < N {
        let client = &mut clients[batch_no % n_servers];
        batch_no += 1;
        if batch_no % 5 == 0 {
            for _ in 0..20 {
                let at = base + rand::random_range(0..1000);
                let payload = Bytes::from(format!("m-{i}"));
                let resp =
                    schedule(client, TOPIC, message(payload.clone()), Due::At(at_ms(at))).await;
                let mut want = Expected {
                    payload,
                    requested_ms: Some(at),
                    earliest_ms: at,
                    returned_ms: Some(at),
                };
                forget_if_past(&mut want, now_ms());
                expected.insert(resp.message_id, want);
                i += 1;
            }
            continue;
        }
        let mut messages = Vec::new();
        let mut wants = Vec::new();
        for _ in 0..500.min(N - i) {
            let at = base + rand::random_range(0..1000);
            let payload = Bytes::from(format!("m-{i}"));
            messages.push(scheduled_message(payload.clone(), Due::At(at_ms(at))));
            wants.push(Expected {
                payload,
                requested_ms: Some(at),
                earliest_ms: at,
                returned_ms: None,
            });
            i += 1;
        }
        let resp = publish_messages(client, TOPIC, messages).await;
        let answered = now_ms();
        for want in &mut wants {
            forget_if_past(want, answered);
        }
        expected.extend(resp.message_ids.into_iter().zip(wants));
    }
    assert_eq!(expected.len(), N, "distinct ids");
    eprintln!(
        "scheduled {N} messages; the first falls due {} ms from now",
        base - now_ms()
    );

    let [mut first, mut second] = streams;
    let (got_first, got_second) = tokio::join!(
        collect_timed(&mut first, N, PATIENCE, None),
        collect_timed(&mut second, N, PATIENCE, None),
    );
    for (sub, got) in [(subs[0], &got_first), (subs[1], &got_second)] {
        check_due_times(got, &expected);
        let spread: Vec<usize> = (0..n_servers)
            .map(|s| got.iter().filter(|a| a.stream == s).count())
            .collect();
        eprintln!("subscription {sub}: deliveries per replica {spread:?}");
        assert_exactly_once(&format!("subscription {sub}"), got, expected.keys());
    }
    // Nothing more comes later either.
    let late = tokio::join!(
        collect_timed(&mut first, usize::MAX, Duration::from_secs(1), None),
        collect_timed(&mut second, usize::MAX, Duration::from_secs(1), None),
    );
    assert!(
        late.0.is_empty() && late.1.is_empty(),
        "duplicates after all were delivered: {:?} {:?}",
        late.0.iter().map(Arrival::id).collect::<Vec<_>>(),
        late.1.iter().map(Arrival::id).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_promote_without_duplicates_or_losses() {
    concurrent_promotion(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_promote_without_duplicates_or_losses() {
    concurrent_promotion(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_racing_promotion_cancels_or_delivers_exactly_once() {
    cancel_racing_promotion(&["--promote-ahead", "0s"]).await;
}

/// Promoted ahead, a message can no longer be cancelled shortly before it is
/// due; the outcome must still be one or the other, never both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_racing_promotion_ahead_cancels_or_delivers_exactly_once() {
    cancel_racing_promotion(&["--promote-ahead", "300ms"]).await;
}

async fn cancel_racing_promotion(server_args: &[&str]) {
    const N: usize = 500;
    let redis = RedisServer::start();
    let a = TestServer::start(&redis.url(), server_args).await;
    let b = TestServer::start(&redis.url(), server_args).await;
    let mut client_a = a.client().await;
    let mut client_b = b.client().await;
    let opts = Sub::deadline(NO_REDELIVERY).max_outstanding(N as u32);
    let mut streams = [
        subscribe(&mut client_a, TOPIC, SUB, opts.clone().consumer("on-a")).await,
        subscribe(&mut client_b, TOPIC, SUB, opts.consumer("on-b")).await,
    ];

    // Due times spread over half a second, so the cancels below land both
    // before and after promotion.
    let base = now_ms() + 1500;
    let messages: Vec<_> = (0..N)
        .map(|i| {
            let at = base + rand::random_range(0..500);
            scheduled_message(format!("c-{i}"), Due::At(at_ms(at)))
        })
        .collect();
    let ids = publish_messages(&mut client_a, TOPIC, messages)
        .await
        .message_ids;
    let all: HashSet<String> = ids.iter().cloned().collect();
    assert_eq!(all.len(), N);

    // Ten cancellers, through both replicas, each cancelling its share in random
    // order, starting just before the first due time.
    let start = at_ms(base - 50);
    if let Ok(wait) = start.duration_since(SystemTime::now()) {
        tokio::time::sleep(wait).await;
    }
    let mut tasks = Vec::new();
    for t in 0..10 {
        let mut client = if t % 2 == 0 {
            a.client().await
        } else {
            b.client().await
        };
        let mut share: Vec<String> = ids.iter().skip(t).step_by(10).cloned().collect();
        // Shuffle so cancels are not in due-time order.
        for k in (1..share.len()).rev() {
            share.swap(k, rand::random_range(0..=k));
        }
        tasks.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for id in share {
                let cancelled = cancel_scheduled(&mut client, TOPIC, &id)
                    .await
                    .unwrap_or_else(|s| panic!("cancel {id}: {s:?}"));
                outcomes.push((id, cancelled));
            }
            outcomes
        }));
    }
    let mut cancelled = HashSet::new();
    let mut not_cancelled = HashSet::new();
    for task in tasks {
        for (id, ok) in task.await.expect("canceller task") {
            if ok {
                cancelled.insert(id);
            } else {
                not_cancelled.insert(id);
            }
        }
    }
    eprintln!(
        "{} cancelled, {} too late to cancel",
        cancelled.len(),
        not_cancelled.len()
    );
    assert_eq!(cancelled.len() + not_cancelled.len(), N);

    // Wait for every message that was not cancelled, then a while longer for any
    // cancelled one that would (wrongly) still arrive.
    let mut got = collect_until(&mut streams, PATIENCE, None, |got| {
        let seen: HashSet<String> = got.iter().map(Arrival::id).collect();
        not_cancelled.is_subset(&seen)
    })
    .await;
    got.extend(collect_timed(&mut streams, usize::MAX, Duration::from_secs(2), None).await);
    for a in &got {
        a.assert_not_early();
    }
    let wrongly: Vec<_> = got
        .iter()
        .map(Arrival::id)
        .filter(|id| cancelled.contains(id))
        .collect();
    assert!(
        wrongly.is_empty(),
        "{} messages delivered although cancel answered true: {:?}",
        wrongly.len(),
        wrongly.iter().take(10).collect::<Vec<_>>()
    );
    assert_exactly_once("messages cancel answered false for", &got, &not_cancelled);
}

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

/// Asserts an INVALID_ARGUMENT whose message names one of `fields`.
#[track_caller]
fn assert_invalid_naming_any<T: std::fmt::Debug>(result: Result<T, Status>, fields: &[&str]) {
    match result {
        Ok(v) => panic!("expected INVALID_ARGUMENT naming one of {fields:?}, got Ok({v:?})"),
        Err(s) => {
            assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
            assert!(
                fields.iter().any(|f| s.message().contains(f)),
                "status message should name one of {fields:?}: {:?}",
                s.message()
            );
        }
    }
}

fn negative(seconds: i64) -> prost_types::Duration {
    prost_types::Duration { seconds, nanos: 0 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_schedules_are_rejected_naming_the_field() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &["--max-delay", "1h"]).await;
    let mut client = server.client().await;
    let soon = pb_timestamp(SystemTime::now() + Duration::from_secs(60));

    // Publish: both deliver_at and delay on one message (the second of the batch).
    let both = pb::PublishMessage {
        payload: Bytes::from_static(b"x"),
        deliver_at: Some(soon),
        delay: Some(pb_duration(Duration::from_secs(60))),
        ..Default::default()
    };
    assert_invalid_naming_any(
        try_publish_messages(&mut client, TOPIC, vec![message("fine"), both]).await,
        &["messages[1].deliver_at", "messages[1].delay"],
    );
    // Publish: a negative delay, and one beyond --max-delay.
    let mut m = message("x");
    m.delay = Some(negative(-1));
    assert_status(
        try_publish_messages(&mut client, TOPIC, vec![m]).await,
        Code::InvalidArgument,
        "messages[0].delay",
    );
    assert_status(
        try_publish_messages(
            &mut client,
            TOPIC,
            vec![scheduled_message(
                "x",
                Due::After(Duration::from_secs(7200)),
            )],
        )
        .await,
        Code::InvalidArgument,
        "messages[0].delay",
    );

    // ScheduleDelayed: neither, both, negative, too far.
    let request = |deliver_at, delay| pb::ScheduleDelayedRequest {
        topic: TOPIC.to_string(),
        message: Some(message("x")),
        deliver_at,
        delay,
        ..Default::default()
    };
    assert_status(
        schedule_raw(&mut client, request(None, None)).await,
        Code::InvalidArgument,
        "deliver_at",
    );
    assert_invalid_naming_any(
        schedule_raw(
            &mut client,
            request(Some(soon), Some(pb_duration(Duration::from_secs(1)))),
        )
        .await,
        &["deliver_at", "delay"],
    );
    assert_status(
        schedule_raw(&mut client, request(None, Some(negative(-5)))).await,
        Code::InvalidArgument,
        "delay",
    );
    assert_status(
        schedule_raw(
            &mut client,
            request(None, Some(pb_duration(Duration::from_secs(7200)))),
        )
        .await,
        Code::InvalidArgument,
        "delay",
    );
    // ScheduleDelayed: the message carrying its own schedule.
    let own = pb::ScheduleDelayedRequest {
        message: Some(scheduled_message("x", Due::After(Duration::from_secs(1)))),
        ..request(None, Some(pb_duration(Duration::from_secs(1))))
    };
    assert_invalid_naming_any(schedule_raw(&mut client, own).await, &["delay"]);

    // CancelScheduled and RescheduleDelayed need an id; Reschedule needs a time.
    assert_status(
        cancel_scheduled(&mut client, TOPIC, "").await,
        Code::InvalidArgument,
        "message_id",
    );
    assert_status(
        reschedule(&mut client, TOPIC, "", Due::in_ms(1000)).await,
        Code::InvalidArgument,
        "message_id",
    );
    let scheduled = schedule(&mut client, TOPIC, message("x"), Due::in_ms(600_000)).await;
    let neither = client
        .reschedule_delayed(pb::RescheduleDelayedRequest {
            topic: TOPIC.to_string(),
            message_id: scheduled.message_id.clone(),
            ..Default::default()
        })
        .await;
    assert_invalid_naming_any(neither, &["deliver_at", "delay"]);
    assert_status(
        client
            .reschedule_delayed(pb::RescheduleDelayedRequest {
                topic: TOPIC.to_string(),
                message_id: scheduled.message_id.clone(),
                delay: Some(negative(-1)),
                ..Default::default()
            })
            .await,
        Code::InvalidArgument,
        "delay",
    );

    // Nothing above changed the scheduled message, and the server still works.
    assert!(cancel(&mut client, TOPIC, &scheduled.message_id).await);
    server.wait_serving().await;
}
