//! `/metrics`: after a known workload through gRPC, the scraped counters,
//! gauges and histograms say exactly what happened; topics beyond
//! `--metrics-max-topics` share the label `_other`.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::metrics::{Scrape, scrape};
use common::*;

const TOPIC: &str = "orders";

/// Scrapes until `ok` holds (panics after `EVENTUALLY`).
async fn scrape_until(addr: SocketAddr, ok: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let scrape = scrape(addr).await;
        if ok(&scrape) {
            return scrape;
        }
        assert!(
            Instant::now() < deadline,
            "condition not met within {EVENTUALLY:?}:\n{}",
            scrape.text
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_workload_shows_in_counters_gauges_and_histograms() {
    let (_redis, server, mut client) = redis_server_and_client().await;

    // 10 now, 2 due soon, 1 deduplicated (published once) and 3 due in an hour.
    publish(&mut client, TOPIC, payloads("now", 10)).await;
    let soon = (0..2)
        .map(|i| scheduled_message(format!("soon-{i}"), Due::After(ms(300))))
        .collect();
    publish_messages(&mut client, TOPIC, soon).await;
    for _ in 0..2 {
        publish_messages(&mut client, TOPIC, vec![deduped_message("once", "d-1")]).await;
    }
    for i in 0..3 {
        let message = common::message(format!("later-{i}"));
        schedule(
            &mut client,
            TOPIC,
            message,
            Due::After(Duration::from_secs(3600)),
        )
        .await;
    }

    // billing: 13 delivered; 8 acked; 3 nacked and redelivered, of which one
    // acked and one nacked again on its last attempt (dead-lettered).
    let sub = Sub::deadline(Duration::from_secs(60))
        .retry(ms(50), ms(50))
        .max_attempts(2);
    let mut billing = subscribe(&mut client, TOPIC, "billing", sub).await;
    let first = expect_messages(&mut billing, 13).await;
    assert_eq!(first.len(), 13);
    assert!(first.iter().all(|m| m.delivery_attempt == 1));
    let ack_ids = ack_ids_of(&first);
    ack(&mut client, TOPIC, "billing", ack_ids[..7].to_vec())
        .await
        .expect("ack");
    nack(&mut client, TOPIC, "billing", ack_ids[7..10].to_vec())
        .await
        .expect("nack");
    let again = expect_messages(&mut billing, 3).await;
    assert_eq!(again.len(), 3);
    assert!(again.iter().all(|m| m.delivery_attempt == 2));
    let again_ids = ack_ids_of(&again);
    ack(&mut client, TOPIC, "billing", vec![again_ids[0].clone()])
        .await
        .expect("ack");
    nack(&mut client, TOPIC, "billing", vec![again_ids[1].clone()])
        .await
        .expect("nack");
    // Acking twice counts once.
    ack(&mut client, TOPIC, "billing", vec![again_ids[0].clone()])
        .await
        .expect("ack again");

    // audit: holds 5 of the 13 entries, 8 not yet delivered.
    let mut audit = subscribe(
        &mut client,
        TOPIC,
        "audit",
        Sub::default().max_outstanding(5),
    )
    .await;
    assert_eq!(expect_messages(&mut audit, 5).await.len(), 5);

    let m = scrape(server.metrics_addr).await;
    let topic = [("topic", TOPIC)];
    let billing = [("topic", TOPIC), ("subscription", "billing")];
    let audit = [("topic", TOPIC), ("subscription", "audit")];

    assert_eq!(m.value("redq_messages_published_total", &topic), 16.0);
    assert_eq!(m.value("redq_messages_scheduled_total", &topic), 5.0);
    assert_eq!(m.value("redq_messages_duplicate_total", &topic), 1.0);
    assert_eq!(m.value("redq_messages_delivered_total", &billing), 16.0);
    assert_eq!(m.value("redq_messages_redelivered_total", &billing), 3.0);
    assert_eq!(m.value("redq_messages_acked_total", &billing), 8.0);
    assert_eq!(m.value("redq_messages_nacked_total", &billing), 4.0);
    assert_eq!(m.value("redq_messages_dead_lettered_total", &billing), 1.0);
    assert_eq!(m.value("redq_messages_delivered_total", &audit), 5.0);
    assert_eq!(m.value("redq_messages_redelivered_total", &audit), 0.0);

    assert_eq!(m.value("redq_topic_stream_length", &topic), 13.0);
    assert_eq!(m.value("redq_topic_scheduled", &topic), 3.0);
    let kind = [topic[0], ("kind", "STREAM")];
    assert_eq!(m.value("redq_topic_kind", &kind), 1.0);
    // Each message of billing is acked, dead-lettered or still pending.
    let pending = m.value("redq_subscription_pending", &billing);
    assert_eq!(pending, 4.0);
    assert_eq!(
        pending,
        m.value("redq_messages_delivered_total", &billing)
            - m.value("redq_messages_redelivered_total", &billing)
            - m.value("redq_messages_acked_total", &billing)
            - m.value("redq_messages_dead_lettered_total", &billing)
    );
    assert_eq!(m.value("redq_subscription_dead_letters", &billing), 1.0);
    assert_eq!(m.value("redq_subscription_lag", &billing), 0.0);
    assert_eq!(m.value("redq_subscription_pending", &audit), 5.0);
    assert_eq!(m.value("redq_subscription_lag", &audit), 8.0);
    assert_eq!(m.value("redq_subscription_dead_letters", &audit), 0.0);
    let age = m.value("redq_subscription_oldest_unacked_age_seconds", &billing);
    assert!((0.0..3600.0).contains(&age), "{age}");

    // Lateness: the first deliveries of the 2 messages due soon, and only those.
    assert_eq!(m.value("redq_delivery_lateness_seconds_count", &[]), 2.0);
    assert_eq!(
        m.value("redq_publish_duration_seconds_count", &[("rpc", "Publish")]),
        4.0
    );
    assert_eq!(
        m.value(
            "redq_publish_duration_seconds_count",
            &[("rpc", "ScheduleDelayed")]
        ),
        3.0
    );
    assert_eq!(
        m.value(
            "redq_publish_duration_seconds_bucket",
            &[("rpc", "ScheduleDelayed"), ("le", "+Inf")]
        ),
        3.0
    );

    assert_eq!(
        m.value("redq_build_info", &[("version", env!("CARGO_PKG_VERSION"))]),
        1.0
    );
    let connections = m.value("redq_redis_pool_connections", &[]);
    let idle = m.value("redq_redis_pool_idle_connections", &[]);
    assert!(
        connections >= 1.0 && idle <= connections,
        "{connections} {idle}"
    );
    assert_eq!(m.value("redq_metrics_scrape_failures_total", &[]), 0.0);
    assert!(!m.has_label("topic", "_other"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_runs_out_on_the_last_attempt_counts_as_dead_lettered() {
    let (_redis, server, mut client) = redis_server_and_client().await;

    publish(&mut client, TOPIC, payloads("m", 2)).await;
    let sub = Sub::deadline(ms(500)).max_attempts(1);
    let mut stream = subscribe(&mut client, TOPIC, "slow", sub).await;
    assert_eq!(expect_messages(&mut stream, 2).await.len(), 2);

    let slow = [("topic", TOPIC), ("subscription", "slow")];
    let m = scrape_until(server.metrics_addr, |m| {
        m.get("redq_messages_dead_lettered_total", &slow) == Some(2.0)
    })
    .await;
    assert_eq!(m.value("redq_subscription_dead_letters", &slow), 2.0);
    assert_eq!(m.value("redq_subscription_pending", &slow), 0.0);
    // Nothing was nacked, so no series.
    assert_eq!(m.get("redq_messages_nacked_total", &slow), None);
    assert_eq!(
        m.value("redq_subscription_oldest_unacked_age_seconds", &slow),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_beyond_the_label_budget_share_the_other_label() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &["--metrics-max-topics", "2"]).await;
    let mut client = server.client().await;

    for (topic, n) in [("t1", 1), ("t2", 2), ("t3", 3), ("t4", 4)] {
        publish(&mut client, topic, payloads(topic, n)).await;
    }
    let mut stream = subscribe(&mut client, "t3", "s", Sub::default()).await;
    assert_eq!(expect_messages(&mut stream, 3).await.len(), 3);

    let m = scrape(server.metrics_addr).await;
    let published = "redq_messages_published_total";
    assert_eq!(m.value(published, &[("topic", "t1")]), 1.0);
    assert_eq!(m.value(published, &[("topic", "t2")]), 2.0);
    assert_eq!(m.value(published, &[("topic", "_other")]), 7.0);
    let other = [("topic", "_other"), ("subscription", "_other")];
    assert_eq!(m.value("redq_messages_delivered_total", &other), 3.0);
    assert!(!m.has_label("topic", "t3") && !m.has_label("topic", "t4"));
    assert!(!m.has_label("subscription", "s"));
    // Gauges are read only for the labelled topics.
    assert_eq!(m.value("redq_topic_stream_length", &[("topic", "t2")]), 2.0);
    assert_eq!(
        m.get("redq_topic_stream_length", &[("topic", "_other")]),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_while_redis_is_down() {
    let mut redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut client = server.client().await;
    publish(&mut client, TOPIC, payloads("m", 3)).await;
    let m = scrape(server.metrics_addr).await;
    assert_eq!(
        m.value("redq_topic_stream_length", &[("topic", TOPIC)]),
        3.0
    );

    redis.kill();
    let m = scrape(server.metrics_addr).await;
    // Counters survive; the gauges Redis could not give are left out.
    let topic = [("topic", TOPIC)];
    assert_eq!(m.value("redq_messages_published_total", &topic), 3.0);
    assert_eq!(m.get("redq_topic_stream_length", &topic), None);
    assert_eq!(m.value("redq_metrics_scrape_failures_total", &[]), 1.0);
    wait_http_status(server.metrics_addr, "/readyz", 503).await;
}
