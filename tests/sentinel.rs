//! redq behind Redis Sentinel (1 master, 1 replica, 3 Sentinels): calls and
//! streams follow a `SENTINEL FAILOVER` under load, and with `--durability
//! replicated` nothing acknowledged is lost.

#![allow(clippy::needless_update)]
// The tests run on two runtime threads: the harness waits for the cluster by
// polling it (blocking), and the load must go on meanwhile.

mod common;

use std::time::Duration;

use common::load::Load;
use common::sentinel::SentinelSetup;
use common::sockets::assert_nagle_is_off;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_under_load_loses_nothing_acknowledged() {
    let sentinels = SentinelSetup::start();
    let server = TestServer::start(
        &sentinels.url(),
        // After a failover WAIT 1 succeeds only once Sentinel has made the old
        // master a replica of the new one, some seconds later.
        &["--durability", "replicated", "--replica-wait-timeout", "2s"],
    )
    .await;
    server.wait_serving().await;
    let topics = vec!["orders".to_owned(), "billing".to_owned()];
    let load = Load::start(&server, &topics).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = sentinels.master();
    sentinels.failover();
    assert_ne!(sentinels.master(), before);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ((published, failed, lost, duplicates), gap) = load.finish_with_gap().await;
    println!(
        "sentinel failover (--durability replicated): longest wait between acknowledged publishes {gap:?}; \
         {published} publishes acknowledged, {failed} failed (retryable), {lost} lost, \
         {duplicates} deliveries beyond the first"
    );
    assert!(published > 0);
    assert!(
        gap < Duration::from_secs(30),
        "publishing did not resume: {gap:?}"
    );
    assert_eq!(
        lost, 0,
        "acknowledged publishes lost in a Sentinel failover"
    );
    // The server followed the Sentinels' announcement, not only its errors.
    assert!(
        server.log().contains("sentinel: the master moved"),
        "no +switch-master seen:\n{}",
        server.log()
    );
    let ports: Vec<u16> = sentinels
        .nodes
        .iter()
        .chain(&sentinels.sentinels)
        .copied()
        .collect();
    assert_nagle_is_off(&server, &ports);
}

/// A LIST topic behind Sentinel: its blocking move waits on the master and
/// follows a failover, and an open stream gets what is pushed afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_topics_blocking_move_follows_a_sentinel_failover() {
    let sentinels = SentinelSetup::start();
    let server = TestServer::start(&sentinels.url(), &[]).await;
    server.wait_serving().await;
    let mut client = server.client().await;
    let mut admin = server.admin().await;
    admin
        .create_topic(redq::pb::CreateTopicRequest {
            name: "jobs".into(),
            settings: Some(redq::pb::TopicSettings {
                kind: redq::pb::TopicKind::List.into(),
                list_key: "queue:jobs".into(),
                ..Default::default()
            }),
        })
        .await
        .expect("CreateTopic LIST");
    let mut stream = subscribe(&mut client, "jobs", "workers", Sub::default()).await;
    let lpush = |value: &str| {
        common::cluster::cli(sentinels.master(), &["LPUSH", "queue:jobs", value]);
    };
    lpush("before");
    let got = expect_messages(&mut stream, 1).await;
    ack(&mut client, "jobs", "workers", ack_ids_of(&got))
        .await
        .unwrap();
    sentinels.failover();
    lpush("after");
    let got = expect_messages(&mut stream, 1).await;
    let payload = &got[0].message.as_ref().expect("a message").payload;
    assert_eq!(&payload[..], b"after");
    // Idle again, the topic waits on the new master.
    let blocked = || {
        common::cluster::cli(sentinels.master(), &["INFO", "clients"])
            .lines()
            .find_map(|line| line.strip_prefix("blocked_clients:"))
            .map_or(0, |n| n.trim().parse::<u32>().unwrap_or(0))
    };
    let deadline = std::time::Instant::now() + EVENTUALLY;
    while blocked() < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "no blocking move on the new master"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
