//! Byte budgets for what Subscribe streams hold in the server: deliveries
//! fetched from Redis and not yet taken by the client's connection. Each
//! stream has its own (`max_outstanding_bytes`) and all streams of a replica
//! share one (`--subscribe-buffer-bytes`), so clients that do not read stop
//! their streams from fetching instead of growing the server.
//!
//! Bytes are reserved when a fetch returns and given back when the response
//! holding them is handed to the connection (a [`Reservation`] drops).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::Notify;

/// One budget of bytes, shared by the reservations taken from it.
#[derive(Debug)]
pub struct ByteBudget {
    limit: AtomicU64,
    used: AtomicU64,
    freed: Notify,
}

impl ByteBudget {
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(Self {
            limit: AtomicU64::new(limit),
            used: AtomicU64::new(0),
            freed: Notify::new(),
        })
    }

    /// Bytes held now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn left(&self) -> u64 {
        self.limit
            .load(Ordering::Relaxed)
            .saturating_sub(self.used())
    }

    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
        self.freed.notify_waiters();
    }
}

/// A stream's budget and the replica's.
#[derive(Debug, Clone)]
pub struct StreamBudget {
    stream: Arc<ByteBudget>,
    replica: Arc<ByteBudget>,
}

impl StreamBudget {
    pub fn new(limit: u64, replica: Arc<ByteBudget>) -> Self {
        Self {
            stream: ByteBudget::new(limit),
            replica,
        }
    }

    /// Bytes the stream may fetch now. A stream that holds nothing may always
    /// fetch one message, however full the replica is, so that the clients
    /// that do read are slowed by those that do not, never stopped.
    pub fn available(&self) -> u64 {
        let left = self.stream.left().min(self.replica.left());
        if left == 0 && self.stream.used() == 0 {
            1
        } else {
            left
        }
    }

    /// The stream's own limit.
    pub fn limit(&self) -> u64 {
        self.stream.limit.load(Ordering::Relaxed)
    }

    /// Changes the stream's own limit (a flow-control update).
    pub fn set_limit(&self, limit: u64) {
        self.stream.limit.store(limit, Ordering::Relaxed);
        self.stream.freed.notify_waiters();
    }

    /// Waits until [`Self::available`] is above zero.
    pub async fn wait_for_room(&self) {
        loop {
            // Registered before the check, so a release between the two is not missed.
            let stream = self.stream.freed.notified();
            let replica = self.replica.freed.notified();
            tokio::pin!(stream, replica);
            stream.as_mut().enable();
            replica.as_mut().enable();
            if self.available() > 0 {
                return;
            }
            tokio::select! {
                _ = stream => {}
                _ = replica => {}
            }
        }
    }

    /// Counts `bytes` against both budgets until the reservation drops.
    pub fn reserve(&self, bytes: u64) -> Reservation {
        self.stream.used.fetch_add(bytes, Ordering::Relaxed);
        self.replica.used.fetch_add(bytes, Ordering::Relaxed);
        Reservation {
            budget: self.clone(),
            bytes,
        }
    }
}

/// Bytes counted against a stream's and the replica's budget; given back on drop.
#[derive(Debug)]
pub struct Reservation {
    budget: StreamBudget,
    bytes: u64,
}

impl Reservation {
    /// Moves up to `bytes` of this reservation into a new one.
    pub fn split(&mut self, bytes: u64) -> Reservation {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        Reservation {
            budget: self.budget.clone(),
            bytes,
        }
    }

    /// Adds `other` (of the same stream) to this reservation.
    pub fn merge(&mut self, mut other: Reservation) {
        self.bytes += std::mem::take(&mut other.bytes);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.stream.give_back(self.bytes);
            self.budget.replica.give_back(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_count_against_both_budgets_until_dropped() {
        let replica = ByteBudget::new(100);
        let a = StreamBudget::new(60, replica.clone());
        let b = StreamBudget::new(60, replica.clone());
        let mut held = a.reserve(50);
        assert_eq!(a.available(), 10);
        assert_eq!(b.available(), 50);
        let part = held.split(20);
        drop(held);
        assert_eq!(replica.used(), 20);
        let mut rest = b.reserve(80);
        // The replica is full; `a` holds something and waits, `b` too.
        assert_eq!(a.available(), 0);
        assert_eq!(b.available(), 0);
        drop(part);
        assert_eq!(a.available(), 20);
        rest.merge(b.reserve(20));
        // The replica is full again, but `a` holds nothing: one message is
        // always allowed.
        assert_eq!(a.available(), 1);
        drop(rest);
        assert_eq!(replica.used(), 0);
        assert_eq!(b.available(), 60);
    }

    #[tokio::test]
    async fn waiting_for_room_ends_when_bytes_are_given_back() {
        let budget = StreamBudget::new(10, ByteBudget::new(100));
        let held = budget.reserve(10);
        let waiter = tokio::spawn({
            let budget = budget.clone();
            async move { budget.wait_for_room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(held);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("joined");
    }
}
