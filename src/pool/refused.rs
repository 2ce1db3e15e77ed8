//! A node refusing one client is that client's matter, not the node's.
//!
//! Closes at once (the backend closed a client's connection at once,
//! having sent it nothing) count toward `quarantine.failures` only as far
//! as they come from at least 2 client addresses ([`ClosedFrom`]). The
//! address a backend refused is steered to the pool's other backends for
//! `quarantine.base`: [`Refusals`] remembers it, in a bounded memory
//! (`quarantine.refused_clients` entries; the oldest go first, and an
//! entry whose window is over is forgotten at the next record or
//! selection).
//!
//! Addresses are keyed as the per-source limit keys them
//! ([`source_of`](crate::pool::admission::source_of): IPv4 /32, IPv6 /64).
//! Pure: the caller passes `now`.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::pool::health::later;
use crate::pool::registry::BackendId;

/// Where a backend's closes at once since it last served came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClosedFrom {
    /// No close at once (or none whose client is known: a saved record).
    Nobody,
    /// Every one from this client address.
    One(IpAddr),
    /// From at least 2 client addresses.
    Many,
}

impl ClosedFrom {
    /// With one more close from `client`.
    pub(in crate::pool) fn and(self, client: IpAddr) -> ClosedFrom {
        match self {
            ClosedFrom::Nobody => ClosedFrom::One(client),
            ClosedFrom::One(first) if first == client => self,
            ClosedFrom::One(_) | ClosedFrom::Many => ClosedFrom::Many,
        }
    }
}

/// One client address one backend refused.
#[derive(Debug, Clone, Copy)]
struct RefusedClient {
    /// Its closes at once in a row (each within the window of the last).
    count: u32,
    /// Steered away from the backend until then.
    until: Instant,
    /// Its place in [`Refusals::order`].
    seq: u64,
}

/// The client addresses each backend of a pool refused lately.
#[derive(Debug, Default)]
pub(in crate::pool) struct Refusals {
    entries: HashMap<(IpAddr, BackendId), RefusedClient>,
    /// Every entry by the sequence number of its last refusal: the
    /// oldest goes first when the memory is full.
    order: BTreeMap<u64, (IpAddr, BackendId)>,
    next: u64,
}

impl Refusals {
    /// `backend` closed a connection of `client` at once at `now`: steer
    /// the address away from it for `window` from now, remembering at most
    /// `cap` entries (the oldest are forgotten). Returns the address's
    /// closes at once by that backend in a row.
    pub(in crate::pool) fn record(
        &mut self,
        client: IpAddr,
        backend: BackendId,
        now: Instant,
        window: Duration,
        cap: usize,
    ) -> u32 {
        self.forget_expired(now);
        let key = (client, backend);
        let seq = self.next;
        self.next += 1;
        let count = match self.entries.get(&key) {
            Some(old) => {
                self.order.remove(&old.seq);
                if now < old.until {
                    old.count.saturating_add(1)
                } else {
                    1
                }
            }
            None => 1,
        };
        self.entries.insert(
            key,
            RefusedClient {
                count,
                until: later(now, window),
                seq,
            },
        );
        self.order.insert(seq, key);
        while self.entries.len() > cap.max(1) {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        count
    }

    /// Forget the entries whose window is over at `now`, oldest refusal
    /// first, up to the first one still running: selection then skips its
    /// lookups once every window is over. (A reload that shortened the
    /// window can leave an older entry's longer one in front; the entries
    /// behind it wait for it, or for the cap.)
    pub(in crate::pool) fn forget_expired(&mut self, now: Instant) {
        while let Some((&seq, key)) = self.order.first_key_value() {
            match self.entries.get(key) {
                Some(r) if now < r.until => break,
                Some(_) => {
                    self.entries.remove(key);
                }
                None => {}
            }
            self.order.remove(&seq);
        }
    }

    /// True while `backend` refused `client` within its window.
    pub(in crate::pool) fn refuses(
        &self,
        client: IpAddr,
        backend: BackendId,
        now: Instant,
    ) -> bool {
        self.entries
            .get(&(client, backend))
            .is_some_and(|r| now < r.until)
    }

    /// Whether each backend refused `client` at `now`, for selection
    /// (no lookup while nothing is remembered).
    pub(in crate::pool) fn of(&self, client: IpAddr, now: Instant) -> impl Fn(BackendId) -> bool {
        move |backend| !self.is_empty() && self.refuses(client, backend, now)
    }

    /// Nothing remembered.
    pub(in crate::pool) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries remembered (each once in `entries` and once in `order`).
    #[cfg(test)]
    fn len(&self) -> usize {
        assert_eq!(self.order.len(), self.entries.len(), "{self:?}");
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn closes_from_one_address_stay_one_and_a_second_makes_many() {
        let (x, y) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let from = ClosedFrom::Nobody.and(x);
        assert_eq!(from, ClosedFrom::One(x));
        assert_eq!(from.and(x), ClosedFrom::One(x));
        assert_eq!(from.and(y), ClosedFrom::Many);
        assert_eq!(ClosedFrom::Many.and(x), ClosedFrom::Many);
    }

    #[test]
    fn a_refused_address_is_steered_from_that_backend_only_for_the_window() {
        let t = Instant::now();
        let mut r = Refusals::default();
        let x = ip("10.0.0.1");
        assert!(r.is_empty());
        assert_eq!(r.record(x, 1, t, 10 * S, 8), 1);
        assert!(r.refuses(x, 1, t + 9 * S));
        assert!(!r.refuses(x, 1, t + 10 * S), "the window is over");
        assert!(!r.refuses(x, 2, t), "another backend did not refuse it");
        assert!(
            !r.refuses(ip("10.0.0.2"), 1, t),
            "another address is not steered"
        );
    }

    #[test]
    fn closes_in_a_row_renew_the_window_and_count_until_one_lapses() {
        let t = Instant::now();
        let mut r = Refusals::default();
        let x = ip("10.0.0.1");
        assert_eq!(r.record(x, 1, t, 10 * S, 8), 1);
        assert_eq!(r.record(x, 1, t + 5 * S, 10 * S, 8), 2);
        assert!(r.refuses(x, 1, t + 14 * S), "renewed from the second");
        assert_eq!(r.record(x, 1, t + 14 * S, 10 * S, 8), 3);
        assert_eq!(
            r.record(x, 1, t + 30 * S, 10 * S, 8),
            1,
            "lapsed: a new row"
        );
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn entries_whose_window_is_over_are_forgotten() {
        let t = Instant::now();
        let mut r = Refusals::default();
        let (a, b, c) = (ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3"));
        r.record(a, 1, t, 10 * S, 8);
        r.record(b, 2, t + S, 10 * S, 8);
        r.forget_expired(t + 10 * S);
        assert_eq!(r.len(), 1, "A's window is over, B's is not");
        assert!(r.refuses(b, 2, t + 10 * S));
        r.record(c, 1, t + 30 * S, 10 * S, 8);
        assert_eq!(r.len(), 1, "B's window lapsed before C was recorded");
        assert!(r.refuses(c, 1, t + 30 * S));
        r.forget_expired(t + 40 * S);
        assert!(r.is_empty(), "nothing left: selection looks nothing up");
        assert_eq!(r.len(), 0);
        // An older refusal with a longer window (one recorded before a
        // reload shortened it) holds the expired ones behind it until its
        // own ends; none of them is steered meanwhile.
        r.record(a, 1, t, 100 * S, 8);
        r.record(b, 1, t + S, 10 * S, 8);
        r.forget_expired(t + 50 * S);
        assert_eq!(r.len(), 2);
        assert!(r.refuses(a, 1, t + 50 * S));
        assert!(!r.refuses(b, 1, t + 50 * S));
        r.forget_expired(t + 100 * S);
        assert!(r.is_empty());
    }

    #[test]
    fn the_memory_is_bounded_and_forgets_the_least_recently_refused() {
        let t = Instant::now();
        let mut r = Refusals::default();
        let (a, b, c) = (ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3"));
        r.record(a, 1, t, 10 * S, 2);
        r.record(b, 1, t, 10 * S, 2);
        // A refused again: now B is the oldest.
        r.record(a, 1, t + S, 10 * S, 2);
        r.record(c, 1, t + S, 10 * S, 2);
        assert_eq!(r.len(), 2);
        assert!(r.refuses(a, 1, t + S));
        assert!(!r.refuses(b, 1, t + S), "the oldest went first");
        assert!(r.refuses(c, 1, t + S));
        // A smaller cap (a reload) applies at the next record.
        r.record(c, 2, t + 2 * S, 10 * S, 1);
        assert_eq!(r.len(), 1);
        assert!(r.refuses(c, 2, t + 2 * S));
    }
}
