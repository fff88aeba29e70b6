//! The one shutdown path: SIGTERM or SIGINT.

/// Resolves on the first SIGTERM or SIGINT (Ctrl-C).
pub async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the process can only be killed: wait forever.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = interrupt.recv() => tracing::info!("SIGINT received, shutting down"),
    }
}
