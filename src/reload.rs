//! Reloading without a restart: certificates and the tokens file are read
//! again every `--reload-interval` when their contents changed, and at once
//! on SIGHUP. Contents are compared, not modification times or inotify
//! events: Kubernetes updates a Secret volume by swapping a symlink.

use crate::auth::TokensFile;
use crate::tls::ReloadingTls;
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub struct Reloadable {
    pub tls: Vec<Arc<ReloadingTls>>,
    pub tokens: Option<TokensFile>,
}

impl Reloadable {
    fn reload(&mut self) {
        for tls in &self.tls {
            tls.reload();
        }
        if let Some(tokens) = &mut self.tokens {
            tokens.reload();
        }
    }

    /// Background loop: reloads every `interval` and on SIGHUP, until `stop`.
    pub async fn run(mut self, interval: Duration, stop: CancellationToken) {
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(hangups) => Some(hangups),
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGHUP; reloading on the interval only");
                None
            }
        };
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
                Some(()) = async { match &mut hangups { Some(h) => h.recv().await, None => None } } => {
                    tracing::info!("SIGHUP: reloading certificates and tokens");
                }
            }
            self.reload();
        }
    }
}
