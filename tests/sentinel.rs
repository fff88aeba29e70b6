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
