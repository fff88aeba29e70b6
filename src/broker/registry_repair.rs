//! Keeping the topic registry whole: it is one key on one master, while each
//! topic lives on its own, so a failover can lose a registration whose topic
//! survived. Every background loop sweeps the registry, so an unregistered
//! topic would get no promotion, redelivery timers or retention.

use crate::store::Store;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often every master is scanned for unregistered topics (and once at
/// start). A scan reads every key, so it is rare.
const REPAIR_EVERY: Duration = Duration::from_secs(600);

/// Background loop: registers the topics found on the masters but missing
/// from the registry.
pub async fn run(store: Store, shutdown: CancellationToken) {
    loop {
        match store.repair_topic_registry().await {
            Ok(added) if !added.is_empty() => {
                tracing::warn!(?added, "registered topics missing from the topic registry")
            }
            Ok(_) => {}
            Err(err) => tracing::debug!(error = ?err, "topic registry repair failed"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(REPAIR_EVERY) => {}
        }
    }
}
