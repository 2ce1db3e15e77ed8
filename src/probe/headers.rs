//! Proving a height claim: ask the node for headers up to the height it
//! claims (`getheaders`) and check that they attach to a block we know,
//! link, and carry their proof of work (see [`super::pow`]).
//!
//! A node that has the chain it claims always can answer; a liar cannot
//! forge the work, and a chain above the best one known must carry as much
//! work in all as that one ([`Chain::weigh`]), however many headers it has.
//! What a proof checks is learned by the shared [`Chain`], so the next
//! proof (of this node or another) starts where it ended, on the best chain
//! or a side branch, and costs one round trip in the steady state.

use tokio::time::Instant;

use super::chain::Chain;
use super::p2p::Peer;
use super::pow::{ChainParams, HEADER_LEN, Hash, Header, PowError, Tip};
use super::wire::{self, PROTOCOL_VERSION};
use crate::pool::report::Proof;

/// Most headers a node sends in one `headers` message.
pub const MAX_PER_MESSAGE: usize = 2000;
/// Largest `headers` payload: a count and up to 2000 headers, each with a
/// (zero) transaction count.
pub const MAX_PAYLOAD: usize = 3 + MAX_PER_MESSAGE * (HEADER_LEN + 9);
/// Most headers checked in one probe; a longer proof resumes at the next.
pub const MAX_PER_PROBE: usize = 20 * MAX_PER_MESSAGE;
/// Headers checked in one go off the async threads (about 25 ms of scrypt).
const CHECK_CHUNK: usize = 100;

/// Ask the peer for headers up to `claim` and check them, before `deadline`.
pub async fn prove(peer: &mut Peer, chain: &Chain, claim: u64, deadline: Instant) -> Proof {
    match tokio::time::timeout_at(deadline, ProofRun::new(chain, claim).run(peer)).await {
        Ok(proof) => proof,
        Err(_) => Proof::Unproven(format!("headers for height {claim} did not arrive in time")),
    }
}

/// One proof in progress.
struct ProofRun<'a> {
    chain: &'a Chain,
    claim: u64,
    /// The known header the checked run attaches to.
    from: Option<Tip>,
    /// Headers checked so far, in order.
    run: Vec<Tip>,
}

impl<'a> ProofRun<'a> {
    fn new(chain: &'a Chain, claim: u64) -> ProofRun<'a> {
        ProofRun {
            chain,
            claim,
            from: None,
            run: Vec::new(),
        }
    }

    async fn run(mut self, peer: &mut Peer) -> Proof {
        let locator = self.chain.locator(self.claim);
        loop {
            let asked: Vec<Hash> = match self.run.last() {
                Some(last) => vec![last.hash],
                None => locator.iter().map(|t| t.hash).collect(),
            };
            let payload = getheaders(&asked);
            // No answer says nothing about the claim; a wrong one does.
            let headers = match peer.request(&payload).await.map(|p| parse(&p)) {
                Ok(Ok(headers)) => headers,
                Ok(Err(detail)) => return Proof::Contradicted(detail),
                Err(detail) => return Proof::Unproven(detail),
            };
            let reached = self.run.last().or(locator.first()).map_or(0, |t| t.height);
            let Some(first) = headers.first() else {
                return Proof::Contradicted(format!(
                    "no headers above height {reached} (claimed {})",
                    self.claim
                ));
            };
            let start = match self.run.last() {
                Some(last) => *last,
                None => match locator.iter().find(|t| t.hash == first.prev()) {
                    Some(known) => *known,
                    None => {
                        return Proof::Contradicted("headers attach to no block we know".into());
                    }
                },
            };
            let from = *self.from.get_or_insert(start);
            let full = headers.len() == MAX_PER_MESSAGE;
            // In chunks, each learned as soon as it is checked: a proof cut
            // short by the timeout keeps what it checked.
            let mut prev = start;
            for chunk in headers.chunks(CHECK_CHUNK) {
                let checked = match check(self.chain.params(), prev, chunk.to_vec()).await {
                    Ok(tips) => tips,
                    Err(detail) => {
                        return Proof::Contradicted(format!("invalid headers: {detail}"));
                    }
                };
                prev = checked.last().copied().unwrap_or(prev);
                self.run.extend(checked);
                self.chain.learn(from, &self.run);
            }
            let height = self.run.last().map_or(reached, |t| t.height);
            if height >= self.claim {
                // Above the best known tip, a chain counts with the work.
                let claimed = self.run.iter().rev().find(|t| t.height == self.claim);
                if let Some(Err(detail)) = claimed.map(|t| self.chain.weigh(t)) {
                    return Proof::Contradicted(detail);
                }
                return Proof::Proven;
            }
            if !full {
                return Proof::Contradicted(format!(
                    "headers end at height {height}, below the claimed {}",
                    self.claim
                ));
            }
            if self.run.len() >= MAX_PER_PROBE {
                return Proof::Unproven(format!(
                    "headers checked to height {height} of {}; the proof goes on at the next probe",
                    self.claim
                ));
            }
        }
    }
}

/// Check `headers` as successors of `start`, off the async threads (scrypt
/// costs real CPU).
pub(super) async fn check(
    params: &'static ChainParams,
    start: Tip,
    headers: Vec<Header>,
) -> Result<Vec<Tip>, String> {
    let work = move || -> Result<Vec<Tip>, PowError> {
        let mut prev = start;
        let mut out = Vec::with_capacity(headers.len());
        for header in &headers {
            prev = params.check(&prev, header)?;
            out.push(prev);
        }
        Ok(out)
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(|err| err.to_string()),
        Err(err) => Err(format!("check stopped: {err}")),
    }
}

/// A `getheaders` message body: our version, the locator, no stop hash.
pub fn getheaders(locator: &[Hash]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 9 + 32 * (locator.len() + 1));
    out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    wire::put_var_int(&mut out, locator.len() as u64);
    for hash in locator {
        out.extend_from_slice(hash);
    }
    out.extend_from_slice(&[0u8; 32]);
    out
}

/// A `headers` message body: a count, then each 80-byte header with a
/// transaction count (zero from an honest node; any value is skipped).
///
/// # Errors
/// More than [`MAX_PER_MESSAGE`] headers, or a body cut short.
pub fn parse(payload: &[u8]) -> Result<Vec<Header>, String> {
    let mut rest = payload;
    let count = wire::take_var_int(&mut rest, "headers").map_err(|e| e.to_string())?;
    if count > MAX_PER_MESSAGE as u64 {
        return Err(format!(
            "malformed headers payload: {count} headers in one message"
        ));
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let Some((raw, tail)) = rest.split_first_chunk::<HEADER_LEN>() else {
            return Err("malformed headers payload: cut short".into());
        };
        rest = tail;
        wire::take_var_int(&mut rest, "headers").map_err(|e| e.to_string())?;
        out.push(Header { raw: *raw });
    }
    Ok(out)
}

// Against the simulated node.
#[cfg(all(test, feature = "sim"))]
#[path = "headers_tests.rs"]
mod tests;
