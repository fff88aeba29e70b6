//! The `redq` client subcommands run as processes against a test server, and
//! what they printed.

use std::process::{ExitStatus, Stdio};

use super::{EVENTUALLY, TestServer, redq_bin};

/// What a finished `redq` process printed.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// Stdout's lines; panics (showing stderr) unless the process succeeded.
    #[track_caller]
    pub fn ok_lines(&self) -> Vec<String> {
        assert!(self.status.success(), "redq failed: {self:?}");
        self.stdout.lines().map(str::to_string).collect()
    }

    /// Asserts a failure reported on exactly one stderr line starting with
    /// `redq: <prefix>`, without a panic; returns that line.
    #[track_caller]
    pub fn one_line_error(&self, prefix: &str) -> String {
        assert!(!self.status.success(), "expected a failure: {self:?}");
        assert!(!self.stderr.contains("panicked"), "panicked: {self:?}");
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one stderr line: {self:?}");
        assert!(
            lines[0].starts_with(&format!("redq: {prefix}")),
            "stderr should start with 'redq: {prefix}': {self:?}"
        );
        lines[0].to_string()
    }
}

/// Runs `redq <args>` against `server` (through `REDQ_SERVER`), feeding it
/// `stdin` (or none), and waits for it to exit (bounded by `EVENTUALLY`).
pub async fn redq(server: &TestServer, args: &[&str], stdin: Option<&[u8]>) -> Output {
    redq_at(&server.grpc_url(), args, stdin).await
}

/// `redq` as above, against the server at `server_url`.
pub async fn redq_at(server_url: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    use tokio::io::AsyncWriteExt;
    let mut cmd = tokio::process::Command::new(redq_bin());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("REDQ_") {
            cmd.env_remove(key);
        }
    }
    cmd.args(args)
        .env("REDQ_SERVER", server_url)
        .env("NO_COLOR", "1")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn redq");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        pipe.write_all(input).await.expect("write stdin");
        drop(pipe);
    }
    let output = tokio::time::timeout(EVENTUALLY, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("redq {args:?} still running after {EVENTUALLY:?}"))
        .expect("wait for redq");
    Output {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
