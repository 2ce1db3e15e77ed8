//! P2P-shaped load: many long-lived connections with small messages both
//! ways on their own random schedules, as Bitcoin-family peers exchange
//! pings, `inv` and headers announcements. The client stamps its pings
//! and the backend echoes them (round trip); the backend stamps its own
//! announcements (one-way delay, on the machine-wide monotonic clock).

mod client;
mod frame;
mod server;
mod stalls;

use std::time::Duration;

pub use client::{Params, run};
pub use server::serve;

/// How often and how large each side's messages are: both drawn anew for
/// every message, uniformly between the bounds.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Shape {
    /// Shortest gap between one side's messages on a connection (`1s`, `500ms`).
    #[arg(long, default_value = "1s", value_parser = crate::interval)]
    pub min_gap: Duration,
    /// Longest gap.
    #[arg(long, default_value = "2s", value_parser = crate::interval)]
    pub max_gap: Duration,
    /// Smallest message, bytes (at least 11).
    #[arg(long, default_value_t = 100)]
    pub min_size: usize,
    /// Largest message, bytes (at most 512).
    #[arg(long, default_value_t = 300)]
    pub max_size: usize,
}

impl Shape {
    /// The gap before the next message.
    fn gap(&self, rng: &mut fastrand::Rng) -> Duration {
        let (lo, hi) = (
            self.min_gap.as_nanos() as u64,
            self.max_gap.as_nanos() as u64,
        );
        Duration::from_nanos(rng.u64(lo..=hi.max(lo)))
    }

    /// The wait before a connection's first message: anywhere within one
    /// gap, so thousands of connections opened together do not send together.
    fn first(&self, rng: &mut fastrand::Rng) -> Duration {
        let gap = self.gap(rng).as_nanos() as u64;
        Duration::from_nanos(rng.u64(0..=gap))
    }

    /// The next message's size.
    fn size(&self, rng: &mut fastrand::Rng) -> usize {
        let lo = self.min_size.clamp(frame::HEADER, frame::MAX);
        let hi = self.max_size.clamp(lo, frame::MAX);
        rng.usize(lo..=hi)
    }
}
