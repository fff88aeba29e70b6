//! `/metrics`: after a known workload through gRPC, the scraped counters,
//! gauges and histograms say exactly what happened; topics beyond
//! `--metrics-max-topics` share the label `_other`.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;

const TOPIC: &str = "orders";

/// One sample of the text exposition: `name{labels} value`.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed scrape.
#[derive(Debug)]
struct Scrape {
    text: String,
    samples: Vec<Sample>,
}

impl Scrape {
    /// The value of the sample with exactly these labels.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    /// Like `get`, but the sample must be there.
    #[track_caller]
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no {name}{labels:?} in\n{}", self.text))
    }

    /// Whether any sample carries `label="value"`.
    fn has_label(&self, label: &str, value: &str) -> bool {
        self.samples
            .iter()
            .any(|s| s.labels.get(label).is_some_and(|v| v == value))
    }
}

fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("no value in {line:?}"));
            let (name, labels) = match series.split_once('{') {
                None => (series, ""),
                Some((name, rest)) => (name, rest.strip_suffix('}').expect("closing brace")),
            };
            let labels = labels
                .split("\",")
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
                    (k.to_string(), v.trim_end_matches('"').to_string())
                })
                .collect();
            Sample {
                name: name.to_string(),
                labels,
                value: value
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {line:?}")),
            }
        })
        .collect()
}

/// `GET /metrics` over HTTP/1.0; checks the status and content type.
async fn scrape(addr: SocketAddr) -> Scrape {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        conn.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut response = Vec::new();
        conn.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .expect("GET /metrics timed out")
        .expect("GET /metrics");
    let response = String::from_utf8(response).expect("UTF-8 response");
    let (head, body) = response.split_once("\r\n\r\n").expect("HTTP head");
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    Scrape {
        samples: parse(body),
        text: body.to_string(),
    }
}

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
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut client = server.client().await;

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
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut client = server.client().await;

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

/// Fetches the waiting streams got from others' calls (`by` publish or ack).
async fn fetches_carried(addr: SocketAddr, by: &str) -> f64 {
    scrape(addr)
        .await
        .get("redq_fetches_carried_total", &[("by", by)])
        .unwrap_or(0.0)
}

/// A stream with room waits with an offer: each message published to it
/// comes with the fetch its publish carried, and the watcher's turn for the
/// same entry is skipped, so each message costs one fetch, not two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_stream_gets_each_message_by_the_fetch_its_publish_carried() {
    const ROUNDS: u64 = 20;
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut client = server.client().await;
    let sub = Sub::deadline(Duration::from_secs(60));
    let mut stream = subscribe(&mut client, TOPIC, "s", sub).await;
    // The stream's first fetches: on opening, and on the watcher's start.
    tokio::time::sleep(ms(500)).await;
    let fetches_before = redis.calls_of("xreadgroup");
    let carried_before = fetches_carried(server.metrics_addr, "publish").await;
    for round in 0..ROUNDS {
        // Time for the stream to leave its offer after the last delivery.
        tokio::time::sleep(ms(20)).await;
        publish(&mut client, TOPIC, [format!("m{round}")]).await;
        let got = expect_messages(&mut stream, 1).await;
        ack(&mut client, TOPIC, "s", ack_ids_of(&got))
            .await
            .expect("ack");
    }
    let fetches = redis.calls_of("xreadgroup") - fetches_before;
    let carried = fetches_carried(server.metrics_addr, "publish").await - carried_before;
    println!("{ROUNDS} messages: {fetches} fetches, {carried} carried by their publish");
    assert!(
        carried >= (ROUNDS - 2) as f64,
        "{carried} of {ROUNDS} carried"
    );
    assert!(
        fetches <= ROUNDS + 2,
        "{fetches} fetches for {ROUNDS} messages"
    );
}

/// A full stream leaves its offer for the ack that frees its room: a backlog
/// taken one message at a time costs one fetch per message (the stream does
/// not fetch again when it is full, nor when the ack's wake-up comes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_stream_takes_the_room_an_ack_frees_by_the_fetch_the_ack_carried() {
    const BACKLOG: u64 = 20;
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut client = server.client().await;
    publish(&mut client, TOPIC, payloads("b", BACKLOG as usize)).await;
    let sub = Sub::deadline(Duration::from_secs(60)).max_outstanding(1);
    let mut stream = subscribe(&mut client, TOPIC, "s", sub).await;
    let mut held = expect_messages(&mut stream, 1).await;
    let fetches_before = redis.calls_of("xreadgroup");
    let carried_before = fetches_carried(server.metrics_addr, "ack").await;
    let mut payloads = vec![held[0].message.clone().expect("a message").payload];
    for _ in 1..BACKLOG {
        tokio::time::sleep(ms(20)).await;
        ack(&mut client, TOPIC, "s", ack_ids_of(&held))
            .await
            .expect("ack");
        held = expect_messages(&mut stream, 1).await;
        payloads.push(held[0].message.clone().expect("a message").payload);
    }
    let fetches = redis.calls_of("xreadgroup") - fetches_before;
    let carried = fetches_carried(server.metrics_addr, "ack").await - carried_before;
    println!(
        "{} messages after the first: {fetches} fetches, {carried} carried by acks",
        BACKLOG - 1
    );
    let want: Vec<_> = (0..BACKLOG).map(|i| format!("b-{i}")).collect();
    assert_eq!(payloads, want, "the backlog in order, each once");
    assert!(
        carried >= (BACKLOG - 3) as f64,
        "{carried} of {} carried",
        BACKLOG - 1
    );
    assert!(
        fetches <= BACKLOG + 1,
        "{fetches} fetches for {} messages",
        BACKLOG - 1
    );
}
