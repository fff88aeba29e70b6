//! A real Sentinel setup for tests: one master, one replica and three
//! Sentinels on free ports, quick to notice a failure. Every process is
//! SIGKILLed on drop.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::cluster::{cli, free_port};

pub const MASTER_NAME: &str = "redq-master";

pub struct SentinelSetup {
    dir: TempDir,
    /// Ports of the two data nodes (the first starts as master).
    pub nodes: Vec<u16>,
    pub sentinels: Vec<u16>,
    children: Vec<Child>,
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl SentinelSetup {
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("redq-test-sentinel-")
            .tempdir()
            .expect("temp dir");
        let mut setup = Self {
            dir,
            nodes: vec![free_port(), free_port()],
            sentinels: vec![free_port(), free_port(), free_port()],
            children: Vec::new(),
        };
        let master = setup.nodes[0];
        for (i, port) in setup.nodes.clone().into_iter().enumerate() {
            let node_dir = setup.dir.path().join(format!("node-{i}"));
            std::fs::create_dir_all(&node_dir).unwrap();
            let mut cmd = Command::new("redis-server");
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--appendonly", "yes", "--save", ""])
                .args([
                    "--repl-diskless-sync",
                    "yes",
                    "--repl-diskless-sync-delay",
                    "0",
                ])
                .arg("--dir")
                .arg(&node_dir)
                .arg("--logfile")
                .arg(node_dir.join("redis.log"));
            if i > 0 {
                cmd.args(["--replicaof", "127.0.0.1", &master.to_string()]);
            }
            setup.spawn(cmd);
            wait_until("a data node starts", || {
                cli(port, &["PING"]).trim() == "PONG"
            });
        }
        wait_until("the replica syncs", || {
            cli(setup.nodes[1], &["INFO", "replication"]).contains("master_link_status:up")
        });
        for (i, port) in setup.sentinels.clone().into_iter().enumerate() {
            let conf = setup.dir.path().join(format!("sentinel-{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\nsentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 5000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n"
                ),
            )
            .unwrap();
            let mut cmd = Command::new("redis-server");
            cmd.arg(&conf)
                .arg("--sentinel")
                .arg("--logfile")
                .arg(setup.dir.path().join(format!("sentinel-{i}.log")));
            setup.spawn(cmd);
            wait_until("a sentinel starts", || {
                cli(port, &["PING"]).trim() == "PONG"
            });
        }
        // Every Sentinel knows the replica and the other Sentinels.
        wait_until("the sentinels see each other", || {
            setup.sentinels.iter().all(|&s| {
                let info = cli(s, &["SENTINEL", "MASTER", MASTER_NAME]);
                let field = |name: &str| {
                    let lines: Vec<&str> = info.lines().collect();
                    lines
                        .iter()
                        .position(|l| *l == name)
                        .and_then(|i| lines.get(i + 1))
                        .and_then(|v| v.parse::<u32>().ok())
                        .unwrap_or(0)
                };
                field("num-slaves") >= 1 && field("num-other-sentinels") >= 2
            })
        });
        setup
    }

    fn spawn(&mut self, mut cmd: Command) {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn redis-server");
        self.children.push(child);
    }

    /// `redis+sentinel://` URL naming the three Sentinels.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// The port of the master, as the first Sentinel says.
    pub fn master(&self) -> u16 {
        cli(
            self.sentinels[0],
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
        )
        .lines()
        .nth(1)
        .and_then(|p| p.trim().parse().ok())
        .expect("the master's port")
    }

    /// `SENTINEL FAILOVER`, then waits until the other node is master and the
    /// old one has become its replica (what `WAIT 1` needs).
    pub fn failover(&self) {
        let old = self.master();
        let new = *self.nodes.iter().find(|&&p| p != old).unwrap();
        let answer = cli(self.sentinels[0], &["SENTINEL", "FAILOVER", MASTER_NAME]);
        assert!(answer.contains("OK"), "SENTINEL FAILOVER: {answer}");
        wait_until("the replica is promoted", || {
            cli(new, &["ROLE"]).starts_with("master") && self.master() == new
        });
        wait_until("the old master follows the new one", || {
            cli(old, &["INFO", "replication"]).contains("master_link_status:up")
        });
    }
}

impl Drop for SentinelSetup {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
