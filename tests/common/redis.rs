//! A private `redis-server` per test, on a Unix socket in its own temp dir.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::*;

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

    /// Like `start_with`, with arguments that name a TCP port (`--port`,
    /// `--tls-port`): `args(port)` for a free port, and another one if
    /// another program took it first. Returns the server and its port.
    pub fn start_with_port(args: impl Fn(u16) -> Vec<String>) -> (Self, u16) {
        let (ports, redis) = ports::start_on_free_ports(1, "redis-server", |ports| {
            let mut redis = Self::unstarted();
            redis.extra_args = args(ports[0]);
            redis.try_launch().map(|()| redis)
        });
        (redis, ports[0])
    }

    /// Starts redis-server on this dir and socket (again) and waits for PING.
    pub fn launch(&mut self) {
        if let Err(log) = self.try_launch() {
            panic!("{log}");
        }
    }

    /// Starts redis-server and waits for PING; its log if it exits first.
    fn try_launch(&mut self) -> Result<(), String> {
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
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!(
                    "redis-server exited with {status} before answering PING\n{}",
                    self.log()
                ));
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
