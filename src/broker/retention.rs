//! Keeping Redis bounded: the retention loop trims every topic's stream
//! (never past what a subscription still needs), and the memory guard
//! refuses publishing before Redis reaches its `maxmemory`.

use crate::store::{Store, TopicKeys};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often Redis' memory use is read.
const MEMORY_EVERY: Duration = Duration::from_secs(1);

/// Background loop: applies each topic's retention.
pub async fn run_trimmer(
    store: Store,
    default_max_age: Duration,
    every: Duration,
    shutdown: CancellationToken,
) {
    loop {
        match store.topics().await {
            Ok(topics) => {
                for topic in topics {
                    match store.trim(&TopicKeys::new(&topic), default_max_age).await {
                        Ok((trimmed, dropped)) if trimmed + dropped > 0 => {
                            tracing::debug!(%topic, trimmed, dropped, "trimmed")
                        }
                        Ok(_) => {}
                        Err(err) => tracing::debug!(%topic, error = ?err, "trim failed"),
                    }
                }
            }
            Err(err) => tracing::debug!(error = ?err, "trimmer cannot list topics"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// Whether Redis is too full to accept more messages.
#[derive(Clone, Default)]
pub struct MemoryGuard {
    full: Arc<AtomicBool>,
}

impl MemoryGuard {
    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::Relaxed)
    }

    /// Background loop: reads Redis' memory use and compares it with
    /// `limit` (a fraction of `maxmemory`).
    pub async fn run(self, store: Store, limit: f64, shutdown: CancellationToken) {
        loop {
            if let Ok(usage) = store.memory_use().await {
                let full = usage.is_some_and(|used| used >= limit);
                if full != self.full.swap(full, Ordering::Relaxed) {
                    if full {
                        tracing::warn!(limit, "redis memory above the limit, refusing publishes");
                    } else {
                        tracing::info!("redis memory below the limit, accepting publishes");
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(MEMORY_EVERY) => {}
            }
        }
    }
}
