//! A real Redis Cluster for tests: 3 masters and 3 replicas on free ports
//! (with their own cluster-bus ports, so that test files run in parallel),
//! started with the settings the README recommends for tests and failovers.
//! Every node is SIGKILLed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::ports::{start_on_free_ports, wait_answering};

pub struct RedisCluster {
    dir: TempDir,
    pub nodes: Vec<ClusterNode>,
}

pub struct ClusterNode {
    pub port: u16,
    bus_port: u16,
    child: Option<Child>,
}

/// The port of the node a `CLUSTER NODES` line is about (`id ip:port@bus …`).
fn port_in(line: &str) -> Option<u16> {
    line.split_whitespace()
        .nth(1)?
        .split(['@', ':'])
        .nth(1)?
        .parse()
        .ok()
}

/// `redis-cli -p PORT ARGS…`, its output (panics if it cannot run).
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl RedisCluster {
    /// Starts six nodes, joins them into 3 shards of a master and a replica,
    /// and waits until every node says the cluster is ok.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("redq-test-cluster-")
            .tempdir()
            .expect("temp dir");
        let mut cluster = Self {
            dir,
            nodes: Vec::new(),
        };
        for i in 0..6 {
            cluster.nodes.push(ClusterNode {
                port: 0,
                bus_port: 0,
                child: None,
            });
            start_on_free_ports(2, &format!("cluster node {i}"), |ports| {
                // Nothing of a try that could not bind (its nodes.conf) stays.
                let _ = std::fs::remove_dir_all(cluster.node_dir(i));
                cluster.nodes[i].port = ports[0];
                cluster.nodes[i].bus_port = ports[1];
                cluster.try_launch(i)
            });
        }
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        cluster.wait_ok();
        // Every node has its role: 3 replicas, each following its master (by
        // each node's own ROLE, which gossip does not delay).
        let deadline = Instant::now() + Duration::from_secs(120);
        while cluster
            .nodes
            .iter()
            .filter(|n| cli(n.port, &["ROLE"]).starts_with("slave"))
            .count()
            < 3
        {
            assert!(Instant::now() < deadline, "the replicas did not join");
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster.wait_replicas_synced();
        cluster
    }

    fn node_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("node-{i}"))
    }

    /// Starts node `i` again, with its data and nodes.conf (on its ports).
    pub fn launch(&mut self, i: usize) {
        if let Err(log) = self.try_launch(i) {
            panic!("node {i} did not start again: {log}");
        }
    }

    /// Starts node `i` and waits until it answers; its log if it exits first.
    fn try_launch(&mut self, i: usize) -> Result<(), String> {
        let dir = self.node_dir(i);
        std::fs::create_dir_all(&dir).expect("node dir");
        let node = &self.nodes[i];
        let child = Command::new("redis-server")
            .args(["--port", &node.port.to_string()])
            .args(["--cluster-port", &node.bus_port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", "2000"])
            .args(["--cluster-require-full-coverage", "no"])
            .args(["--cluster-allow-replica-migration", "no"])
            .args(["--repl-diskless-sync", "yes"])
            .args(["--repl-diskless-sync-delay", "0"])
            .args(["--appendonly", "yes"])
            .args(["--save", ""])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn redis-server");
        self.nodes[i].child = Some(child);
        let node = &mut self.nodes[i];
        let child = node.child.as_mut().expect("just started");
        let answered = wait_answering(child, node.port, &dir.join("redis.log"));
        if answered.is_err() {
            self.nodes[i].child = None;
        }
        answered
    }

    /// SIGKILLs node `i`.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits (bounded) until every running node reports `cluster_state:ok`
    /// and sees every slot served.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                let info = cli(n.port, &["CLUSTER", "INFO"]);
                info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
            });
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster did not become ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (bounded) until every running replica's link to its master is up
    /// and it has caught up: a manual failover waits for that anyway, and
    /// gives up after a while.
    pub fn wait_replicas_synced(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let replicas: Vec<u16> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_some() && cli(n.port, &["ROLE"]).starts_with("slave"))
            .map(|n| n.port)
            .collect();
        for port in replicas {
            loop {
                let info = cli(port, &["INFO", "replication"]);
                let synced = info.contains("role:slave")
                    && info.contains("master_link_status:up")
                    && info.contains("master_sync_in_progress:0");
                if synced {
                    break;
                }
                assert!(Instant::now() < deadline, "replica {port} did not sync");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Waits (bounded) until the node on `port` is a master (a failover
    /// promoted it).
    pub fn wait_master(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !cli(port, &["ROLE"]).starts_with("master") {
            assert!(
                Instant::now() < deadline,
                "{port} did not take over\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (bounded) until every node agrees about which master owns
    /// which slot (redis-cli refuses to reshard before that).
    pub fn wait_agreed(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = Command::new("redis-cli")
                .args([
                    "--cluster",
                    "check",
                    &format!("127.0.0.1:{}", self.any_port()),
                ])
                .output()
                .expect("redis-cli --cluster check");
            let text = String::from_utf8_lossy(&out.stdout);
            if text.contains("All nodes agree about slots configuration")
                && !text.contains("[WARNING]")
            {
                return;
            }
            assert!(Instant::now() < deadline, "the nodes did not agree: {text}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `redis+cluster://` URL naming every node as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    fn any_port(&self) -> u16 {
        self.nodes
            .iter()
            .find(|n| n.child.is_some())
            .expect("a running node")
            .port
    }

    /// (port, slot ranges) of each master, from CLUSTER NODES.
    pub fn masters(&self) -> Vec<(u16, Vec<(u16, u16)>)> {
        cli(self.any_port(), &["CLUSTER", "NODES"])
            .lines()
            .filter(|l| l.contains("master") && !l.contains("fail"))
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let port = port_in(line)?;
                let ranges = fields[8..]
                    .iter()
                    .filter(|r| !r.starts_with('['))
                    .filter_map(|r| match r.split_once('-') {
                        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                        None => r.parse().ok().map(|s| (s, s)),
                    })
                    .collect();
                Some((port, ranges))
            })
            // A node that is still becoming a replica says master, with no slots.
            .filter(|(_, ranges): &(u16, Vec<(u16, u16)>)| !ranges.is_empty())
            .collect()
    }

    /// The port of the master serving `key`.
    pub fn master_of(&self, key: &str) -> u16 {
        let slot: u16 = cli(self.any_port(), &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("a slot");
        self.masters()
            .into_iter()
            .find(|(_, ranges)| ranges.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .map(|(port, _)| port)
            .expect("a master for the slot")
    }

    /// A master other than the one on `port`.
    pub fn another_master(&self, port: u16) -> u16 {
        self.masters()
            .into_iter()
            .map(|(p, _)| p)
            .find(|&p| p != port)
            .expect("another master")
    }

    /// How many slots the master on `port` serves.
    pub fn slots_of(&self, port: u16) -> usize {
        self.masters()
            .into_iter()
            .find(|(p, _)| *p == port)
            .map(|(_, ranges)| ranges.iter().map(|(a, b)| (b - a + 1) as usize).sum())
            .unwrap_or(0)
    }

    /// SIGKILLs the master on `port` and waits until one of its replicas
    /// has taken over; returns the killed node's index and the new master.
    pub fn kill9_master(&mut self, port: u16) -> (usize, u16) {
        let replica = self.replicas_of(port)[0];
        let index = self.index_of(port);
        self.kill9(index);
        self.wait_master(replica);
        (index, replica)
    }

    /// The index of the node listening on `port`.
    pub fn index_of(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .expect("a node on the port")
    }

    /// Replicas connected to the master on `port`, by the master's own ROLE
    /// (`master`, its offset, then ip, port and offset per replica): gossip,
    /// which CLUSTER NODES on another node reports, can lag behind it.
    pub fn replicas_of(&self, port: u16) -> Vec<u16> {
        let role = cli(port, &["ROLE"]);
        let lines: Vec<&str> = role.lines().collect();
        assert_eq!(lines.first(), Some(&"master"), "{port} is not a master");
        lines[2..]
            .chunks(3)
            .filter_map(|replica| replica.get(1)?.parse().ok())
            .collect()
    }

    /// Node logs, for failure messages.
    pub fn logs(&self) -> String {
        (0..self.nodes.len())
            .map(|i| {
                let log =
                    std::fs::read_to_string(self.node_dir(i).join("redis.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                format!(
                    "---- node {i} (port {}) ----\n{}",
                    self.nodes[i].port,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        for i in 0..self.nodes.len() {
            self.kill9(i);
        }
    }
}
