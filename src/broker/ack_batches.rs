//! The acks, nacks and deadline changes that arrive on one StreamingSubscribe
//! stream while its previous batch is applied, applied together: one ack
//! call, one nack call per delay, one extension per deadline. The twin of
//! `publish_batches.rs`, which does the same for publishes.

use super::Broker;
use super::ack_id::{self, AckId};
use super::handoff::Carry;
use crate::error::{Error, Result};
use crate::model::{AckConfirmation, BatchTimer, Lease};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// Ack ids gathered from a stream's requests, to apply together.
#[derive(Default)]
pub struct AckBatch {
    pub acks: Vec<AckId>,
    /// By nack delay (None: the retry backoff).
    pub nacks: BTreeMap<Option<Duration>, Vec<AckId>>,
    /// By new deadline.
    pub modifies: BTreeMap<Duration, Vec<AckId>>,
    /// Whether some request of the batch asked for a confirmation.
    pub confirm: bool,
    pub confirmation: AckConfirmation,
    /// The stream's batch timers these acks finish (see `OpenBatches`).
    pub finished: Vec<BatchTimer>,
}

impl AckBatch {
    pub fn ids(&self) -> usize {
        self.acks.len()
            + self.nacks.values().map(Vec::len).sum::<usize>()
            + self.modifies.values().map(Vec::len).sum::<usize>()
    }

    /// Every delivery the batch acks, nacks or extends.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        let nacks = self.nacks.values().flatten();
        let modifies = self.modifies.values().flatten();
        self.acks
            .iter()
            .chain(nacks)
            .chain(modifies)
            .map(|id| &id.lease)
    }

    /// Nothing to apply, and no confirmation asked for (a request with
    /// `confirm` and no ids still gets one: a barrier for the client).
    pub fn is_empty(&self) -> bool {
        self.ids() == 0 && self.confirmation.invalid_ids.is_empty() && !self.confirm
    }

    /// The ack ids redq issued; the others are reported as invalid when the
    /// request asks for a confirmation, and ignored otherwise.
    pub fn parse(&mut self, ids: Vec<String>, confirm: bool) -> Vec<AckId> {
        let mut parsed = Vec::with_capacity(ids.len());
        for id in ids {
            match ack_id::parse(&id) {
                Some(ack_id) => parsed.push(ack_id),
                None if confirm => self.confirmation.invalid_ids.push(id),
                None => {}
            }
        }
        parsed
    }
}

impl Broker {
    /// Applies a stream's batch on `topic`'s `subscription`. Returns the
    /// confirmation, when one was asked for; a lost lease is reported in it
    /// (or ignored), any other error ends the stream.
    pub async fn apply_ack_batch(
        &self,
        (topic, subscription): (&str, &str),
        batch: AckBatch,
    ) -> Result<Option<AckConfirmation>> {
        let AckBatch {
            acks,
            nacks,
            modifies,
            confirm,
            mut confirmation,
            finished,
        } = batch;
        if !acks.is_empty() {
            let names = (topic, subscription);
            if confirm {
                let applied = self
                    .ack_confirmed(names, &acks, finished, Carry::Fetches)
                    .await?;
                sort(
                    acks,
                    applied,
                    &mut confirmation.acked_ids,
                    &mut confirmation.lost_ids,
                );
            } else {
                self.ack(names, &acks, finished, Carry::Fetches).await?;
            }
        }
        for (delay, ids) in nacks {
            if ids.is_empty() {
                continue;
            }
            let lost = lost(self.nack(topic, subscription, &ids, delay).await)?;
            if confirm {
                let applied = not_in(&ids, &lost);
                let lost_ids = &mut confirmation.lost_ids;
                sort(ids, applied, &mut confirmation.nacked_ids, lost_ids);
            }
        }
        for (deadline, ids) in modifies {
            let lost = lost(
                self.modify_ack_deadline(topic, subscription, &ids, deadline)
                    .await,
            )?;
            if confirm {
                let applied = not_in(&ids, &lost);
                let lost_ids = &mut confirmation.lost_ids;
                sort(ids, applied, &mut confirmation.modified_ids, lost_ids);
            }
        }
        Ok(confirm.then_some(confirmation))
    }
}

/// The ack ids a lease call found lost; other errors end the stream.
fn lost(result: Result<()>) -> Result<HashSet<String>> {
    match result {
        Ok(()) => Ok(Default::default()),
        Err(Error::LeaseLost(lost)) => Ok(lost.into_iter().collect()),
        Err(err) => Err(err),
    }
}

/// For each id, whether it is not among the `lost` ones.
fn not_in(ids: &[AckId], lost: &HashSet<String>) -> Vec<bool> {
    ids.iter().map(|id| !lost.contains(&id.text)).collect()
}

/// Each id into `done` or `lost`, by whether it was applied.
fn sort(ids: Vec<AckId>, applied: Vec<bool>, done: &mut Vec<String>, lost: &mut Vec<String>) {
    for (id, applied) in ids.into_iter().zip(applied) {
        if applied {
            done.push(id.text)
        } else {
            lost.push(id.text)
        }
    }
}
