//! What the prober knows of one network's header chain: the proven chain
//! with the most work, a few side branches, and enough of their ancestors
//! to build a `getheaders` locator and resume a proof where the last one
//! stopped.
//!
//! Only headers that passed [`ChainParams::check`] enter, each with the
//! work of its chain (see [`super::work`]). Chains are weighed by work,
//! never by height: a long run at the easiest target must not outrank the
//! network's chain, nor stop an honest node's proof from overtaking it. A
//! checked run that does not (yet) have the most work is kept as a side
//! branch, so the next proof of its node continues it until it does.
//!
//! The last `DENSE` heights of each chain are kept whole, older ones every
//! `SPARSE` blocks, so a chain stays a few thousand entries; at most
//! [`MAX_BRANCHES`] side branches are kept, the least recently extended
//! dropped first.

use std::sync::{Mutex, MutexGuard, PoisonError};

use super::agreed::Agreement;
use super::pow::{ChainParams, Tip};

/// Heights below a chain's tip kept one by one.
const DENSE: u64 = 2048;
/// Older heights kept at this spacing (and a chain's first entry).
const SPARSE: u64 = 1000;
/// Hashes taken one by one from the top of a locator before it starts
/// doubling its steps, as Bitcoin Core builds them.
const LOCATOR_STEP_ONE: usize = 10;
/// Side branches kept: enough for an honest chain that climbs past a
/// cheaper one while a few forks come and go.
pub const MAX_BRANCHES: usize = 4;
/// Newest headers of each side branch put in a locator (a node whose own
/// tip moved back a little still finds one); with the best chain's, far
/// under the 101 hashes Bitcoin Core accepts.
const BRANCH_LOCATOR: usize = 4;

/// What a probe may prove: the network's chain, and which claims need it.
pub struct Proving<'a> {
    /// What is known of the network's chain.
    pub chain: &'a Chain,
    /// True for a claimed height that must be proven.
    pub wanted: &'a (dyn Fn(u64) -> bool + Send + Sync),
}

/// The proven chains of one network; shared by every probe of it.
#[derive(Debug)]
pub struct Chain {
    params: &'static ChainParams,
    /// Locked for short, synchronous sections only.
    record: Mutex<Record>,
    /// What the network's Electrum servers agree on: an anchor assumed,
    /// never entered into the record.
    agreement: Agreement,
}

#[derive(Debug)]
struct Record {
    /// The chain with the most work: ascending by height, genesis first.
    best: Vec<Tip>,
    /// Side branches, the most recently extended first. Each is ascending:
    /// its root, a header of `best`, then its own headers, none of them
    /// on `best`; its tip has no more work than `best`'s.
    branches: Vec<Vec<Tip>>,
}

/// Where a run attaches: the highest known header that is on it.
#[derive(Debug, Clone, Copy)]
enum Base {
    /// This header of the best chain (or a branch's root, which is one).
    Best(Tip),
    /// Entry `at` (not the root) of branch `branch`.
    Branch { branch: usize, at: usize },
}

impl Chain {
    /// A chain that knows only its genesis block.
    pub fn new(params: &'static ChainParams) -> Chain {
        Chain {
            params,
            record: Mutex::new(Record {
                best: vec![params.genesis_tip()],
                branches: Vec::new(),
            }),
            agreement: Agreement::default(),
        }
    }

    /// The network's rules.
    pub fn params(&self) -> &'static ChainParams {
        self.params
    }

    /// What the network's Electrum servers agree on (see
    /// [`super::agreed`]); apart from the proven record.
    pub fn agreement(&self) -> &Agreement {
        &self.agreement
    }

    /// The proven tip with the most work.
    pub fn tip(&self) -> Tip {
        let record = self.lock();
        record
            .best
            .last()
            .copied()
            .unwrap_or_else(|| self.params.genesis_tip())
    }

    /// Whether `tip`, the end of a checked chain that a node claims, has
    /// the work to stand as proven. At or below the best tip's height any
    /// checked chain does (a node that is behind proves where it is);
    /// above it, only one with at least the best tip's work.
    ///
    /// # Errors
    /// What the proof's contradiction says: not enough work.
    pub fn weigh(&self, tip: &Tip) -> Result<(), String> {
        let best = self.tip();
        if tip.height <= best.height || tip.work >= best.work {
            return Ok(());
        }
        Err(format!(
            "not enough work: its chain to height {} has work {:#x}, \
             less than the best known chain's {:#x} at height {}",
            tip.height, tip.work, best.work, best.height
        ))
    }

    /// Known headers below `height`: [`Chain::best_locator`]'s, with the
    /// newest few of each side branch (a node on one continues where it
    /// stopped) just before the best chain's at or below the branch's
    /// root. A node answers with the headers after the first of them on
    /// its chain: one on the best chain finds the best chain's newest
    /// first, even when a branch holds headers it has too (those between
    /// a sparse root and where the branch really leaves), and one on a
    /// branch, which has none of the best chain's above the root, finds
    /// its branch's.
    pub fn locator(&self, height: u64) -> Vec<Tip> {
        let mut heads = self
            .branch_heads(height, BRANCH_LOCATOR)
            .into_iter()
            .peekable();
        let mut out: Vec<Tip> = Vec::new();
        let add = |out: &mut Vec<Tip>, tip: Tip| {
            if !out.contains(&tip) {
                out.push(tip);
            }
        };
        for tip in self.best_locator(height) {
            while let Some((_, head)) = heads.next_if(|(root, _)| *root >= tip.height) {
                add(&mut out, head);
            }
            add(&mut out, tip);
        }
        for (_, head) in heads {
            add(&mut out, head);
        }
        out
    }

    /// The newest header below `height` of each side branch, newest first.
    pub fn branch_tips(&self, height: u64) -> Vec<Tip> {
        let mut tips: Vec<Tip> = self
            .branch_heads(height, 1)
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        tips.sort_by(|a, b| b.height.cmp(&a.height).then(a.hash.cmp(&b.hash)));
        tips.dedup();
        tips
    }

    /// The newest `each` headers below `height` of each side branch, with
    /// the height of its root: the branches with the highest root first,
    /// each one's newest first.
    fn branch_heads(&self, height: u64, each: usize) -> Vec<(u64, Tip)> {
        let record = self.lock();
        let mut branches: Vec<&Vec<Tip>> = record.branches.iter().collect();
        branches.sort_by_key(|b| std::cmp::Reverse(b[0].height));
        branches
            .into_iter()
            .flat_map(|b| {
                let below = b.partition_point(|t| t.height < height).max(1);
                let root = b[0].height;
                b[1..below].iter().rev().take(each).map(move |t| (root, *t))
            })
            .collect()
    }

    /// Known headers of the best chain below `height`, newest first,
    /// spaced as a locator (ten one by one, then doubling steps) and
    /// ending at genesis. A node on it that has `height` always finds one
    /// and sends at least one header.
    pub fn best_locator(&self, height: u64) -> Vec<Tip> {
        let record = self.lock();
        let known = &record.best;
        let below = known.partition_point(|t| t.height < height);
        let Some(mut i) = below.checked_sub(1) else {
            return vec![self.params.genesis_tip()];
        };
        let mut out = Vec::new();
        let mut step = 1u64;
        loop {
            let tip = known[i];
            out.push(tip);
            if tip.height == 0 {
                return out;
            }
            if out.len() >= LOCATOR_STEP_ONE {
                step = step.saturating_mul(2);
            }
            let want = tip.height.saturating_sub(step);
            // The newest known entry at or below `want`; genesis at worst.
            i = known[..i]
                .partition_point(|t| t.height <= want)
                .saturating_sub(1);
        }
    }

    /// The header of the best chain with `hash`, if kept.
    #[cfg(test)]
    pub fn find(&self, hash: &super::pow::Hash) -> Option<Tip> {
        let record = self.lock();
        record.best.iter().rev().find(|t| t.hash == *hash).copied()
    }

    /// The side branches' tips, the most recently extended first.
    #[cfg(test)]
    pub fn branches(&self) -> Vec<Tip> {
        let record = self.lock();
        record
            .branches
            .iter()
            .filter_map(|b| b.last())
            .copied()
            .collect()
    }

    /// Learn `run`, checked headers that follow `from` in order (a header
    /// from [`Chain::locator`], or one a run of the same proof learned).
    /// It attaches at the highest known header on it: `from`, or what an
    /// earlier call learned of the same proof. It becomes the best chain
    /// when it ends with more work than the best tip (on a tie the chain
    /// seen first stays, as nodes do), and the chain it displaces a side
    /// branch; otherwise it is kept as a side branch when it leaves the
    /// best chain. A run attached to nothing known changes nothing.
    pub fn learn(&self, from: Tip, run: &[Tip]) {
        self.lock().learn(from, run);
    }

    fn lock(&self) -> MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Record {
    fn learn(&mut self, from: Tip, run: &[Tip]) {
        let Some(end) = run.last().copied() else {
            return;
        };
        let Some(base) = self.base(&from, run) else {
            return;
        };
        let (root, mut path) = match base {
            Base::Best(at) => (at, Vec::new()),
            Base::Branch { branch, at } => (
                self.branches[branch][0],
                self.branches[branch][1..=at].to_vec(),
            ),
        };
        let attached = path.last().unwrap_or(&root).height;
        if attached == end.height {
            // Known already.
            if let Base::Branch { branch, .. } = base {
                let b = self.branches.remove(branch);
                self.branches.insert(0, b);
            }
            return;
        }
        // `run[i]` is at height `from.height + 1 + i`.
        path.extend_from_slice(&run[(attached - from.height) as usize..]);
        let best = self.best.last().map_or(0, |t| t.work);
        if end.work > best {
            self.adopt(base, root, path);
        } else {
            self.branch_off(base, root, path);
        }
    }

    /// Where `[from] + run` attaches: the highest known header on it,
    /// ties to the best chain.
    fn base(&self, from: &Tip, run: &[Tip]) -> Option<Base> {
        let mut base = highest_on(&self.best, from, run).map(|i| Base::Best(self.best[i]));
        let height = |b: &Option<Base>| match b {
            Some(Base::Best(t)) => Some(t.height),
            Some(Base::Branch { branch, at }) => Some(self.branches[*branch][*at].height),
            None => None,
        };
        for (k, b) in self.branches.iter().enumerate() {
            let found = match highest_on(&b[1..], from, run) {
                Some(i) => Some(Base::Branch {
                    branch: k,
                    at: i + 1,
                }),
                None => (on_run(from, run, b[0].height) == Some(b[0])).then_some(Base::Best(b[0])),
            };
            if height(&found) > height(&base) {
                base = found;
            }
        }
        base
    }

    /// Make `root` + `path` the best chain; what it displaces from the
    /// best chain becomes a side branch.
    fn adopt(&mut self, base: Base, root: Tip, path: Vec<Tip>) {
        let r = root.height;
        if let Base::Branch { branch, .. } = base {
            self.branches.remove(branch);
        }
        let split = self.best.partition_point(|t| t.height <= r);
        let displaced: Vec<Tip> = self.best.split_off(split);
        self.best.retain(|t| t.height < r);
        self.best.push(root);
        // Branches rooted on what is displaced leave with it; those the new
        // chain contains are no side branches any more.
        self.branches
            .retain(|b| b[0].height <= r && b.last().is_none_or(|t| !holds(&path, t)));
        self.best.extend(path);
        thin(&mut self.best);
        if !displaced.is_empty() {
            let mut lost = vec![root];
            lost.extend(displaced);
            thin(&mut lost);
            // Last in line: a chain still being extended matters more.
            if self.branches.len() < MAX_BRANCHES {
                self.branches.push(lost);
            }
        }
    }

    /// Keep `root` + `path` as a side branch, when it leaves the best chain.
    fn branch_off(&mut self, base: Base, root: Tip, path: Vec<Tip>) {
        let end = path.last().map_or(root.height, |t| t.height);
        if let Base::Best(at) = base {
            // Above `at` the best chain keeps no header at or below the
            // run's end: the run may be on it, where the record cannot tell
            // (a node behind, or between sparse entries). Nothing to keep.
            let next = self.best.partition_point(|t| t.height <= at.height);
            if self.best.get(next).is_none_or(|t| t.height > end) {
                return;
            }
        }
        let mut branch = vec![root];
        branch.extend(path);
        self.branches
            .retain(|b| b.last().is_none_or(|t| !holds(&branch, t)));
        thin(&mut branch);
        self.branches.insert(0, branch);
        self.branches.truncate(MAX_BRANCHES);
    }
}

/// The tip of `[from] + run` at `height`, if there is one.
fn on_run(from: &Tip, run: &[Tip], height: u64) -> Option<Tip> {
    if height == from.height {
        return Some(*from);
    }
    let i = height.checked_sub(from.height + 1)?;
    run.get(usize::try_from(i).ok()?).copied()
}

/// The index of the highest entry of `chain` (ascending) that is on
/// `[from] + run`.
fn highest_on(chain: &[Tip], from: &Tip, run: &[Tip]) -> Option<usize> {
    let end = run.last().map_or(from.height, |t| t.height);
    let lo = chain.partition_point(|t| t.height < from.height);
    let hi = chain.partition_point(|t| t.height <= end);
    (lo..hi)
        .rev()
        .find(|&i| on_run(from, run, chain[i].height) == Some(chain[i]))
}

/// Whether `chain` (ascending) holds `tip`.
fn holds(chain: &[Tip], tip: &Tip) -> bool {
    let i = chain.partition_point(|t| t.height < tip.height);
    chain.get(i) == Some(tip)
}

/// Keep a chain's first entry, its last `DENSE` heights, and every
/// `SPARSE`th below.
fn thin(chain: &mut Vec<Tip>) {
    let (Some(first), Some(last)) = (chain.first(), chain.last()) else {
        return;
    };
    let (first, dense_from) = (first.height, last.height.saturating_sub(DENSE));
    chain
        .retain(|t| t.height == first || t.height >= dense_from || t.height.is_multiple_of(SPARSE));
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
