//! Process lifecycle: graceful drain on SIGTERM, start-up validation of flags and
//! `REDQ_*` variables, and `redq dev` starting and stopping its own Redis.

#![allow(clippy::needless_update)]

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use tonic::Code;

const TOPIC: &str = "jobs";
const SUB: &str = "runner";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_streams_exits_cleanly_and_keeps_unacked_messages() {
    let redis = RedisServer::start();
    let drain = Duration::from_secs(5);
    let mut a = TestServer::start(&redis.url(), &["--drain-timeout", "5s"]).await;
    let mut client_a = a.client().await;

    let deadline = Duration::from_secs(1);
    let ids = publish(&mut client_a, TOPIC, payloads("j", 5)).await;
    let mut stream = subscribe(&mut client_a, TOPIC, SUB, Sub::deadline(deadline)).await;
    let held = expect_messages(&mut stream, 5).await;
    assert_eq!(
        ids_of(&held).into_iter().collect::<HashSet<_>>(),
        ids.iter().cloned().collect()
    );

    a.sigterm();
    let slack = Duration::from_secs(10);
    // The stream ends: cleanly, or with UNAVAILABLE saying the server is shutting down.
    let ended = loop {
        match tokio::time::timeout(drain + slack, stream.message()).await {
            Err(_) => panic!("stream still open {:?} after SIGTERM", drain + slack),
            Ok(Ok(Some(resp))) => {
                // Redeliveries of the held messages may still race the shutdown.
                assert!(
                    resp.messages.iter().all(|m| ids.contains(&id_of(m))),
                    "unexpected message during drain: {resp:?}"
                );
            }
            Ok(Ok(None)) => break None,
            Ok(Err(status)) => break Some(status),
        }
    };
    eprintln!("stream after SIGTERM ended with {ended:?}");
    if let Some(status) = &ended {
        assert_eq!(
            status.code(),
            Code::Unavailable,
            "stream end status: {status:?}"
        );
        assert!(
            status.message().contains("shutting down"),
            "stream end status should say the server is shutting down: {status:?}"
        );
    }

    let exit = a.wait_exit(drain + slack).await;
    let exit = exit.unwrap_or_else(|| {
        panic!(
            "redq still running {:?} after SIGTERM\n{}",
            drain + slack,
            a.log()
        )
    });
    assert!(exit.success(), "exit after SIGTERM: {exit:?}\n{}", a.log());

    // Another replica redelivers what A held unacked.
    let b = TestServer::start(&redis.url(), &[]).await;
    let mut client_b = b.client().await;
    let mut on_b = subscribe(
        &mut client_b,
        TOPIC,
        SUB,
        Sub::deadline(Duration::from_secs(300)),
    )
    .await;
    let got = expect_messages(&mut on_b, 5).await;
    assert_eq!(
        ids_of(&got).into_iter().collect::<HashSet<_>>(),
        ids.iter().cloned().collect::<HashSet<_>>(),
        "unacked messages survive the drain"
    );
    assert!(
        got.iter().all(|m| m.delivery_attempt >= 2),
        "attempts: {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_without_streams_exits_cleanly() {
    let redis = RedisServer::start();
    let mut server = TestServer::start(&redis.url(), &["--drain-timeout", "5s"]).await;
    server.wait_serving().await;
    server.sigterm();
    let exit = server.wait_exit(Duration::from_secs(15)).await;
    let exit = exit.unwrap_or_else(|| panic!("redq still running after SIGTERM\n{}", server.log()));
    assert!(exit.success(), "exit after SIGTERM: {exit:?}");
}

/// Runs `redq serve` with `bad` on top of otherwise valid flags and `envs`, and
/// checks it stops with a non-zero status and one stderr line naming `flag`.
fn assert_rejected(bad: &[&str], envs: &[(&str, &str)], flag_names: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("unix://{}", dir.path().join("redis.sock").display());
    let mut args = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--redis-url",
        &url,
    ];
    args.extend_from_slice(bad);
    let (status, lines) = run_to_exit(&args, envs, Duration::from_secs(20));
    let text = lines.join("\n");
    let status =
        status.unwrap_or_else(|| panic!("redq {bad:?} {envs:?} kept running; stderr:\n{text}"));
    assert!(
        !status.success(),
        "redq {bad:?} {envs:?} exited with {status:?}"
    );
    assert!(
        !text.contains("panicked"),
        "redq {bad:?} {envs:?} panicked:\n{text}"
    );
    let reasons: Vec<&String> = lines.iter().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        reasons.len(),
        1,
        "expected a one-line reason for {bad:?} {envs:?}; stderr:\n{text}"
    );
    let naming: Vec<&String> = lines
        .iter()
        .filter(|l| flag_names.iter().any(|f| l.contains(f)))
        .collect();
    assert_eq!(
        naming.len(),
        1,
        "expected one stderr line naming one of {flag_names:?} for {bad:?} {envs:?}; stderr:\n{text}"
    );
}

#[test]
fn bad_listen_address_is_rejected_at_start() {
    assert_rejected(&["--listen", "nonsense"], &[], &["--listen", "listen"]);
}

#[test]
fn bad_metrics_listen_address_is_rejected_at_start() {
    assert_rejected(
        &["--metrics-listen", "nonsense"],
        &[],
        &["metrics-listen", "metrics_listen", "METRICS_LISTEN"],
    );
}

#[test]
fn zero_max_batch_size_is_rejected_at_start() {
    assert_rejected(
        &["--max-batch-size", "0"],
        &[],
        &["max-batch-size", "max_batch_size", "MAX_BATCH_SIZE"],
    );
}

#[test]
fn too_many_workers_are_rejected_at_start() {
    assert_rejected(
        &["--workers", "5000"],
        &[],
        &["--workers", "workers", "WORKERS"],
    );
}

#[test]
fn bad_duration_is_rejected_at_start() {
    assert_rejected(
        &["--drain-timeout", "banana"],
        &[],
        &["drain-timeout", "drain_timeout", "DRAIN_TIMEOUT"],
    );
}

#[test]
fn bad_env_var_is_rejected_at_start() {
    assert_rejected(
        &[],
        &[("REDQ_MAX_BATCH_SIZE", "0")],
        &["max-batch-size", "max_batch_size", "MAX_BATCH_SIZE"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_vars_configure_the_server() {
    let redis = RedisServer::start();
    let args: Vec<String> = ["serve"].iter().map(|s| s.to_string()).collect();
    let url = redis.url();
    let server = TestServer::spawn(
        &args,
        &[
            ("REDQ_LISTEN", "127.0.0.1:0"),
            ("REDQ_METRICS_LISTEN", "127.0.0.1:0"),
            ("REDQ_REDIS_URL", &url),
            ("REDQ_MAX_PAYLOAD_BYTES", "4"),
        ],
    )
    .await;
    let mut client = server.client().await;
    publish(&mut client, TOPIC, ["1234"]).await;
    let too_big = client
        .publish(redq::pb::PublishRequest {
            topic: TOPIC.to_string(),
            messages: vec![message("12345")],
            ..Default::default()
        })
        .await;
    assert_status(too_big, Code::InvalidArgument, "messages[0].payload");
}

// ---------------------------------------------------------------------------
// redq dev
// ---------------------------------------------------------------------------

/// Child processes of `pid` (from /proc), with their command names.
fn children_of(pid: i32) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid …"; comm may contain spaces, so split after ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let mut rest = stat[close + 1..].split_whitespace();
        let _state = rest.next();
        if rest.next().and_then(|p| p.parse::<i32>().ok()) == Some(pid) {
            found.push((child, comm));
        }
    }
    found
}

/// Whether `pid` is still a live (non-zombie) process.
fn is_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next());
            !matches!(state, Some("Z") | Some("X"))
        }
        Err(_) => false,
    }
}

/// Unix sockets anywhere under `dir`.
fn sockets_under(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_socket() {
                found.push(entry.path());
            }
        }
    }
    found
}

/// Whether any path under `dir` has `needle` in its name.
fn any_name_contains(dir: &Path, needle: &str) -> bool {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().contains(needle) {
                return true;
            }
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                pending.push(entry.path());
            }
        }
    }
    false
}

/// Kills leftover redis-server children of a failed `redq dev` test.
struct KillOnDrop(Vec<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if is_alive(pid) {
                // SAFETY: kill(2) on a pid we saw as our redq's redis-server child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mode_runs_its_own_redis_and_stops_it_on_sigint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dev");
    let args: Vec<String> = [
        "dev",
        "--dir",
        dir.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut server = TestServer::spawn(&args, &[]).await;

    let redis_children: Vec<i32> = children_of(server.pid())
        .into_iter()
        .filter(|(_, comm)| comm.contains("redis"))
        .map(|(pid, _)| pid)
        .collect();
    let _cleanup = KillOnDrop(redis_children.clone());
    assert!(
        !redis_children.is_empty(),
        "redq dev has no redis-server child: {:?}",
        children_of(server.pid())
    );

    let mut client = server.client().await;
    let ids = publish(&mut client, TOPIC, ["hello dev"]).await;
    let mut stream = subscribe(&mut client, TOPIC, SUB, Sub::default()).await;
    let got = expect_messages(&mut stream, 1).await;
    assert_eq!(ids_of(&got), ids);
    assert_eq!(got[0].message.as_ref().unwrap().payload, "hello dev");
    ack(&mut client, TOPIC, SUB, ack_ids_of(&got))
        .await
        .expect("ack");
    assert!(
        any_name_contains(&dir, "appendonly"),
        "no AOF under {}",
        dir.display()
    );
    let sockets = sockets_under(&dir);
    drop(stream);

    server.sigint();
    let exit = server.wait_exit(Duration::from_secs(30)).await;
    let exit =
        exit.unwrap_or_else(|| panic!("redq dev still running after SIGINT\n{}", server.log()));
    assert!(
        exit.success(),
        "redq dev exit after SIGINT: {exit:?}\n{}",
        server.log()
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    while redis_children.iter().any(|&pid| is_alive(pid)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let alive: Vec<_> = redis_children
        .iter()
        .filter(|&&pid| is_alive(pid))
        .collect();
    assert!(alive.is_empty(), "redis-server {alive:?} outlived redq dev");
    for socket in sockets {
        assert!(
            !redis_ping(&socket),
            "{} still answers PING",
            socket.display()
        );
    }
}
