//! Limits on how fast and how wide a subscription is consumed
//! (`SubscriptionSettings.max_deliveries_per_second`, `burst`,
//! `max_outstanding`): kept in Redis by the fetch script, so they hold across
//! all streams on all replicas, and UpdateSubscription changes them while the
//! streams run.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use redq::pb;
use tonic::Code;

const TOPIC: &str = "partner-calls";
const SUB: &str = "callers";

async fn replicas(redis: &RedisServer, n: usize) -> Vec<TestServer> {
    let mut servers = Vec::new();
    for _ in 0..n {
        servers.push(TestServer::start(&redis.url(), &[]).await);
    }
    servers
}

async fn create(admin: &mut Admin, settings: pb::SubscriptionSettings) {
    admin
        .create_subscription(pb::CreateSubscriptionRequest {
            topic: TOPIC.into(),
            name: SUB.into(),
            settings: Some(pb::SubscriptionSettings {
                start: pb::StartPosition::Earliest.into(),
                ..settings
            }),
        })
        .await
        .expect("CreateSubscription");
}

async fn update(admin: &mut Admin, settings: pb::SubscriptionSettings) -> pb::Subscription {
    admin
        .update_subscription(pb::UpdateSubscriptionRequest {
            topic: TOPIC.into(),
            name: SUB.into(),
            settings: Some(settings),
        })
        .await
        .expect("UpdateSubscription")
        .into_inner()
}

async fn stats(admin: &mut Admin) -> pb::SubscriptionStats {
    admin
        .get_subscription(pb::GetSubscriptionRequest {
            topic: TOPIC.into(),
            name: SUB.into(),
        })
        .await
        .expect("GetSubscription")
        .into_inner()
        .stats
        .expect("stats")
}

/// Publishes `n` messages in batches.
async fn backlog(client: &mut Client, n: usize) {
    for chunk in payloads("m", n).chunks(500) {
        publish(client, TOPIC, chunk.to_vec()).await;
    }
}

/// What the consuming streams saw: deliveries with their arrival time, and
/// the most messages the clients held at once.
#[derive(Default)]
struct Seen {
    deliveries: std::sync::Mutex<Vec<Instant>>,
    held: AtomicI64,
    most_held: AtomicI64,
    acked: AtomicU64,
    /// Why a stream stopped, if one did.
    failure: std::sync::Mutex<Option<String>>,
}

impl Seen {
    fn acked(&self) -> u64 {
        if let Some(failure) = self.failure.lock().unwrap().as_ref() {
            panic!("{failure}");
        }
        self.acked.load(Ordering::SeqCst)
    }
}

/// Opens a stream on `server` that holds each message `hold`, then acks it.
/// A message counts as held from its arrival until just before its ack is
/// sent, so the count is never above what the server has leased.
fn consume(
    mut client: Client,
    per_stream: u32,
    hold: Duration,
    seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
) {
    tokio::spawn(async move {
        let mut stream = subscribe(
            &mut client,
            TOPIC,
            SUB,
            Sub::default().max_outstanding(per_stream),
        )
        .await;
        while !stop.load(Ordering::Relaxed) {
            let response =
                match tokio::time::timeout(Duration::from_millis(200), stream.message()).await {
                    Err(_quiet) => continue,
                    Ok(Ok(Some(response))) => response,
                    Ok(ended) => {
                        *seen.failure.lock().unwrap() = Some(format!("a stream ended: {ended:?}"));
                        return;
                    }
                };
            let now = Instant::now();
            let n = response.messages.len() as i64;
            seen.deliveries
                .lock()
                .unwrap()
                .extend(std::iter::repeat_n(now, n as usize));
            let held = seen.held.fetch_add(n, Ordering::SeqCst) + n;
            seen.most_held.fetch_max(held, Ordering::SeqCst);
            for message in response.messages {
                let mut client = client.clone();
                let seen = seen.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(hold).await;
                    seen.held.fetch_sub(1, Ordering::SeqCst);
                    ack(&mut client, TOPIC, SUB, vec![message.ack_id])
                        .await
                        .expect("ack");
                    seen.acked.fetch_add(1, Ordering::SeqCst);
                });
            }
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delivery_rate_holds_across_replicas_and_changes_while_streams_run() {
    let redis = RedisServer::start();
    let servers = replicas(&redis, 3).await;
    let mut admin = servers[0].admin().await;
    create(
        &mut admin,
        pb::SubscriptionSettings {
            max_deliveries_per_second: Some(50.0),
            ..Default::default()
        },
    )
    .await;
    let mut client = servers[0].client().await;
    backlog(&mut client, 1500).await;

    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    for server in &servers {
        for _ in 0..5 {
            consume(
                server.client().await,
                100,
                Duration::ZERO,
                seen.clone(),
                stop.clone(),
            );
        }
    }
    // The bucket starts full (50, the burst by default), then refills at 50/s.
    eventually("the first deliveries", || {
        let seen = seen.clone();
        async move { !seen.deliveries.lock().unwrap().is_empty() }
    })
    .await;
    let start = seen.deliveries.lock().unwrap()[0];
    tokio::time::sleep_until((start + Duration::from_secs(12)).into()).await;
    let in_window = |from: u64, to: u64| {
        let (from, to) = (
            start + Duration::from_secs(from),
            start + Duration::from_secs(to),
        );
        seen.deliveries
            .lock()
            .unwrap()
            .iter()
            .filter(|&&t| t >= from && t < to)
            .count()
    };
    seen.acked(); // no stream failed
    let burst = in_window(0, 1);
    let steady = in_window(1, 11);
    assert!(
        burst <= 50 + 50 + 5,
        "{burst} deliveries in the first second"
    );
    assert!(
        (450..=550).contains(&steady),
        "{steady} deliveries in 10 s at 50/s across 15 streams on 3 replicas"
    );
    assert!(
        stats(&mut admin).await.rate_limited,
        "the stats say the bucket holds back"
    );

    // Lifted while the streams run: the rest come at once.
    let updated = update(
        &mut admin,
        pb::SubscriptionSettings {
            max_deliveries_per_second: Some(0.0),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        updated.settings.unwrap().max_deliveries_per_second,
        Some(0.0)
    );
    eventually("every message acked once the limit is lifted", || {
        let seen = seen.clone();
        async move { seen.acked() >= 1500 }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    assert_eq!(seen.deliveries.lock().unwrap().len(), 1500, "no redelivery");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_outstanding_holds_across_replicas_and_changes_while_streams_run() {
    let redis = RedisServer::start();
    let servers = replicas(&redis, 3).await;
    let mut admin = servers[0].admin().await;
    create(
        &mut admin,
        pb::SubscriptionSettings {
            max_outstanding: Some(7),
            ..Default::default()
        },
    )
    .await;
    let mut client = servers[0].client().await;
    backlog(&mut client, 300).await;

    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    for server in &servers {
        for _ in 0..3 {
            consume(
                server.client().await,
                5,
                Duration::from_millis(50),
                seen.clone(),
                stop.clone(),
            );
        }
    }
    // Sampled from the stats while the clients count what they hold.
    let mut saw_cap = false;
    let deadline = Instant::now() + EVENTUALLY;
    while seen.acked() < 200 {
        assert!(
            Instant::now() < deadline,
            "{} of 200 acked within {EVENTUALLY:?}",
            seen.acked()
        );
        let stats = stats(&mut admin).await;
        assert!(stats.pending <= 7, "{} leased at once", stats.pending);
        saw_cap |= stats.at_max_outstanding;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let most = seen.most_held.load(Ordering::SeqCst);
    assert!(most <= 7, "the clients held {most} at once");
    assert!(
        most >= 5,
        "the cap, not the streams, limits: {most} at most"
    );
    assert!(saw_cap, "the stats said at_max_outstanding");

    // Raised while the streams run: 9 streams × 5 may now be held.
    update(
        &mut admin,
        pb::SubscriptionSettings {
            max_outstanding: Some(0),
            ..Default::default()
        },
    )
    .await;
    eventually("every message acked", || {
        let seen = seen.clone();
        async move { seen.acked() >= 300 }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    assert!(
        seen.most_held.load(Ordering::SeqCst) > 7,
        "more than the old cap held once it was lifted"
    );
}

#[tokio::test]
async fn bad_limits_are_refused_naming_the_field() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut admin = server.admin().await;
    for rate in [-1.0, f64::NAN, f64::INFINITY] {
        let refused = admin
            .create_subscription(pb::CreateSubscriptionRequest {
                topic: TOPIC.into(),
                name: SUB.into(),
                settings: Some(pb::SubscriptionSettings {
                    max_deliveries_per_second: Some(rate),
                    ..Default::default()
                }),
            })
            .await;
        assert_status(
            refused,
            Code::InvalidArgument,
            "settings.max_deliveries_per_second",
        );
    }
}
