//! TCP ports for the servers the tests start. Most of them listen on a Unix
//! socket or on port 0; Redis Cluster and Sentinel nodes must be given their
//! ports (they announce them to each other), and so must Redis over TCP or TLS.
//! A port that was free when probed can be taken by another program before
//! the server binds it, so a server that exits before it answers is started
//! again on other ports.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;
use std::process::Child;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::STARTUP_TIMEOUT;
use super::cluster::cli;

/// How many sets of ports a server is tried on before the test gives up.
const ATTEMPTS: usize = 5;

/// Redis Cluster's bus port when none is given: the client port + 10000.
const DEFAULT_BUS_OFFSET: u16 = 10_000;

/// A port nothing listens on now (the OS's choice for port 0), never handed
/// out before in this process (the OS may offer a port again once its probe
/// is closed, before the server it was for has bound it), and whose port +
/// 10000, the cluster bus port Redis takes when it is not told one, is free
/// too.
pub fn free_port() -> u16 {
    static HANDED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let bus_is_free = port
            .checked_add(DEFAULT_BUS_OFFSET)
            .is_some_and(|bus| TcpListener::bind(("127.0.0.1", bus)).is_ok());
        if bus_is_free && HANDED.lock().expect("ports lock").insert(port) {
            return port;
        }
    }
}

/// Starts a server on `count` free ports with `start`, which returns what it
/// started once it answers, or the server's log when it exited first; then
/// again on other ports, up to a bound (a genuine failure panics with the
/// last log).
pub fn start_on_free_ports<T>(
    count: usize,
    what: &str,
    mut start: impl FnMut(&[u16]) -> Result<T, String>,
) -> (Vec<u16>, T) {
    let mut last_log = String::new();
    for _ in 0..ATTEMPTS {
        let ports: Vec<u16> = (0..count).map(|_| free_port()).collect();
        match start(&ports) {
            Ok(started) => return (ports, started),
            Err(log) => last_log = log,
        }
    }
    panic!("{what} exited before answering, on {ATTEMPTS} sets of free ports\n{last_log}")
}

/// Waits (bounded) until the redis-server `child` answers on `port` as
/// itself (not as another server that holds the port); its log (at `log`)
/// when it exits first.
pub fn wait_answering(child: &mut Child, port: u16, log: &Path) -> Result<(), String> {
    let ours = format!("process_id:{}", child.id());
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        if cli(port, &["INFO", "server"])
            .lines()
            .any(|line| line.trim() == ours)
        {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            return Err(format!("exited with {status}; its log:\n{text}"));
        }
        assert!(
            Instant::now() < deadline,
            "redis-server on port {port} did not answer within {STARTUP_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
