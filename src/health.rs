//! Readiness: whether Redis answers and every background loop still runs,
//! reported over `grpc.health.v1.Health` and over HTTP `/healthz`, `/readyz`.

use crate::store::Store;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

/// The gRPC services whose status follows readiness ("" is the whole server).
const SERVICES: &[&str] = &["", "redq.v1.QueueService"];
const CHECK_EVERY: Duration = Duration::from_secs(1);
const PING_TIMEOUT: Duration = Duration::from_secs(2);
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct Health {
    inner: Arc<Inner>,
}

struct Inner {
    reporter: HealthReporter,
    redis_reachable: AtomicBool,
    /// Where the health check asks Redis, for /readyz and the logs.
    redis_location: Mutex<String>,
    dead_loops: Mutex<Vec<&'static str>>,
    shutdown: CancellationToken,
}

impl Health {
    pub fn new(reporter: HealthReporter, shutdown: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Inner {
                reporter,
                redis_reachable: AtomicBool::new(false),
                redis_location: Mutex::new("redis".into()),
                dead_loops: Mutex::default(),
                shutdown,
            }),
        }
    }

    /// Serving: Redis answers, every background loop runs, no shutdown yet.
    pub fn is_ready(&self) -> bool {
        self.not_ready_reason().is_none()
    }

    /// Why the server is not ready, for /readyz; None when it is.
    pub fn not_ready_reason(&self) -> Option<String> {
        if self.inner.shutdown.is_cancelled() {
            return Some("shutting down".into());
        }
        if !self.inner.redis_reachable.load(Ordering::Relaxed) {
            let location = self.inner.redis_location.lock().expect("health lock");
            return Some(format!("cannot reach {location}"));
        }
        let dead = self.inner.dead_loops.lock().expect("health lock");
        (!dead.is_empty()).then(|| format!("background loops stopped: {}", dead.join(", ")))
    }

    /// Whether the last check reached Redis.
    pub fn redis_reachable(&self) -> bool {
        self.inner.redis_reachable.load(Ordering::Relaxed)
    }

    /// The background loops that stopped before shutdown (none while healthy).
    pub fn dead_loops(&self) -> Vec<&'static str> {
        self.inner.dead_loops.lock().expect("health lock").clone()
    }

    /// Pushes the current readiness to the gRPC health service.
    pub async fn publish(&self) {
        let status = if self.is_ready() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for service in SERVICES {
            self.inner
                .reporter
                .set_service_status(*service, status)
                .await;
        }
    }

    /// Runs a background loop; if it ever stops before shutdown (a bug, a
    /// panic), the server stops being ready so that it gets restarted.
    pub fn spawn_loop<F>(&self, name: &'static str, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let health = self.clone();
        let handle = tokio::spawn(task);
        tokio::spawn(async move {
            let outcome = handle.await;
            if !health.inner.shutdown.is_cancelled() {
                tracing::error!(task = name, ?outcome, "background loop stopped");
                health
                    .inner
                    .dead_loops
                    .lock()
                    .expect("health lock")
                    .push(name);
                health.publish().await;
            }
        });
    }

    /// Background loop: pings Redis, with backoff while it is unreachable,
    /// and updates readiness when it changes.
    pub async fn run_monitor(self, store: Store) {
        let mut warned_durability = false;
        let mut retry = RETRY_MIN;
        let location = store.registry_location();
        *self.inner.redis_location.lock().expect("health lock") = location.clone();
        loop {
            let reachable = matches!(
                tokio::time::timeout(PING_TIMEOUT, store.ping()).await,
                Ok(Ok(()))
            );
            let was = self
                .inner
                .redis_reachable
                .swap(reachable, Ordering::Relaxed);
            if reachable != was {
                if reachable {
                    tracing::info!("redis reachable");
                } else {
                    tracing::warn!(at = %location, "redis unreachable, retrying");
                }
                self.publish().await;
            }
            if reachable && !warned_durability {
                warned_durability = true;
                warn_about_durability(&store).await;
            }
            let pause = if reachable {
                retry = RETRY_MIN;
                CHECK_EVERY
            } else {
                retry = (retry * 2).min(RETRY_MAX);
                retry
            };
            tokio::select! {
                _ = self.inner.shutdown.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// `/healthz` (the process is alive) and `/readyz` (it can serve).
    pub fn http_routes(&self) -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok\n" }))
            .route("/readyz", get(readyz))
            .with_state(self.clone())
    }
}

async fn readyz(State(health): State<Health>) -> (StatusCode, String) {
    match health.not_ready_reason() {
        None => (StatusCode::OK, "ready\n".into()),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    }
}

async fn warn_about_durability(store: &Store) {
    match store.durability_warnings().await {
        Ok(warnings) => {
            for (name, value, advice) in warnings {
                tracing::warn!(setting = %name, %value, "redis durability: {advice}");
            }
        }
        Err(err) => tracing::debug!(error = ?err, "could not read redis configuration"),
    }
}
