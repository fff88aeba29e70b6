//! redq's connections to Redis over TCP turn Nagle's algorithm off (redis-rs
//! leaves it on): a command written while another is unanswered on a
//! multiplexed connection leaves at once, not after the other's ACK. The
//! cluster and Sentinel suites check their connections the same way.

mod common;

use common::sockets::assert_nagle_is_off;
use common::*;

#[tokio::test]
async fn every_connection_to_a_redis_over_tcp_has_nagle_off() {
    let (redis, port) =
        RedisServer::start_with_port(|port| vec!["--port".into(), port.to_string()]);
    let server = TestServer::start(&format!("redis://127.0.0.1:{port}"), &[]).await;
    server.wait_serving().await;
    // A publish, its delivery and the ack: the workers' connections, the
    // pool's and the hints' are all open then.
    let mut client = server.client().await;
    let mut stream = subscribe(&mut client, "orders", "billing", Sub::default()).await;
    publish(&mut client, "orders", ["a"]).await;
    let got = expect_messages(&mut stream, 1).await;
    let ack_ids = got.iter().map(|m| m.ack_id.clone()).collect();
    ack(&mut client, "orders", "billing", ack_ids)
        .await
        .unwrap();
    assert_nagle_is_off(&server, &[port]);
    drop(redis);
}
