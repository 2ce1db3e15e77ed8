//! What the pool lock guards: the configured backends, and the ones a
//! reload removed that are still being drained.

use crate::pool::discovered::Source;
use crate::pool::refused::Refusals;
use crate::pool::registry::{Backend, BackendId};
use crate::pool::saved::SavedBackend;

/// Everything the pool lock guards: the configured backends and the
/// removed ones still being drained. No deref: a rule names the set it
/// walks (`active`, or `active` and `leaving`), so none skips the leaving
/// ones by accident.
#[derive(Debug, Default)]
pub(in crate::pool) struct Members {
    /// Configured, in config order.
    pub(in crate::pool) active: Vec<Backend>,
    /// Removed by a reload or by discovery, their connections not all
    /// gone yet: out of selection, probes and snapshots.
    pub(in crate::pool) leaving: Vec<Backend>,
    /// What each discover entry has found, in config order.
    pub(in crate::pool) sources: Vec<Source>,
    /// Saved health records (from a state file) of discovered members
    /// not found yet: applied when a lookup brings the member back.
    pub(in crate::pool) unclaimed: Vec<SavedBackend>,
    /// Client addresses its backends refused lately, steered elsewhere.
    pub(in crate::pool) refused: Refusals,
}

impl Members {
    /// True when `backend` (configured or leaving) has a drain running.
    pub(in crate::pool) fn any_draining(&self, backend: BackendId) -> bool {
        self.active
            .iter()
            .chain(&self.leaving)
            .any(|b| b.id == backend && b.drain.is_some())
    }
}
