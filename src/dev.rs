//! `redq dev`: a private redis-server (AOF on, data in one directory) plus the
//! server against it, for a first try on a laptop. Ctrl-C stops both.

use crate::config::DevArgs;
use crate::error::BoxError;
use crate::server;
use crate::store::Store;
use crate::store::connection::RedisAccess;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

const REDIS_START_TIMEOUT: Duration = Duration::from_secs(10);
const REDIS_STOP_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn run(args: DevArgs) -> Result<(), BoxError> {
    args.settings.limits.validate()?;
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| format!("cannot create {}: {e}", args.dir.display()))?;
    let dir = std::fs::canonicalize(&args.dir)?;
    let socket = dir.join("redis.sock");
    let mut redis = start_redis(&dir, &socket)?;
    let url = format!("unix://{}", socket.display());
    if let Err(err) = wait_until_ready(&url, &mut redis, &dir).await {
        let _ = redis.kill().await;
        return Err(err);
    }

    let result = serve(&args, &url).await;
    stop_redis(&mut redis).await;
    result
}

async fn serve(args: &DevArgs, url: &str) -> Result<(), BoxError> {
    let grpc = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let http = TcpListener::bind(args.metrics_listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.metrics_listen))?;
    let dashboard = args
        .settings
        .dashboard
        .enabled
        .then(|| http.local_addr())
        .transpose()?;
    print_welcome(grpc.local_addr()?, dashboard, &args.dir);
    let store = Store::new(&RedisAccess::url(url), args.settings.redis_pool_size)?
        .with_replica_wait(args.settings.replica_wait());
    server::run(
        grpc,
        http,
        store,
        args.settings.clone(),
        crate::shutdown::signal(),
    )
    .await
}

fn start_redis(dir: &Path, socket: &Path) -> Result<Child, BoxError> {
    let mut command = Command::new("redis-server");
    command
        .args(["--port", "0", "--unixsocket"])
        .arg(socket)
        .args(["--unixsocketperm", "700", "--dir"])
        .arg(dir)
        .args([
            "--appendonly",
            "yes",
            "--save",
            "",
            "--logfile",
            "redis.log",
        ])
        .args(["--maxmemory-policy", "noeviction"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    command.spawn().map_err(|err| -> BoxError {
        if err.kind() == std::io::ErrorKind::NotFound {
            "redis-server not found on PATH: install it (Debian/Ubuntu: `sudo apt-get install redis-server`, macOS: `brew install redis`) or run `redq serve --redis-url ...` against an existing Redis".into()
        } else {
            format!("cannot start redis-server: {err}").into()
        }
    })
}

async fn wait_until_ready(url: &str, redis: &mut Child, dir: &Path) -> Result<(), BoxError> {
    let store = Store::new(&RedisAccess::url(url), 1)?;
    let started = Instant::now();
    loop {
        if store.ping().await.is_ok() {
            return Ok(());
        }
        if let Some(status) = redis.try_wait()? {
            return Err(format!(
                "redis-server exited ({status}); see {}",
                dir.join("redis.log").display()
            )
            .into());
        }
        if started.elapsed() > REDIS_START_TIMEOUT {
            return Err(format!(
                "redis-server did not answer within {}s; see {}",
                REDIS_START_TIMEOUT.as_secs(),
                dir.join("redis.log").display()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SIGTERM lets Redis flush its append-only file before exiting.
async fn stop_redis(redis: &mut Child) {
    if let Some(pid) = redis.id() {
        // SAFETY: kill(2) with a pid we spawned and still own; no memory involved.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
    }
    match tokio::time::timeout(REDIS_STOP_TIMEOUT, redis.wait()).await {
        Ok(_) => tracing::info!("redis-server stopped"),
        Err(_) => {
            tracing::warn!("redis-server did not stop in time, killing it");
            let _ = redis.kill().await;
        }
    }
}

/// What a first-time user needs to talk to the server: printed, not logged.
fn print_welcome(addr: std::net::SocketAddr, dashboard: Option<std::net::SocketAddr>, dir: &Path) {
    let dashboard = dashboard.map_or_else(String::new, |http| {
        // An unspecified address (0.0.0.0) is not one a browser can open.
        let http = if http.ip().is_unspecified() {
            std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), http.port())
        } else {
            http
        };
        format!("Dashboard: http://{http}/ui/\n")
    });
    println!(
        r#"
redq dev is running: gRPC on {addr}, Redis data in {dir}
{dashboard}Try it (grpcurl: https://github.com/fullstorydev/grpcurl):

  grpcurl -plaintext -d '{{"topic":"hello","messages":[{{"payload":"aGVsbG8="}}]}}' \
    {addr} redq.v1.QueueService/Publish
  grpcurl -plaintext -d '{{"topic":"hello","subscription":"first"}}' \
    {addr} redq.v1.QueueService/Subscribe

Press Ctrl-C to stop.
"#,
        dir = dir.display()
    );
}
