//! The TCP connections a child process holds, and their `TCP_NODELAY`: read
//! from `/proc` and from copies of the child's sockets (`pidfd_getfd`, which
//! a parent may use on its child).

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::io::AsRawFd;

/// One established TCP connection of the process.
#[derive(Debug)]
pub struct TcpConnection {
    pub remote_port: u16,
    pub nodelay: bool,
}

/// Established connections of `pid` whose remote port is one of `ports`.
pub fn tcp_connections_to(pid: i32, ports: &[u16]) -> Vec<TcpConnection> {
    // Socket inode -> remote port, for the connections to `ports`.
    let mut remote_of = std::collections::HashMap::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let port = remote
                .rsplit(':')
                .next()
                .and_then(|hex| u16::from_str_radix(hex, 16).ok());
            // State 01: established.
            if let Some(port) = port
                && *state == "01"
                && ports.contains(&port)
            {
                remote_of.insert(inode.to_string(), port);
            }
        }
    }

    // SAFETY: plain syscalls; a returned descriptor is owned at once.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    assert!(
        pidfd >= 0,
        "pidfd_open({pid}): {}",
        std::io::Error::last_os_error()
    );
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    let mut found = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).expect("the child's fds") {
        let entry = entry.expect("an fd entry");
        let Ok(link) = std::fs::read_link(entry.path()) else {
            continue; // closed meanwhile
        };
        let link = link.to_string_lossy();
        let Some(inode) = link
            .strip_prefix("socket:[")
            .and_then(|s| s.strip_suffix(']'))
        else {
            continue;
        };
        let Some(&remote_port) = remote_of.get(inode) else {
            continue;
        };
        let fd: i32 = entry
            .file_name()
            .to_string_lossy()
            .parse()
            .expect("an fd number");
        let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
        if copy < 0 {
            continue; // closed meanwhile
        }
        let copy = unsafe { OwnedFd::from_raw_fd(copy as i32) };
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let rc = unsafe {
            libc::getsockopt(
                copy.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "getsockopt: {}", std::io::Error::last_os_error());
        found.push(TcpConnection {
            remote_port,
            nodelay: value != 0,
        });
    }
    found
}

/// Asserts that `server` holds connections to some of `ports`, each with
/// `TCP_NODELAY` on.
#[track_caller]
pub fn assert_nagle_is_off(server: &super::TestServer, ports: &[u16]) {
    let connections = tcp_connections_to(server.pid(), ports);
    assert!(
        !connections.is_empty(),
        "redq holds no connections to {ports:?}"
    );
    let delayed: Vec<&TcpConnection> = connections.iter().filter(|c| !c.nodelay).collect();
    assert!(
        delayed.is_empty(),
        "connections with Nagle's algorithm on: {delayed:?} of {connections:?}"
    );
}
