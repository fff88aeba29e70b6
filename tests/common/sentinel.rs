//! A real Sentinel setup for tests: one master, one replica and three
//! Sentinels on free ports (others when another program takes one first), quick to notice a failure. Every process is
//! SIGKILLed on drop.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::cluster::cli;
use super::ports::{start_on_free_ports, wait_answering};

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
            nodes: Vec::new(),
            sentinels: Vec::new(),
            children: Vec::new(),
        };
        for i in 0..2 {
            let node_dir = setup.dir.path().join(format!("node-{i}"));
            let master = setup.nodes.first().copied();
            let (ports, child) = start_on_free_ports(1, "a data node", |ports| {
                let _ = std::fs::remove_dir_all(&node_dir);
                std::fs::create_dir_all(&node_dir).unwrap();
                let mut cmd = Command::new("redis-server");
                cmd.args(["--port", &ports[0].to_string(), "--bind", "127.0.0.1"])
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
                if let Some(master) = master {
                    cmd.args(["--replicaof", "127.0.0.1", &master.to_string()]);
                }
                let mut child = spawn(cmd);
                wait_answering(&mut child, ports[0], &node_dir.join("redis.log")).map(|()| child)
            });
            setup.nodes.push(ports[0]);
            setup.children.push(child);
        }
        let master = setup.nodes[0];
        wait_until("the replica syncs", || {
            cli(setup.nodes[1], &["INFO", "replication"]).contains("master_link_status:up")
        });
        for i in 0..3 {
            let conf = setup.dir.path().join(format!("sentinel-{i}.conf"));
            let log = setup.dir.path().join(format!("sentinel-{i}.log"));
            let (ports, child) = start_on_free_ports(1, "a sentinel", |ports| {
                let port = ports[0];
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
                cmd.arg(&conf).arg("--sentinel").arg("--logfile").arg(&log);
                let mut child = spawn(cmd);
                wait_answering(&mut child, port, &log).map(|()| child)
            });
            setup.sentinels.push(ports[0]);
            setup.children.push(child);
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

/// Starts a redis-server (data node or Sentinel) as `cmd` says.
fn spawn(mut cmd: Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn redis-server")
}

impl Drop for SentinelSetup {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
