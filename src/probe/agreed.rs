//! A proof anchor from agreement: the header that every Electrum server of
//! a network returns at one height, at or below all of their claims.
//!
//! From genesis, proving a height on a long chain takes hundreds of probes
//! (Litecoin: about 2.9 million headers, 14,000 a probe). When the servers
//! agree on an older block, a proof may start there instead and fetch only
//! the headers above it. The agreed header is an assumption, not a proof,
//! so it is kept apart from the proven record ([`Chain`]'s own, shared with
//! `getheaders` locators) and must be safe by construction:
//!
//! - Its height is the floor of the servers' claims (the lowest, less
//!   [`DEPTH`], rounded down to a multiple of [`STEP`]): at or below the
//!   claim of every server, honest ones included.
//! - It needs the word of every enlisted server (each Electrum server the
//!   prober probes on the network), at least two of them, all naming the
//!   identical header at that height, with the work the network asks for.
//!   Any other answer (another header, none, one without work) leaves no
//!   anchor; so does a server that has not answered yet, one that joins,
//!   or a claim that falls below the anchor.
//!
//! So liars cannot use it: if one enlisted server is honest, an agreed
//! header is the real block at its height, because the honest server named
//! it. A proof from it must still link headers with work from that real
//! block to the claim, as one from the proven record does; a replayed or
//! forged chain does not link to it. Two liars that agree with each other
//! and not with an honest server make no anchor at all (they can withhold
//! it, which leaves proofs to start from the proven record, as without
//! agreement). Agreement of two servers alone would not do: two liars
//! agreeing on a replayed block 100 under the floor height could then
//! replay blocks 101, 102, ... above it and "prove" heights above every
//! honest server's.
//!
//! What it cannot tell: when every enlisted server lies alike, their word
//! is all there is, and a claim less than a probe's reach above the height
//! they agree on can be proven from it; but then no honest Electrum server
//! of the network is probed for them to outrank. One that joins drops the
//! anchor until it agrees (proofs already reported stand until the liars'
//! next probes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::chain::Chain;
use super::pow::{ChainParams, Header, Tip};

/// Heights agreed on are multiples of this: the same height for every
/// server while the chain grows, for about a day and a half of Litecoin
/// blocks.
pub const STEP: u64 = 1000;
/// Blocks kept between the lowest claim and the agreed height, so that a
/// reorganisation at the tip does not split the servers' answers.
pub const DEPTH: u64 = 10;

/// What the Electrum servers of one network claimed and answered at the
/// height they are to agree on; part of the network's [`Chain`].
#[derive(Debug, Default)]
pub struct Agreement {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// By server address.
    members: HashMap<String, Member>,
    /// The header every member named, while nothing speaks against it.
    agreed: Option<Tip>,
}

#[derive(Debug, Default)]
struct Member {
    /// Probe tasks of this server (pools with other probe settings probe
    /// it apart): it leaves when the last ends.
    tasks: usize,
    /// The height its last probe read.
    claim: Option<u64>,
    /// Its answer at a height: the header there, when it has the work the
    /// network asks for; `None` for anything else.
    word: Option<(u64, Option<Tip>)>,
}

impl Agreement {
    /// Count `server` among those whose word an anchor needs. A newcomer
    /// has not spoken: any anchor is dropped until it agrees.
    pub fn enlist(&self, server: &str) {
        let mut state = self.lock();
        let member = state.members.entry(server.to_owned()).or_default();
        member.tasks += 1;
        if member.tasks == 1 {
            state.agreed = None;
        }
    }

    /// One probe task of `server` ended; it leaves with the last. Every
    /// member that stays named the anchor, which stays.
    pub fn delist(&self, server: &str) {
        let mut state = self.lock();
        if let Some(member) = state.members.get_mut(server) {
            member.tasks = member.tasks.saturating_sub(1);
            if member.tasks == 0 {
                state.members.remove(server);
                // The rest may now all agree.
                if let Some(agreed) = state.target().and_then(|h| state.unanimous(h)) {
                    state.agreed = Some(agreed);
                }
            }
        }
    }

    /// `server` claims `height`. A claim below the anchor drops it.
    pub fn claim(&self, server: &str, height: u64) {
        let mut state = self.lock();
        let Some(member) = state.members.get_mut(server) else {
            return;
        };
        member.claim = Some(height);
        if state.agreed.is_some_and(|a| a.height > height) {
            state.agreed = None;
        }
    }

    /// The height where `server`'s word is still needed, if it is above
    /// `proven` (below, the proven record is the better anchor).
    pub fn wants_word(&self, server: &str, proven: u64) -> Option<u64> {
        let state = self.lock();
        let height = state.target().filter(|h| *h > proven)?;
        let member = state.members.get(server)?;
        let spoken = member.word.is_some_and(|(at, _)| at == height);
        (!spoken).then_some(height)
    }

    /// `server` answered `header` (none: no header) at `height`. A word at
    /// the height to agree on is kept; one against the anchor drops it;
    /// when every member has named the same header, it is the anchor.
    pub fn heard(&self, params: &ChainParams, server: &str, height: u64, header: Option<&Header>) {
        let tip = header
            .filter(|h| params.check_alone(height, h).is_ok())
            .map(|h| Tip {
                height,
                hash: h.hash(),
                bits: h.bits(),
                // A lone header: the work of the chain below is not known.
                work: 0,
            });
        let mut state = self.lock();
        if !state.members.contains_key(server) {
            return;
        }
        if state
            .agreed
            .is_some_and(|a| a.height == height && Some(a) != tip)
        {
            state.agreed = None;
        }
        if state.target() != Some(height) {
            return;
        }
        if let Some(member) = state.members.get_mut(server) {
            member.word = Some((height, tip));
        }
        if let Some(agreed) = state.unanimous(height) {
            state.agreed = Some(agreed);
        }
    }

    /// The anchor the servers agree on, if any.
    pub fn anchor(&self) -> Option<Tip> {
        self.lock().agreed
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// The height to agree on: below the lowest claim by [`DEPTH`], rounded
    /// down to a [`STEP`]; none until two members or more have all claimed.
    fn target(&self) -> Option<u64> {
        if self.members.len() < 2 {
            return None;
        }
        let mut floor = u64::MAX;
        for member in self.members.values() {
            floor = floor.min(member.claim?);
        }
        let height = floor.saturating_sub(DEPTH) / STEP * STEP;
        (height > 0).then_some(height)
    }

    /// The header every member named at `height`, if they all named the
    /// same one with its work (two members at least).
    fn unanimous(&self, height: u64) -> Option<Tip> {
        if self.members.len() < 2 {
            return None;
        }
        let mut words = self.members.values().map(|m| match m.word {
            Some((at, tip)) if at == height => tip,
            _ => None,
        });
        let first = words.next().flatten()?;
        words.all(|w| w == Some(first)).then_some(first)
    }
}

/// A server's place among those whose word an anchor needs, for as long as
/// this lives: the prober holds one per Electrum probe task.
#[derive(Debug)]
pub struct Enlisted {
    chain: Arc<Chain>,
    server: String,
}

impl Enlisted {
    /// Enlist `server` in `chain`'s agreement.
    pub fn new(chain: Arc<Chain>, server: &str) -> Enlisted {
        chain.agreement().enlist(server);
        Enlisted {
            chain,
            server: server.to_owned(),
        }
    }
}

impl Drop for Enlisted {
    fn drop(&mut self) {
        self.chain.agreement().delist(&self.server);
    }
}

#[cfg(test)]
#[path = "agreed_tests.rs"]
mod tests;
