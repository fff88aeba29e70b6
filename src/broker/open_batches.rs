//! A stream's open batch timers: which of its deliveries each fetch's batch
//! timer still waits for.
//!
//! A fetch leaves one timer for the new entries it hands out
//! (fetch_deliveries.lua). When the client has acked them all, the timer
//! covers nothing, yet it stays in Redis until it falls due a lease later,
//! and a fetch then spends an `XPENDING` and a `ZREM` to settle it: at a
//! steady rate, one fetch's worth of Redis work per fetch, 30 s behind. The
//! stream sees every ack its client sends, so it tells which timers are done
//! and the ack that finishes one takes it away (ack_held in lib.lua, which
//! checks first that the consumer holds nothing of its range).
//!
//! Only a shortcut: a timer this loses track of (its deliveries acked
//! elsewhere, its lease run out, the stream closed) is settled as before.
//! Only streams whose acks come on the stream itself (StreamingSubscribe)
//! keep track: a Subscribe stream's acks are unary calls it never sees.

use crate::model::{BatchTimer, Lease};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use tokio::time::Instant;

/// Open batches past which the oldest is forgotten (settled when due).
const MAX_OPEN: usize = 4096;

/// The open batch timers of one stream, whose consumer is `consumer`.
#[derive(Debug)]
pub struct OpenBatches {
    consumer: String,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Off until the stream says its acks come its way ([`OpenBatches::track`]).
    tracking: bool,
    /// By the order the fetches were made.
    open: BTreeMap<u64, Open>,
    next: u64,
    /// Entry id → the batch that covers its delivery.
    batch_of: HashMap<String, u64>,
    /// Timers whose deliveries were all resolved, for the next ack call.
    finished: Vec<BatchTimer>,
}

#[derive(Debug)]
struct Open {
    timer: BatchTimer,
    entries: Vec<String>,
    /// Deliveries not yet resolved.
    left: usize,
    /// When the lease ends: a fetch may settle the timer from then on.
    until: Instant,
}

impl OpenBatches {
    pub fn new(consumer: &str) -> Self {
        Self {
            consumer: consumer.to_owned(),
            inner: Mutex::default(),
        }
    }

    /// From now on, keeps track of the batches: the stream's client acks on it.
    pub fn track(&self) {
        self.lock().tracking = true;
    }

    /// Records a fetch's batch timer, which covers the deliveries of
    /// `entries` until `until`.
    pub fn opened(&self, timer: BatchTimer, entries: Vec<String>, until: Instant) {
        let mut inner = self.lock();
        if !inner.tracking || entries.is_empty() {
            return; // an empty batch covers nothing: it is for a fetch to settle
        }
        inner.forget_ended(Instant::now());
        let at = inner.next;
        inner.next += 1;
        for entry in &entries {
            inner.batch_of.insert(entry.clone(), at);
        }
        let left = entries.len();
        inner.open.insert(
            at,
            Open {
                timer,
                entries,
                left,
                until,
            },
        );
    }

    /// Notes that the client acked, nacked or extended these deliveries.
    pub fn resolved<'a>(&self, leases: impl IntoIterator<Item = &'a Lease>) {
        let mut inner = self.lock();
        for lease in leases {
            if lease.consumer != self.consumer || lease.attempt != 1 {
                continue; // a batch timer covers first deliveries of its own consumer
            }
            let Some(at) = inner.batch_of.remove(&lease.entry_id) else {
                continue;
            };
            let Some(open) = inner.open.get_mut(&at) else {
                continue;
            };
            open.left -= 1;
            if open.left == 0
                && let Some(done) = inner.open.remove(&at)
            {
                inner.finished.push(done.timer);
            }
        }
    }

    /// The timers finished since the last call, for an ack call to take away.
    pub fn take_finished(&self) -> Vec<BatchTimer> {
        std::mem::take(&mut self.lock().finished)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("open batches lock")
    }
}

impl Inner {
    /// Forgets the batches whose lease ended (a fetch may be settling them)
    /// and, past [`MAX_OPEN`], the oldest.
    fn forget_ended(&mut self, now: Instant) {
        loop {
            let crowded = self.open.len() >= MAX_OPEN;
            let Some(oldest) = self.open.first_entry() else {
                break;
            };
            if oldest.get().until > now && !crowded {
                break;
            }
            let open = oldest.remove();
            for id in &open.entries {
                self.batch_of.remove(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn tracking() -> OpenBatches {
        let batches = OpenBatches::new("c");
        batches.track();
        batches
    }

    #[test]
    fn a_stream_that_does_not_track_records_nothing() {
        let batches = OpenBatches::new("c");
        let later = Instant::now() + Duration::from_secs(30);
        batches.opened(timer("1-0", "1-0"), ids(&["1-0"]), later);
        batches.resolved(&[lease("1-0", "c", 1)]);
        assert!(batches.take_finished().is_empty());
        assert!(batches.lock().batch_of.is_empty());
    }

    fn timer(first: &str, last: &str) -> BatchTimer {
        BatchTimer {
            consumer: "c".into(),
            first: first.into(),
            last: last.into(),
        }
    }

    fn lease(entry_id: &str, consumer: &str, attempt: u32) -> Lease {
        Lease {
            entry_id: entry_id.into(),
            consumer: consumer.into(),
            attempt,
        }
    }

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| id.to_string()).collect()
    }

    #[test]
    fn a_timer_is_finished_once_each_of_its_deliveries_is_resolved() {
        let batches = tracking();
        let later = Instant::now() + Duration::from_secs(30);
        batches.opened(timer("1-0", "1-2"), ids(&["1-0", "1-1", "1-2"]), later);
        batches.opened(timer("2-0", "2-0"), ids(&["2-0"]), later);
        batches.resolved(&[lease("1-0", "c", 1), lease("2-0", "c", 1)]);
        assert_eq!(batches.take_finished(), vec![timer("2-0", "2-0")]);
        batches.resolved(&[lease("1-1", "c", 1), lease("1-1", "c", 1)]);
        assert!(batches.take_finished().is_empty(), "1-2 is still out");
        batches.resolved(&[lease("1-2", "c", 1)]);
        assert_eq!(batches.take_finished(), vec![timer("1-0", "1-2")]);
        assert!(batches.take_finished().is_empty(), "taken once");
    }

    #[test]
    fn leases_of_other_consumers_and_redeliveries_resolve_nothing() {
        let batches = tracking();
        let later = Instant::now() + Duration::from_secs(30);
        batches.opened(timer("1-0", "1-0"), ids(&["1-0"]), later);
        batches.resolved(&[lease("1-0", "other", 1), lease("1-0", "c", 2)]);
        assert!(batches.take_finished().is_empty());
    }

    #[test]
    fn batches_whose_lease_ended_are_forgotten() {
        let batches = tracking();
        let now = Instant::now();
        batches.opened(timer("1-0", "1-0"), ids(&["1-0"]), now);
        batches.opened(
            timer("2-0", "2-0"),
            ids(&["2-0"]),
            now + Duration::from_secs(30),
        );
        batches.resolved(&[lease("1-0", "c", 1), lease("2-0", "c", 1)]);
        assert_eq!(batches.take_finished(), vec![timer("2-0", "2-0")]);
        assert!(batches.lock().batch_of.is_empty());
    }

    #[test]
    fn the_open_batches_are_bounded() {
        let batches = tracking();
        let later = Instant::now() + Duration::from_secs(30);
        for n in 0..MAX_OPEN + 10 {
            let id = format!("{n}-0");
            batches.opened(timer(&id, &id), vec![id.clone()], later);
        }
        let inner = batches.lock();
        assert_eq!(inner.open.len(), MAX_OPEN);
        assert_eq!(inner.batch_of.len(), MAX_OPEN);
    }
}
