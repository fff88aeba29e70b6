//! Test harness: a private `redis-server` per test (`RedisServer`), the `redq`
//! binary under test (`TestServer`), and small gRPC helpers shared by `tests/*.rs`.
//!
//! Every test gets its own temp dir, Unix socket and server processes, so tests run
//! in parallel without sharing state and never touch a Redis on 6379. Readiness is
//! always polled with a bound, never assumed after a fixed sleep; timeouts here only
//! keep a broken build from hanging, they never assert speed.

// Each test binary uses a different subset of the helpers.
#![allow(dead_code)]
// `..Default::default()` on proto messages keeps tests compiling when fields are added.
#![allow(clippy::needless_update)]

pub mod cluster;
pub mod load;
pub mod metrics;
pub mod ordering;
pub mod security;
pub mod sentinel;
pub mod sockets;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use redq::pb;
use redq::pb::admin_service_client::AdminServiceClient;
use redq::pb::queue_service_client::QueueServiceClient;
use tempfile::TempDir;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Bound for a process to come up (redis-server, redq).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound for something that should happen "soon" (a delivery, a health flip).
pub const EVENTUALLY: Duration = Duration::from_secs(20);
/// The gRPC service name redq registers with the health service.
pub const QUEUE_SERVICE: &str = "redq.v1.QueueService";

// ---------------------------------------------------------------------------
// Redis
// ---------------------------------------------------------------------------

/// A private `redis-server` listening only on a Unix socket in its own temp dir.
///
/// Killed (SIGKILL) on drop. `kill` + `restart` reuse the same dir and socket, so
/// a server pointed at `url()` sees "Redis went away and came back".
pub struct RedisServer {
    dir: TempDir,
    child: Option<Child>,
    /// Extra `redis-server` arguments, passed on every (re)launch.
    extra_args: Vec<String>,
}

impl RedisServer {
    /// Starts a new Redis and waits until it answers PING.
    pub fn start() -> Self {
        let mut redis = Self::unstarted();
        redis.launch();
        redis
    }

    /// A temp dir and socket path with no Redis behind it yet; `launch` starts it.
    pub fn unstarted() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("redq-test-redis-")
            .tempdir()
            .expect("create temp dir for redis");
        Self {
            dir,
            child: None,
            extra_args: Vec::new(),
        }
    }

    /// Like `start`, with extra `redis-server` arguments (e.g. `--appendfsync always`)
    /// that `restart` and `launch` pass again.
    pub fn start_with(extra_args: &[&str]) -> Self {
        let mut redis = Self::unstarted();
        redis.extra_args = extra_args.iter().map(|s| s.to_string()).collect();
        redis.launch();
        redis
    }

    /// Path of the Unix socket Redis listens on.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// `unix://` URL for `--redis-url`.
    pub fn url(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// Starts redis-server on this dir and socket (again) and waits for PING.
    pub fn launch(&mut self) {
        assert!(self.child.is_none(), "redis-server is already running");
        // A socket file left by a SIGKILLed Redis would only refuse connections, but
        // removing it keeps the readiness probe honest about the new process.
        let _ = std::fs::remove_file(self.socket());
        let child = Command::new("redis-server")
            .arg("--save")
            .arg("")
            .args(["--appendonly", "yes"])
            .args(["--port", "0"])
            .arg("--unixsocket")
            .arg(self.socket())
            .args(["--unixsocketperm", "700"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn redis-server (is it installed and on PATH?)");
        self.child = Some(child);

        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if redis_ping(&self.socket()) {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                panic!(
                    "redis-server exited with {status} before answering PING\n{}",
                    self.log()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "redis-server did not answer PING on {} within {STARTUP_TIMEOUT:?}\n{}",
                    self.socket().display(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs Redis (the socket file stays behind and refuses connections).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills Redis if running, then starts it again on the same dir and socket.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Whether something answers PING on the socket right now.
    pub fn is_answering(&self) -> bool {
        redis_ping(&self.socket())
    }

    /// The last `n` lines of the Redis log.
    /// How many calls of `command` (lowercase, as `INFO commandstats` names
    /// it) this server has served; a fetch script makes one `xreadgroup`.
    pub fn calls_of(&self, command: &str) -> u64 {
        let prefix = format!("cmdstat_{command}:calls=");
        self.cli(&["INFO", "commandstats"])
            .lines()
            .find_map(|l| l.strip_prefix(&prefix)?.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// What `redis-cli` prints for one command to this server.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .arg("-s")
            .arg(self.socket())
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let skip = lines.len().saturating_sub(n);
        format!(
            "---- redis log tail ({}) ----\n{}",
            self.log_path().display(),
            lines[skip..].join("\n")
        )
    }

    /// Contents of the Redis log, for failure messages.
    pub fn log(&self) -> String {
        match std::fs::read_to_string(self.log_path()) {
            Ok(text) => format!(
                "---- redis log ({}) ----\n{text}",
                self.log_path().display()
            ),
            Err(e) => format!("---- no redis log at {}: {e}", self.log_path().display()),
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() && self.child.is_some() {
            eprintln!("{}", self.log_tail(20));
        }
        self.kill();
    }
}

/// Sends `PING` over a Unix socket and reports whether `+PONG` came back.
pub fn redis_ping(socket: &Path) -> bool {
    let Ok(mut conn) = UnixStream::connect(socket) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
    if conn.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    match conn.read(&mut buf) {
        Ok(n) => buf[..n].starts_with(b"+PONG"),
        Err(_) => false,
    }
}

// ---------------------------------------------------------------------------
// redq server process
// ---------------------------------------------------------------------------

/// Path of the `redq` binary cargo built for these tests.
pub fn redq_bin() -> &'static str {
    env!("CARGO_BIN_EXE_redq")
}

/// Stderr lines of a child process, collected by a background thread that keeps
/// draining the pipe so the child never blocks on a full pipe.
#[derive(Clone, Default)]
pub struct LogLines(Arc<Mutex<Vec<String>>>);

impl LogLines {
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    pub fn text(&self) -> String {
        self.lines().join("\n")
    }

    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }
}

/// Spawns the thread that drains `stderr` into `log` and calls `on_line` per line.
fn drain_stderr(
    stderr: impl Read + Send + 'static,
    log: LogLines,
    mut on_line: impl FnMut(&str) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = strip_ansi(String::from_utf8_lossy(&buf).trim_end());
                    on_line(&line);
                    log.push(line);
                }
            }
        }
    })
}

/// Removes ANSI colour escapes (tracing colours field names when it thinks it may).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                // CSI: parameters and intermediates, then one final byte in @..~.
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Finds `key=<ip:port>` (or JSON `"key":"<ip:port>"`) in a log line.
pub fn find_addr(line: &str, key: &str) -> Option<SocketAddr> {
    for token in line.split(|c: char| c.is_whitespace() || c == ',' || c == '{' || c == '}') {
        let token = token.trim();
        let value = if let Some(v) = token.strip_prefix(&format!("{key}=")) {
            v
        } else if let Some(v) = token.strip_prefix(&format!("\"{key}\":")) {
            v
        } else {
            continue;
        };
        if let Ok(addr) = value.trim_matches('"').parse() {
            return Some(addr);
        }
    }
    None
}

/// Removes inherited `REDQ_*` variables so a developer's shell can't change a test.
fn clean_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("REDQ_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("NO_COLOR", "1");
}

/// A running `redq` process (`serve` or `dev`) with its stderr collected.
pub struct TestServer {
    child: Child,
    pub grpc_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    log: LogLines,
    exit: Option<ExitStatus>,
}

impl TestServer {
    /// `redq serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --redis-url <url> <extra>`.
    pub async fn start(redis_url: &str, extra: &[&str]) -> Self {
        let mut args: Vec<String> = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--redis-url",
            redis_url,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::spawn(&args, &[]).await
    }

    /// Spawns `redq <args>` with extra env vars and waits for its
    /// `grpc_addr=… metrics_addr=…` line (panics with the collected stderr otherwise).
    pub async fn spawn(args: &[String], envs: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(redq_bin());
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        clean_env(&mut cmd);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn redq");
        let log = LogLines::default();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut tx = Some(tx);
        drain_stderr(child.stderr.take().unwrap(), log.clone(), move |line| {
            if let (Some(g), Some(m)) = (
                find_addr(line, "grpc_addr"),
                find_addr(line, "metrics_addr"),
            ) && let Some(tx) = tx.take()
            {
                let _ = tx.send((g, m));
            }
        });

        match tokio::time::timeout(STARTUP_TIMEOUT, rx).await {
            Ok(Ok((grpc_addr, metrics_addr))) => Self {
                child,
                grpc_addr,
                metrics_addr,
                log,
                exit: None,
            },
            outcome => {
                let why = match outcome {
                    Ok(Err(_)) => "stderr closed (process exited?)".to_string(),
                    _ => format!("no grpc_addr/metrics_addr line within {STARTUP_TIMEOUT:?}"),
                };
                let _ = child.kill();
                let status = child.wait();
                // Give the drain thread a moment to collect the last lines.
                std::thread::sleep(Duration::from_millis(100));
                panic!(
                    "redq {args:?} did not start: {why}; exit: {status:?}\n---- redq stderr ----\n{}",
                    log.text()
                );
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Collected stderr lines so far.
    pub fn log(&self) -> String {
        self.log.text()
    }

    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc_addr)
    }

    /// A connected QueueService client.
    pub async fn client(&self) -> QueueServiceClient<Channel> {
        QueueServiceClient::connect(self.grpc_url())
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}\n{}", self.grpc_addr, self.log()))
    }

    /// A connected gRPC channel, for clients without a `connect` of their own
    /// (health, reflection).
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(self.grpc_url())
            .expect("valid url")
            .connect()
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}\n{}", self.grpc_addr, self.log()))
    }

    /// A connected gRPC health client.
    pub async fn health(&self) -> HealthClient<Channel> {
        HealthClient::new(self.channel().await)
    }

    /// Health status of `service` ("" = the whole server).
    pub async fn health_status(&self, service: &str) -> Result<ServingStatus, Status> {
        let mut health = self.health().await;
        let resp = health
            .check(HealthCheckRequest {
                service: service.to_string(),
            })
            .await?
            .into_inner();
        Ok(ServingStatus::try_from(resp.status).unwrap_or(ServingStatus::Unknown))
    }

    /// Polls health of `service` until it is `want` (panics after `EVENTUALLY`).
    pub async fn wait_health(&self, service: &str, want: ServingStatus) {
        let deadline = Instant::now() + EVENTUALLY;
        loop {
            let got = self.health_status(service).await;
            if matches!(&got, Ok(s) if *s == want) {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "health of {service:?} is {got:?}, expected {want:?} within {EVENTUALLY:?}\n---- redq stderr ----\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `wait_health(…, Serving)` for the server and the queue service.
    pub async fn wait_serving(&self) {
        self.wait_health("", ServingStatus::Serving).await;
        self.wait_health(QUEUE_SERVICE, ServingStatus::Serving)
            .await;
    }

    /// SIGKILL, no cleanup.
    pub fn kill9(&mut self) {
        if self.exit.is_none() {
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(rc, 0, "kill({}, {signal}) failed", self.pid());
    }

    pub fn sigterm(&self) {
        self.signal(libc::SIGTERM);
    }

    pub fn sigint(&self) {
        self.signal(libc::SIGINT);
    }

    /// Waits up to `timeout` for the process to exit; `None` if it is still running.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit {
                return Some(status);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                self.exit = Some(status);
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if self.exit.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- redq (pid {}, grpc {}) stderr ----\n{}",
                self.child.id(),
                self.grpc_addr,
                self.log()
            );
        }
    }
}

/// Runs `redq <args>` that is expected to exit by itself (e.g. a bad flag) and
/// returns its exit status (None if it was still running after `timeout` and got
/// killed) and its stderr lines.
pub fn run_to_exit(
    args: &[&str],
    envs: &[(&str, &str)],
    timeout: Duration,
) -> (Option<ExitStatus>, Vec<String>) {
    let mut cmd = Command::new(redq_bin());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    clean_env(&mut cmd);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn redq");
    let log = LogLines::default();
    let drain = drain_stderr(child.stderr.take().unwrap(), log.clone(), |_| {});
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = drain.join();
    (status, log.lines())
}

// ---------------------------------------------------------------------------
// gRPC helpers
// ---------------------------------------------------------------------------

pub type Client = QueueServiceClient<Channel>;

/// A protobuf Duration from a std one.
pub fn pb_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// A message with just a payload.
pub fn message(payload: impl Into<Bytes>) -> pb::PublishMessage {
    pb::PublishMessage {
        payload: payload.into(),
        ..Default::default()
    }
}

/// Publishes one message per payload and returns the ids (one per payload).
/// A Redis of its own, a server on it with the default flags, and a client.
pub async fn redis_server_and_client() -> (RedisServer, TestServer, Client) {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis.url(), &[]).await;
    let client = server.client().await;
    (redis, server, client)
}

/// A Redis of its own, two servers (replicas) on it with the default flags,
/// and a client of each.
pub struct TwoReplicas {
    pub redis: RedisServer,
    pub a: TestServer,
    pub b: TestServer,
    pub client_a: Client,
    pub client_b: Client,
}

pub async fn two_replicas() -> TwoReplicas {
    let redis = RedisServer::start();
    let a = TestServer::start(&redis.url(), &[]).await;
    let b = TestServer::start(&redis.url(), &[]).await;
    let client_a = a.client().await;
    let client_b = b.client().await;
    TwoReplicas {
        redis,
        a,
        b,
        client_a,
        client_b,
    }
}

pub async fn publish<P: Into<Bytes>>(
    client: &mut Client,
    topic: &str,
    payloads: impl IntoIterator<Item = P>,
) -> Vec<String> {
    let messages: Vec<_> = payloads.into_iter().map(message).collect();
    let n = messages.len();
    let ids = client
        .publish(pb::PublishRequest {
            topic: topic.to_string(),
            messages,
            dedupe_id: String::new(),
        })
        .await
        .unwrap_or_else(|s| panic!("publish to {topic}: {s:?}"))
        .into_inner()
        .message_ids;
    assert_eq!(ids.len(), n, "one id per published message");
    ids
}

/// `n` distinct payloads `"{prefix}-{i}"`.
pub fn payloads(prefix: &str, n: usize) -> Vec<Bytes> {
    (0..n)
        .map(|i| Bytes::from(format!("{prefix}-{i}")))
        .collect()
}

/// Options of a Subscribe call; `Default` = server defaults.
#[derive(Clone, Debug, Default)]
pub struct Sub {
    pub consumer: String,
    pub max_outstanding: u32,
    pub ack_deadline: Option<Duration>,
    pub start: pb::StartPosition,
    /// `retry_policy` as (minimum_backoff, maximum_backoff); None = server default.
    pub retry: Option<(Duration, Duration)>,
    /// 0 = server default.
    pub max_delivery_attempts: u32,
}

impl Sub {
    pub fn deadline(d: Duration) -> Self {
        Self {
            ack_deadline: Some(d),
            ..Default::default()
        }
    }

    pub fn max_outstanding(mut self, n: u32) -> Self {
        self.max_outstanding = n;
        self
    }

    pub fn consumer(mut self, name: &str) -> Self {
        self.consumer = name.to_string();
        self
    }

    pub fn latest(mut self) -> Self {
        self.start = pb::StartPosition::Latest;
        self
    }

    pub fn retry(mut self, minimum_backoff: Duration, maximum_backoff: Duration) -> Self {
        self.retry = Some((minimum_backoff, maximum_backoff));
        self
    }

    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_delivery_attempts = n;
        self
    }

    pub fn request(&self, topic: &str, subscription: &str) -> pb::SubscribeRequest {
        pb::SubscribeRequest {
            topic: topic.to_string(),
            subscription: subscription.to_string(),
            consumer: self.consumer.clone(),
            max_outstanding_messages: self.max_outstanding,
            ack_deadline: self.ack_deadline.map(pb_duration),
            start: self.start as i32,
            retry_policy: self.retry.map(|(min, max)| pb::RetryPolicy {
                minimum_backoff: Some(pb_duration(min)),
                maximum_backoff: Some(pb_duration(max)),
            }),
            max_delivery_attempts: self.max_delivery_attempts,
            ..Default::default()
        }
    }
}

/// Opens a Subscribe stream (returns once the server has answered the call).
pub async fn subscribe(
    client: &mut Client,
    topic: &str,
    subscription: &str,
    opts: Sub,
) -> Streaming<pb::SubscribeResponse> {
    client
        .subscribe(opts.request(topic, subscription))
        .await
        .unwrap_or_else(|s| panic!("subscribe {topic}/{subscription}: {s:?}"))
        .into_inner()
}

/// Collects messages until at least `n` arrived or `timeout` passed; returns what
/// it got (possibly more than `n` if the last response carried several). Panics if
/// the stream fails.
pub async fn next_messages(
    stream: &mut Streaming<pb::SubscribeResponse>,
    n: usize,
    timeout: Duration,
) -> Vec<pb::ReceivedMessage> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut got = Vec::new();
    while got.len() < n {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Err(_elapsed) => break,
            Ok(Ok(Some(resp))) => got.extend(resp.messages),
            Ok(Ok(None)) => break,
            Ok(Err(status)) => panic!(
                "subscribe stream failed after {} messages: {status:?}",
                got.len()
            ),
        }
    }
    got
}

/// Like `next_messages` but panics unless at least `n` arrived within `EVENTUALLY`.
pub async fn expect_messages(
    stream: &mut Streaming<pb::SubscribeResponse>,
    n: usize,
) -> Vec<pb::ReceivedMessage> {
    let got = next_messages(stream, n, EVENTUALLY).await;
    assert!(
        got.len() >= n,
        "expected {n} messages within {EVENTUALLY:?}, got {}: {:?}",
        got.len(),
        ids_of(&got)
    );
    got
}

/// Asserts the stream delivers no message for `dur` (empty responses are ignored;
/// the stream ending or failing is a failure too).
pub async fn assert_no_message_within(
    stream: &mut Streaming<pb::SubscribeResponse>,
    dur: Duration,
) {
    let deadline = tokio::time::Instant::now() + dur;
    loop {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Err(_elapsed) => return,
            Ok(Ok(Some(resp))) if resp.messages.is_empty() => continue,
            Ok(Ok(Some(resp))) => panic!(
                "expected no message within {dur:?}, got {:?}",
                resp.messages
                    .iter()
                    .map(|m| (id_of(m), m.delivery_attempt))
                    .collect::<Vec<_>>()
            ),
            Ok(Ok(None)) => panic!("stream ended while waiting for no message"),
            Ok(Err(status)) => panic!("stream failed while waiting for no message: {status:?}"),
        }
    }
}

/// Reads from several streams at once until `total` messages arrived across them
/// or `timeout` passed; returns the messages per stream.
pub async fn collect_from_all(
    streams: &mut [Streaming<pb::SubscribeResponse>],
    total: usize,
    timeout: Duration,
) -> Vec<Vec<pb::ReceivedMessage>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut got: Vec<Vec<pb::ReceivedMessage>> = vec![Vec::new(); streams.len()];
    while got.iter().map(Vec::len).sum::<usize>() < total {
        let reads = streams
            .iter_mut()
            .enumerate()
            .map(|(i, s)| Box::pin(async move { (i, s.message().await) }));
        let next = tokio::time::timeout_at(deadline, futures::future::select_all(reads)).await;
        match next {
            Err(_elapsed) => break,
            Ok(((i, Ok(Some(resp))), _, _)) => got[i].extend(resp.messages),
            Ok(((i, Ok(None)), _, _)) => panic!("stream {i} ended while collecting"),
            Ok(((i, Err(status)), _, _)) => {
                panic!("stream {i} failed while collecting: {status:?}")
            }
        }
    }
    got
}

/// The message id of a delivery.
pub fn id_of(m: &pb::ReceivedMessage) -> String {
    m.message.as_ref().map(|m| m.id.clone()).unwrap_or_default()
}

pub fn ids_of(ms: &[pb::ReceivedMessage]) -> Vec<String> {
    ms.iter().map(id_of).collect()
}

pub fn payloads_of(messages: &[pb::ReceivedMessage]) -> Vec<Bytes> {
    messages
        .iter()
        .map(|m| m.message.as_ref().expect("a message").payload.clone())
        .collect()
}

pub fn ack_ids_of(ms: &[pb::ReceivedMessage]) -> Vec<String> {
    ms.iter().map(|m| m.ack_id.clone()).collect()
}

pub async fn ack(
    client: &mut Client,
    topic: &str,
    subscription: &str,
    ack_ids: Vec<String>,
) -> Result<(), Status> {
    client
        .ack(pb::AckRequest {
            topic: topic.to_string(),
            subscription: subscription.to_string(),
            ack_ids,
            ..Default::default()
        })
        .await
        .map(|_| ())
}

pub async fn nack(
    client: &mut Client,
    topic: &str,
    subscription: &str,
    ack_ids: Vec<String>,
) -> Result<(), Status> {
    client
        .nack(pb::NackRequest {
            topic: topic.to_string(),
            subscription: subscription.to_string(),
            ack_ids,
            ..Default::default()
        })
        .await
        .map(|_| ())
}

pub async fn modify_ack_deadline(
    client: &mut Client,
    topic: &str,
    subscription: &str,
    ack_ids: Vec<String>,
    deadline: Duration,
) -> Result<(), Status> {
    client
        .modify_ack_deadline(pb::ModifyAckDeadlineRequest {
            topic: topic.to_string(),
            subscription: subscription.to_string(),
            ack_ids,
            ack_deadline: Some(pb_duration(deadline)),
            ..Default::default()
        })
        .await
        .map(|_| ())
}

/// Asserts `result` is an error with `code` whose message names `field`.
#[track_caller]
pub fn assert_status<T: std::fmt::Debug>(result: Result<T, Status>, code: Code, field: &str) {
    match result {
        Ok(v) => panic!("expected {code:?} naming {field:?}, got Ok({v:?})"),
        Err(s) => {
            assert_eq!(s.code(), code, "status for {field:?}: {s:?}");
            assert!(
                s.message().contains(field),
                "status message should name {field:?}: {:?}",
                s.message()
            );
        }
    }
}

/// `GET <path>` over HTTP/1.0; returns the status code.
pub async fn http_get(addr: SocketAddr, path: &str) -> u16 {
    http_get_with_body(addr, path).await.0
}

/// `GET <path>` over HTTP/1.0; returns the status code and the body.
pub async fn http_get_with_body(addr: SocketAddr, path: &str) -> (u16, String) {
    let response = http_get_response(addr, path).await;
    let head = String::from_utf8_lossy(&response);
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("GET {path} on {addr}: no status line in {head:?}"));
    let body = head
        .split_once("\r\n\r\n")
        .map_or_else(String::new, |(_, body)| body.to_owned());
    (status, body)
}

/// The whole response (head and body) to `GET <path>` over HTTP/1.0.
pub async fn http_get_response(addr: SocketAddr, path: &str) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut response = Vec::new();
        conn.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .unwrap_or_else(|_| panic!("GET {path} on {addr} timed out"))
        .unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"))
}

/// Polls `GET path` until it returns `want` (panics after `EVENTUALLY`).
pub async fn wait_http_status(addr: SocketAddr, path: &str, want: u16) {
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let got = http_get(addr, path).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "GET {path} on {addr} is {got}, expected {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Counts deliveries per message id.
pub fn count_by_id(ms: &[pb::ReceivedMessage]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for m in ms {
        *counts.entry(id_of(m)).or_insert(0) += 1;
    }
    counts
}

// ---------------------------------------------------------------------------
// Scheduling, retries, dead letters
// ---------------------------------------------------------------------------

pub type Admin = AdminServiceClient<Channel>;

impl TestServer {
    /// A connected AdminService client.
    pub async fn admin(&self) -> Admin {
        AdminServiceClient::new(self.channel().await)
    }
}

/// A protobuf Timestamp from a std SystemTime (after the epoch).
pub fn pb_timestamp(t: SystemTime) -> prost_types::Timestamp {
    let d = t.duration_since(UNIX_EPOCH).expect("time after the epoch");
    prost_types::Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// Milliseconds since the epoch of a protobuf Timestamp (floor).
pub fn ts_ms(ts: &prost_types::Timestamp) -> i64 {
    ts.seconds * 1000 + i64::from(ts.nanos).div_euclid(1_000_000)
}

/// Milliseconds since the epoch of a SystemTime (floor).
pub fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .expect("time after the epoch")
        .as_millis() as i64
}

/// Now, as milliseconds since the epoch (floor).
pub fn now_ms() -> i64 {
    unix_ms(SystemTime::now())
}

/// The SystemTime `ms` milliseconds after the epoch.
pub fn at_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).expect("ms after the epoch"))
}

/// When a scheduled message is due: at a time, or after a delay.
#[derive(Clone, Copy, Debug)]
pub enum Due {
    At(SystemTime),
    After(Duration),
}

impl Due {
    /// A whole-millisecond time `ms` from now (so the server's millisecond
    /// precision cannot round it).
    pub fn in_ms(ms: i64) -> Self {
        Due::At(at_ms(now_ms() + ms))
    }

    /// (deliver_at, delay) fields for a request.
    pub fn fields(
        self,
    ) -> (
        Option<prost_types::Timestamp>,
        Option<prost_types::Duration>,
    ) {
        match self {
            Due::At(t) => (Some(pb_timestamp(t)), None),
            Due::After(d) => (None, Some(pb_duration(d))),
        }
    }
}

/// A message that Publish schedules (its own `deliver_at` or `delay`).
pub fn scheduled_message(payload: impl Into<Bytes>, due: Due) -> pb::PublishMessage {
    let (deliver_at, delay) = due.fields();
    pb::PublishMessage {
        payload: payload.into(),
        deliver_at,
        delay,
        ..Default::default()
    }
}

/// A message with a `dedupe_id`.
pub fn deduped_message(payload: impl Into<Bytes>, dedupe_id: &str) -> pb::PublishMessage {
    pb::PublishMessage {
        payload: payload.into(),
        dedupe_id: dedupe_id.to_string(),
        ..Default::default()
    }
}

/// Publish returning the whole response (ids and duplicate flags) or the status.
pub async fn try_publish_messages(
    client: &mut Client,
    topic: &str,
    messages: Vec<pb::PublishMessage>,
) -> Result<pb::PublishResponse, Status> {
    client
        .publish(pb::PublishRequest {
            topic: topic.to_string(),
            messages,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

/// Publish that must succeed, with one id and one duplicate flag per message.
pub async fn publish_messages(
    client: &mut Client,
    topic: &str,
    messages: Vec<pb::PublishMessage>,
) -> pb::PublishResponse {
    let n = messages.len();
    let resp = try_publish_messages(client, topic, messages)
        .await
        .unwrap_or_else(|s| panic!("publish to {topic}: {s:?}"));
    assert_eq!(resp.message_ids.len(), n, "one id per message: {resp:?}");
    assert_eq!(
        resp.duplicates.len(),
        n,
        "one duplicate flag per message: {resp:?}"
    );
    resp
}

/// ScheduleDelayed of `message` at `due`.
pub async fn try_schedule(
    client: &mut Client,
    topic: &str,
    message: pb::PublishMessage,
    due: Due,
) -> Result<pb::ScheduleDelayedResponse, Status> {
    let (deliver_at, delay) = due.fields();
    client
        .schedule_delayed(pb::ScheduleDelayedRequest {
            topic: topic.to_string(),
            message: Some(message),
            deliver_at,
            delay,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

/// ScheduleDelayed that must succeed.
pub async fn schedule(
    client: &mut Client,
    topic: &str,
    message: pb::PublishMessage,
    due: Due,
) -> pb::ScheduleDelayedResponse {
    try_schedule(client, topic, message, due)
        .await
        .unwrap_or_else(|s| panic!("schedule on {topic} at {due:?}: {s:?}"))
}

/// CancelScheduled; Ok(cancelled).
pub async fn cancel_scheduled(
    client: &mut Client,
    topic: &str,
    message_id: &str,
) -> Result<bool, Status> {
    client
        .cancel_scheduled(pb::CancelScheduledRequest {
            topic: topic.to_string(),
            message_id: message_id.to_string(),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().cancelled)
}

/// RescheduleDelayed to `due`.
pub async fn reschedule(
    client: &mut Client,
    topic: &str,
    message_id: &str,
    due: Due,
) -> Result<pb::RescheduleDelayedResponse, Status> {
    let (deliver_at, delay) = due.fields();
    client
        .reschedule_delayed(pb::RescheduleDelayedRequest {
            topic: topic.to_string(),
            message_id: message_id.to_string(),
            deliver_at,
            delay,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

/// Nack with an explicit `delay`.
pub async fn nack_after(
    client: &mut Client,
    topic: &str,
    subscription: &str,
    ack_ids: Vec<String>,
    delay: Duration,
) -> Result<(), Status> {
    client
        .nack(pb::NackRequest {
            topic: topic.to_string(),
            subscription: subscription.to_string(),
            ack_ids,
            delay: Some(pb_duration(delay)),
            ..Default::default()
        })
        .await
        .map(|_| ())
}

/// One delivery and the test's wall-clock time when its response arrived.
#[derive(Clone, Debug)]
pub struct Arrival {
    /// Wall clock (the same clock Redis reads) when the response was received.
    pub at: SystemTime,
    /// Index of the stream it came on.
    pub stream: usize,
    pub received: pb::ReceivedMessage,
}

impl Arrival {
    pub fn id(&self) -> String {
        id_of(&self.received)
    }

    pub fn message(&self) -> &pb::Message {
        self.received
            .message
            .as_ref()
            .unwrap_or_else(|| panic!("delivery without a message: {:?}", self.received))
    }

    /// `Message.deliver_at` in ms since the epoch (panics if unset).
    pub fn deliver_at_ms(&self) -> i64 {
        let ts = self
            .message()
            .deliver_at
            .as_ref()
            .unwrap_or_else(|| panic!("delivery without deliver_at: {:?}", self.received));
        ts_ms(ts)
    }

    /// Asserts invariant 1: the message arrived no earlier than its due time.
    #[track_caller]
    pub fn assert_not_early(&self) {
        let due = self.message().deliver_at.as_ref().expect("deliver_at set");
        let due = UNIX_EPOCH
            + Duration::new(
                u64::try_from(due.seconds).expect("due after the epoch"),
                due.nanos as u32,
            );
        assert!(
            self.at >= due,
            "message {} delivered {:?} before its due time",
            self.id(),
            due.duration_since(self.at).unwrap_or_default()
        );
    }
}

/// Where `collect_until` acks what it receives.
pub struct AckTo<'a> {
    pub client: &'a mut Client,
    pub topic: &'a str,
    pub subscription: &'a str,
}

/// Reads from all `streams` at once, timing each response, until `done` says so
/// (checked after every response) or `timeout` passes. Acks each response through
/// `ack_to` if given. Panics if a stream fails or ends.
pub async fn collect_until(
    streams: &mut [Streaming<pb::SubscribeResponse>],
    timeout: Duration,
    mut ack_to: Option<AckTo<'_>>,
    mut done: impl FnMut(&[Arrival]) -> bool,
) -> Vec<Arrival> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut got: Vec<Arrival> = Vec::new();
    while !done(&got) {
        let reads = streams
            .iter_mut()
            .enumerate()
            .map(|(i, s)| Box::pin(async move { (i, s.message().await) }));
        let next = tokio::time::timeout_at(deadline, futures::future::select_all(reads)).await;
        let (stream, resp) = match next {
            Err(_elapsed) => break,
            Ok(((i, Ok(Some(resp))), _, _)) => (i, resp),
            Ok(((i, Ok(None)), _, _)) => {
                panic!("stream {i} ended after {} messages", got.len())
            }
            Ok(((i, Err(status)), _, _)) => {
                panic!("stream {i} failed after {} messages: {status:?}", got.len())
            }
        };
        let at = SystemTime::now();
        if let Some(to) = ack_to.as_mut()
            && !resp.messages.is_empty()
        {
            ack(
                to.client,
                to.topic,
                to.subscription,
                ack_ids_of(&resp.messages),
            )
            .await
            .unwrap_or_else(|s| panic!("ack on {}/{}: {s:?}", to.topic, to.subscription));
        }
        got.extend(resp.messages.into_iter().map(|received| Arrival {
            at,
            stream,
            received,
        }));
    }
    got
}

/// `collect_until` at least `total` deliveries (or `timeout`), timing each.
pub async fn collect_timed(
    streams: &mut [Streaming<pb::SubscribeResponse>],
    total: usize,
    timeout: Duration,
    ack_to: Option<AckTo<'_>>,
) -> Vec<Arrival> {
    collect_until(streams, timeout, ack_to, |got| got.len() >= total).await
}

/// Deliveries per message id.
pub fn count_arrivals(arrivals: &[Arrival]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for a in arrivals {
        *counts.entry(a.id()).or_insert(0) += 1;
    }
    counts
}

/// Asserts every id in `expected` was delivered exactly once and nothing else was.
#[track_caller]
pub fn assert_exactly_once<'a>(
    what: &str,
    arrivals: &[Arrival],
    expected: impl IntoIterator<Item = &'a String>,
) {
    let counts = count_arrivals(arrivals);
    let expected: HashSet<&String> = expected.into_iter().collect();
    let missing: Vec<_> = expected
        .iter()
        .filter(|id| !counts.contains_key(id.as_str()))
        .collect();
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    let unexpected: Vec<_> = counts.keys().filter(|id| !expected.contains(id)).collect();
    assert!(
        missing.is_empty() && twice.is_empty() && unexpected.is_empty(),
        "{what}: {} expected, {} deliveries; {} missing (e.g. {:?}), {} delivered more than once \
         (e.g. {:?}), {} unexpected (e.g. {:?})",
        expected.len(),
        arrivals.len(),
        missing.len(),
        missing.iter().take(5).collect::<Vec<_>>(),
        twice.len(),
        twice.iter().take(5).collect::<Vec<_>>(),
        unexpected.len(),
        unexpected.iter().take(5).collect::<Vec<_>>(),
    );
}

/// One page of a subscription's dead letters.
pub async fn list_dead_letters(
    admin: &mut Admin,
    topic: &str,
    subscription: &str,
    page_size: u32,
    page_token: &str,
) -> Result<pb::ListDeadLettersResponse, Status> {
    admin
        .list_dead_letters(pb::ListDeadLettersRequest {
            topic: topic.to_string(),
            subscription: subscription.to_string(),
            page_size,
            page_token: page_token.to_string(),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

/// Every dead letter of a subscription, following the pages.
pub async fn all_dead_letters(
    admin: &mut Admin,
    topic: &str,
    subscription: &str,
) -> Vec<pb::DeadLetter> {
    let mut all = Vec::new();
    let mut token = String::new();
    for _page in 0..10_000 {
        let page = list_dead_letters(admin, topic, subscription, 0, &token)
            .await
            .unwrap_or_else(|s| panic!("ListDeadLetters {topic}/{subscription}: {s:?}"));
        all.extend(page.dead_letters);
        if page.next_page_token.is_empty() {
            return all;
        }
        token = page.next_page_token;
    }
    panic!("ListDeadLetters {topic}/{subscription}: no last page after 10,000 pages");
}

/// Polls the dead letters until at least `n` are listed (panics after `EVENTUALLY`).
pub async fn wait_dead_letters(
    admin: &mut Admin,
    topic: &str,
    subscription: &str,
    n: usize,
) -> Vec<pb::DeadLetter> {
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let got = all_dead_letters(admin, topic, subscription).await;
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "expected {n} dead letters in {topic}/{subscription} within {EVENTUALLY:?}, got {}: {got:?}",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
