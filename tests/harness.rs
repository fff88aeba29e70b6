//! Self-checks of the test harness (tests/common): the private Redis lifecycle and
//! the parsing of redq's start-up line, independent of the server under test.

mod common;

use common::*;

#[test]
fn redis_server_starts_restarts_and_dies_on_drop() {
    let mut redis = RedisServer::start();
    assert!(redis.url().starts_with("unix://"));
    assert!(redis.is_answering());

    redis.kill();
    assert!(!redis.is_answering(), "killed Redis still answers");
    redis.restart();
    assert!(redis.is_answering(), "restarted Redis answers");

    let socket = redis.socket();
    drop(redis);
    assert!(!redis_ping(&socket), "Redis outlived its RedisServer");
}

#[test]
fn unstarted_redis_does_not_answer_until_launched() {
    let mut redis = RedisServer::unstarted();
    assert!(!redis.is_answering());
    redis.launch();
    assert!(redis.is_answering());
}

#[test]
fn start_up_line_is_parsed_in_text_colour_and_json_formats() {
    let plain = "2025-01-01T00:00:00Z  INFO redq::server: serving grpc_addr=127.0.0.1:40123 metrics_addr=127.0.0.1:40124";
    assert_eq!(
        find_addr(plain, "grpc_addr"),
        Some("127.0.0.1:40123".parse().unwrap())
    );
    assert_eq!(
        find_addr(plain, "metrics_addr"),
        Some("127.0.0.1:40124".parse().unwrap())
    );

    let coloured = "\u{1b}[32m INFO\u{1b}[0m \u{1b}[2mredq::server\u{1b}[0m\u{1b}[2m:\u{1b}[0m serving \u{1b}[3mgrpc_addr\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:1 \u{1b}[3mmetrics_addr\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:2";
    let line = strip_ansi(coloured);
    assert_eq!(
        find_addr(&line, "grpc_addr"),
        Some("127.0.0.1:1".parse().unwrap())
    );
    assert_eq!(
        find_addr(&line, "metrics_addr"),
        Some("127.0.0.1:2".parse().unwrap())
    );

    let json = r#"{"level":"INFO","fields":{"message":"serving","grpc_addr":"127.0.0.1:5","metrics_addr":"127.0.0.1:6"}}"#;
    assert_eq!(
        find_addr(json, "grpc_addr"),
        Some("127.0.0.1:5".parse().unwrap())
    );
    assert_eq!(
        find_addr(json, "metrics_addr"),
        Some("127.0.0.1:6".parse().unwrap())
    );

    assert_eq!(find_addr("serving grpc_addr=nonsense", "grpc_addr"), None);
}
