//! The tokens file on disk, read again when its contents change.

use super::TokenTable;
use crate::metrics::SecurityMetrics;
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::watch;

pub struct TokensFile {
    path: PathBuf,
    contents: [u8; 32],
    table: watch::Sender<Arc<TokenTable>>,
    metrics: SecurityMetrics,
}

impl TokensFile {
    /// Reads the file; the error says what is wrong in it (never a hash).
    pub fn load(
        path: PathBuf,
        metrics: SecurityMetrics,
    ) -> Result<(Self, watch::Receiver<Arc<TokenTable>>), String> {
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let table = TokenTable::parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let (sender, receiver) = watch::channel(Arc::new(table));
        Ok((
            Self {
                path,
                contents: Sha256::digest(&bytes).into(),
                table: sender,
                metrics,
            },
            receiver,
        ))
    }

    /// Reads the file again if its contents changed; a file that does not
    /// parse keeps the table in use, and is logged and counted.
    pub fn reload(&mut self) {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(err) => {
                self.metrics.reload_failed("tokens");
                tracing::warn!(file = %self.path.display(), error = %err, "cannot read the tokens file; keeping the tokens in use");
                return;
            }
        };
        let contents: [u8; 32] = Sha256::digest(&bytes).into();
        if contents == self.contents {
            return;
        }
        match TokenTable::parse(&bytes) {
            Ok(table) => {
                self.contents = contents;
                self.table.send_replace(Arc::new(table));
                tracing::info!(file = %self.path.display(), "loaded the changed tokens file");
            }
            Err(err) => {
                self.metrics.reload_failed("tokens");
                tracing::warn!(file = %self.path.display(), error = %err, "the changed tokens file does not load; keeping the tokens in use");
            }
        }
    }
}
