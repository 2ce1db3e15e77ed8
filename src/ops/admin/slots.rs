//! Admission to the admin endpoint: a fixed number of connection slots, a
//! share of them per source address, so that one busy or hostile client
//! cannot take them all.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use crate::pool::admission::Refusal;

/// The slot counts. Lock rule: held only to count, never across `.await`.
#[derive(Debug)]
pub struct Slots {
    total: usize,
    per_source: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_source: HashMap<IpAddr, usize>,
}

/// One taken slot; dropping it gives the slot back.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    source: IpAddr,
}

impl Slots {
    /// `total` slots, at most `per_source` of them per source address.
    pub fn new(total: usize, per_source: usize) -> Arc<Slots> {
        Arc::new(Slots {
            total,
            per_source,
            held: Mutex::new(Held::default()),
        })
    }

    /// Take a slot for a client at `ip`, or say which bound is reached.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refusal> {
        let source = source(ip);
        let mut held = self.lock();
        if held.total >= self.total {
            return Err(Refusal::MaxConnections);
        }
        let mine = held.by_source.entry(source).or_insert(0);
        if *mine >= self.per_source {
            return Err(Refusal::PerSource);
        }
        *mine += 1;
        held.total += 1;
        Ok(Slot {
            slots: self.clone(),
            source,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // The counts are updated in one step each, so a panic elsewhere
        // cannot leave them half-changed: the poisoned value is sound.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.lock();
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by_source.get_mut(&self.source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.by_source.remove(&self.source);
            }
        }
    }
}

/// The source a client counts against: its IPv4 address, or its IPv6 /64
/// (one host usually holds a whole /64). IPv4-mapped IPv6 counts as IPv4.
pub fn source(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !(u128::MAX >> 64);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_source_gets_its_share_and_others_the_rest() {
        let slots = Slots::new(4, 2);
        let a1 = slots.take(ip("10.0.0.1")).unwrap();
        let _a2 = slots.take(ip("10.0.0.1")).unwrap();
        assert_eq!(slots.take(ip("10.0.0.1")).unwrap_err(), Refusal::PerSource);
        let _b1 = slots.take(ip("10.0.0.2")).unwrap();
        let _c1 = slots.take(ip("10.0.0.3")).unwrap();
        assert_eq!(
            slots.take(ip("10.0.0.4")).unwrap_err(),
            Refusal::MaxConnections
        );
        // A closed connection gives its slot back, to anyone.
        drop(a1);
        let _d1 = slots.take(ip("10.0.0.4")).unwrap();
        assert_eq!(
            slots.take(ip("10.0.0.1")).unwrap_err(),
            Refusal::MaxConnections
        );
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        let slots = Slots::new(8, 1);
        let _a = slots.take(ip("2001:db8::1")).unwrap();
        assert_eq!(
            slots.take(ip("2001:db8::ffff:1")).unwrap_err(),
            Refusal::PerSource
        );
        let _b = slots.take(ip("2001:db8:0:1::1")).unwrap();
        let _c = slots.take(ip("127.0.0.1")).unwrap();
        assert_eq!(
            slots.take(ip("::ffff:127.0.0.1")).unwrap_err(),
            Refusal::PerSource
        );
    }

    #[test]
    fn released_slots_leave_no_entry_behind() {
        let slots = Slots::new(2, 2);
        drop(slots.take(ip("10.0.0.1")).unwrap());
        let held = slots.lock();
        assert_eq!((held.total, held.by_source.len()), (0, 0));
    }
}
