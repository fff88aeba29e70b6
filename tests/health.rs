//! Health: gRPC health and `/readyz` follow Redis availability (down, back, not
//! yet started), `/healthz` is always up, RPCs fail with UNAVAILABLE while Redis
//! is gone.

#![allow(clippy::needless_update)]

mod common;

use common::*;
use redq::pb;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

const TOPIC: &str = "pings";

/// Publishes one message, bounded so a server stuck on Redis fails instead of hanging.
async fn try_publish(client: &mut Client) -> Result<Vec<String>, tonic::Status> {
    let request = pb::PublishRequest {
        topic: TOPIC.to_string(),
        messages: vec![message("ping")],
        ..Default::default()
    };
    match tokio::time::timeout(EVENTUALLY, client.publish(request)).await {
        Ok(result) => result.map(|r| r.into_inner().message_ids),
        Err(_) => panic!("Publish did not answer within {EVENTUALLY:?}"),
    }
}

async fn assert_ready(server: &TestServer) {
    server.wait_serving().await;
    wait_http_status(server.metrics_addr, "/readyz", 200).await;
    assert_eq!(http_get(server.metrics_addr, "/healthz").await, 200);
}

async fn assert_not_ready(server: &TestServer) {
    server.wait_health("", ServingStatus::NotServing).await;
    server
        .wait_health(QUEUE_SERVICE, ServingStatus::NotServing)
        .await;
    wait_http_status(server.metrics_addr, "/readyz", 503).await;
    let (_, body) = http_get_with_body(server.metrics_addr, "/readyz").await;
    assert!(
        body.starts_with("not ready: ") && body.len() > "not ready: \n".len(),
        "/readyz says why: {body:?}"
    );
    assert_eq!(
        http_get(server.metrics_addr, "/healthz").await,
        200,
        "/healthz stays 200"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_redis_going_away_and_coming_back() {
    let mut redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut client = server.client().await;

    assert_ready(&server).await;
    try_publish(&mut client)
        .await
        .expect("publish while Redis is up");

    redis.kill();
    assert_not_ready(&server).await;
    let (_, body) = http_get_with_body(server.metrics_addr, "/readyz").await;
    assert!(body.contains("cannot reach redis at"), "{body:?}");
    let down = try_publish(&mut client).await;
    assert_eq!(
        down.as_ref().map_err(|s| s.code()).err(),
        Some(Code::Unavailable),
        "publish while Redis is down: {down:?}"
    );
    let sub = tokio::time::timeout(
        EVENTUALLY,
        client.subscribe(Sub::default().request(TOPIC, "watchers")),
    )
    .await
    .expect("Subscribe answers while Redis is down");
    let sub_code = match sub {
        Err(status) => Some(status.code()),
        Ok(resp) => {
            let mut stream = resp.into_inner();
            match tokio::time::timeout(EVENTUALLY, stream.message()).await {
                Ok(Err(status)) => Some(status.code()),
                other => panic!("Subscribe while Redis is down should fail, got {other:?}"),
            }
        }
    };
    assert_eq!(
        sub_code,
        Some(Code::Unavailable),
        "subscribe while Redis is down"
    );

    redis.launch();
    assert_ready(&server).await;
    // Health follows the connection; the first publish after recovery must work.
    let ids = try_publish(&mut client)
        .await
        .expect("publish after Redis came back");
    assert_eq!(ids.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_starts_before_redis_and_becomes_ready_when_it_appears() {
    let mut redis = RedisServer::unstarted();
    let server = TestServer::start(&redis.url(), &[]).await;
    let mut client = server.client().await;

    assert_not_ready(&server).await;
    let down = try_publish(&mut client).await;
    assert_eq!(
        down.as_ref().map_err(|s| s.code()).err(),
        Some(Code::Unavailable),
        "publish before Redis: {down:?}"
    );

    redis.launch();
    assert_ready(&server).await;
    try_publish(&mut client)
        .await
        .expect("publish once Redis is up");
    let mut stream = subscribe(&mut client, TOPIC, "late-joiner", Sub::default()).await;
    let got = expect_messages(&mut stream, 1).await;
    assert_eq!(got[0].message.as_ref().unwrap().payload, "ping");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_serving_for_server_and_queue_service() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    assert_ready(&server).await;
    assert_eq!(
        server.health_status("").await.expect("check \"\""),
        ServingStatus::Serving
    );
    assert_eq!(
        server
            .health_status(QUEUE_SERVICE)
            .await
            .expect("check queue service"),
        ServingStatus::Serving
    );
    let unknown = server.health_status("no.such.Service").await;
    assert_eq!(
        unknown.map_err(|s| s.code()).err(),
        Some(Code::NotFound),
        "unknown service"
    );
    assert_eq!(http_get(server.metrics_addr, "/no-such-page").await, 404);
}
