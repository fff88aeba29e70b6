//! The `redq` binary under test: started, watched through its log, signalled and stopped.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redq::pb::queue_service_client::QueueServiceClient;
use tonic::Status;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::*;

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
