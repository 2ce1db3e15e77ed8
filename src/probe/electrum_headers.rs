//! Proving an Electrum server's height claim as wallets do: from a block
//! already known (the network's shared [`Chain`] record, genesis at least,
//! or the block its Electrum servers agree on: see [`super::agreed`]) fetch
//! the headers up to the claimed tip with `blockchain.block.headers`; each
//! must link to the one before and carry its proof of work, and the last
//! must be the tip the server announced. Above the best chain known, the
//! server's chain must carry at least its work ([`Chain::weigh`]).
//!
//! What a proof from the record checks is learned by the [`Chain`] (shared
//! with the P2P proofs of the same network), so the next proof starts where
//! it ended, on the best chain or a side branch; one from the agreed block
//! is not (that block is assumed, not proven). A server whose headers
//! contradict its claim (none, too few, not linked, without the work, less
//! work in all than the best chain known, another chain's genesis) is told
//! apart from a proof cut short by the timeout or by the per-probe bound,
//! which goes on at the next probe.

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tracing::debug;

use super::Failure;
use super::chain::{Chain, MAX_BRANCHES};
use super::electrum::{Announced, MAX_LINE, Session, header};
use super::headers::check;
use super::pow::{HEADER_LEN, Header, Tip as Known};
use crate::pool::report::Proof;

/// Headers asked for in one call: the answer (hex, as one string or one
/// per header) stays within [`MAX_LINE`].
pub const PER_CALL: u64 = 350;
/// Most calls in one probe; a longer proof resumes at the next.
#[cfg(not(test))]
pub const MAX_CALLS: usize = 40;
/// Few in unit tests, so the bound is reached with few headers to mine.
#[cfg(test)]
pub const MAX_CALLS: usize = 4;
/// Most bytes a proof reads, on top of the probe's own: its calls, and a
/// try of each side branch as the anchor.
pub const MAX_READ: usize = (MAX_CALLS + MAX_BRANCHES) * MAX_LINE;
/// Known blocks of the best chain tried as the anchor before giving up on
/// a server (after one of each side branch).
const MAX_ANCHORS: usize = 6;

/// Prove `tip`'s height on `session` from what `chain` knows, before
/// `deadline`, when `wanted`. Either way `server`'s claim, and its word on
/// the block its network's servers are to agree on, go to the chain's
/// agreement.
pub(super) async fn prove<S>(
    session: &mut Session<S>,
    chain: &Chain,
    server: &str,
    tip: &Announced,
    wanted: bool,
    deadline: Instant,
) -> Proof
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let claim = tip.height;
    chain.agreement().claim(server, claim);
    if !wanted {
        speak(session, chain, server, claim, deadline).await;
        return Proof::NotAsked;
    }
    match tokio::time::timeout_at(deadline, run(session, chain, server, tip)).await {
        Ok(proof) => proof,
        Err(_) => Proof::Unproven(format!("headers for height {claim} did not arrive in time")),
    }
}

/// `server`'s word alone (one header), if its network's agreement needs it
/// at a height at or below its `claim`. A server that does not answer it in
/// time, or answers what we cannot read, names no header there (and is not
/// asked again at that height); one that hung up is asked again.
async fn speak<S>(
    session: &mut Session<S>,
    chain: &Chain,
    server: &str,
    claim: u64,
    deadline: Instant,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let agreement = chain.agreement();
    let wanted = agreement.wants_word(server, chain.tip().height);
    let Some(height) = wanted.filter(|h| *h <= claim) else {
        return;
    };
    let headers = match tokio::time::timeout_at(deadline, fetch(session, height, 1)).await {
        Ok(Ok(headers)) => headers,
        Ok(Err(Proof::Unproven(why))) => {
            debug!(server, why, "agreement_header_failed");
            return;
        }
        Ok(Err(_)) | Err(_) => Vec::new(),
    };
    agreement.heard(chain.params(), server, height, headers.first());
}

/// The known blocks to try as the anchor, each a call: the best chain's
/// newest below `claim` (where most servers are), the newest below `claim`
/// of each side branch (a server on one continues it), then the best
/// chain's locator further back at doubling distances, genesis last.
fn anchors(chain: &Chain, claim: u64) -> Vec<Known> {
    let locator = chain.best_locator(claim);
    let mut out: Vec<Known> = locator.first().copied().into_iter().collect();
    out.extend(chain.branch_tips(claim));
    out.extend(
        (1..MAX_ANCHORS - 1)
            .map(|k| (1usize << k) - 1)
            .filter_map(|i| locator.get(i).copied()),
    );
    if let Some(genesis) = locator.last()
        && out.last() != Some(genesis)
    {
        out.push(*genesis);
    }
    out
}

async fn run<S>(session: &mut Session<S>, chain: &Chain, server: &str, tip: &Announced) -> Proof
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let claim = tip.height;
    let params = chain.params();
    let agreement = chain.agreement();
    let proven = chain.tip().height;
    // The server's word where the servers are to agree, when still needed;
    // asked as the first call of a proof from there, which it starts when
    // it completes the agreement.
    let mut heard = None;
    if let Some(height) = agreement.wants_word(server, proven).filter(|h| *h <= claim) {
        let count = (claim - height).saturating_add(1).min(PER_CALL);
        let headers = match fetch(session, height, count).await {
            Ok(headers) => headers,
            Err(proof) => return proof,
        };
        agreement.heard(params, server, height, headers.first());
        heard = Some((height, count, headers));
    }
    // Calls made besides the proof's own: the word, unless it is the first.
    let mut besides = usize::from(heard.is_some());
    // The agreed block first, when above the record and near enough for
    // one probe (a word may have taken a call); then the record's.
    let reach = (MAX_CALLS as u64 - 1) * PER_CALL;
    let agreed = agreement
        .anchor()
        .filter(|a| a.height > proven && a.height <= claim && claim - a.height < reach);
    // Find a known block the server has: its header at that height hashes
    // to ours. The answer carries the headers after it, too.
    let mut found = None;
    for anchor in agreed.into_iter().chain(anchors(chain, claim)) {
        let (count, headers) = match heard.take_if(|(at, _, _)| *at == anchor.height) {
            Some((_, count, headers)) => {
                besides = 0;
                (count, headers)
            }
            None => {
                let count = (claim - anchor.height).saturating_add(1).min(PER_CALL);
                match fetch(session, anchor.height, count).await {
                    Ok(headers) => {
                        if agreed == Some(anchor) {
                            agreement.heard(params, server, anchor.height, headers.first());
                        }
                        (count, headers)
                    }
                    Err(proof) => return proof,
                }
            }
        };
        match headers.first() {
            None => {
                return Proof::Contradicted(format!(
                    "no header at height {} (claimed {claim})",
                    anchor.height
                ));
            }
            Some(first) if first.hash() == anchor.hash => {
                found = Some((anchor, count, headers));
                break;
            }
            Some(_) if anchor.height == 0 => {
                return Proof::Contradicted(format!(
                    "its block 0 is not the genesis block of {}: \
                     health.network may not be the server's chain",
                    params.name()
                ));
            }
            Some(_) => {}
        }
    }
    let Some((anchor, count, first)) = found else {
        return Proof::Contradicted("headers attach to no block we know".into());
    };
    // Only a run from the proven record is learned.
    let learned = agreed != Some(anchor);
    let mut run: Vec<Known> = Vec::new();
    // The first answer began with the anchor itself.
    let mut asked = count - 1;
    let mut batch = first[1..].to_vec();
    let mut calls = 1 + besides;
    loop {
        let prev = run.last().copied().unwrap_or(anchor);
        let short = (batch.len() as u64) < asked;
        if !batch.is_empty() {
            match check(params, prev, batch).await {
                Ok(checked) => run.extend(checked),
                Err(detail) => return Proof::Contradicted(format!("invalid headers: {detail}")),
            }
            if learned {
                chain.learn(anchor, &run);
            }
        }
        let reached = run.last().copied().unwrap_or(anchor);
        if reached.height >= claim {
            if reached.hash != tip.header.hash() {
                return Proof::Contradicted(format!(
                    "its header at height {claim} is not the tip it announced"
                ));
            }
            // Above the best known tip, a chain counts with the work. One
            // from the agreed block cannot be weighed (the work below that
            // block is not known): the agreement vouches for it instead.
            if learned && let Err(detail) = chain.weigh(&reached) {
                return Proof::Contradicted(detail);
            }
            return Proof::Proven;
        }
        if short {
            return Proof::Contradicted(if reached.height == prev.height {
                format!("no headers above height {} (claimed {claim})", prev.height)
            } else {
                format!(
                    "headers end at height {}, below the claimed {claim}",
                    reached.height
                )
            });
        }
        if calls >= MAX_CALLS {
            return Proof::Unproven(format!(
                "headers checked to height {} of {claim}; the proof goes on at the next probe",
                reached.height
            ));
        }
        asked = (claim - reached.height).min(PER_CALL);
        batch = match fetch(session, reached.height + 1, asked).await {
            Ok(headers) => headers,
            Err(proof) => return proof,
        };
        calls += 1;
    }
}

/// `count` headers from `start` (fewer when the server has fewer), as
/// `blockchain.block.headers` answers them: one hex string (protocol 1.4)
/// or one per header (1.6). What went wrong as the proof's outcome: no
/// answer, an error reply or garbage says nothing about the claim (the
/// contract's "an error reply or garbage is `unknown`"); headers that are
/// there but wrong do.
async fn fetch<S>(session: &mut Session<S>, start: u64, count: u64) -> Result<Vec<Header>, Proof>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let answer = session
        .call("blockchain.block.headers", json!([start, count]))
        .await
        .map_err(|failure| match failure {
            Failure::Closed(detail) | Failure::Garbled(detail) => Proof::Unproven(detail),
        })?;
    let headers = parse(&answer).ok_or_else(|| {
        Proof::Unproven(format!(
            "blockchain.block.headers from {start} answered no headers we can read"
        ))
    })?;
    if headers.len() as u64 > count {
        return Err(Proof::Contradicted(format!(
            "blockchain.block.headers answered {} headers for {count}",
            headers.len()
        )));
    }
    Ok(headers)
}

/// The headers of a `blockchain.block.headers` result; `None` when it has
/// neither form, a header is not 80 bytes of hex, or `count` disagrees.
pub fn parse(answer: &Value) -> Option<Vec<Header>> {
    let headers: Vec<Header> = match (answer.get("headers"), answer.get("hex")) {
        (Some(Value::Array(list)), _) => list
            .iter()
            .map(|h| h.as_str().and_then(header))
            .collect::<Option<_>>()?,
        (None, Some(Value::String(hex))) => {
            if !hex.len().is_multiple_of(2 * HEADER_LEN) {
                return None;
            }
            hex.as_bytes()
                .chunks(2 * HEADER_LEN)
                .map(|h| std::str::from_utf8(h).ok().and_then(header))
                .collect::<Option<_>>()?
        }
        _ => return None,
    };
    let count = answer.get("count").and_then(Value::as_u64)?;
    (count == headers.len() as u64).then_some(headers)
}

// Its fake server also serves the agreement's tests.
#[cfg(test)]
#[path = "electrum_headers_tests.rs"]
pub(super) mod tests;
