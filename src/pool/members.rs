//! What the pool lock guards: the configured backends, and the ones a
//! reload removed that are still being drained.

use std::collections::HashMap;

use crate::config::BackendConfig;
use crate::pool::backend::Backend;
use crate::pool::discovered::Source;
use crate::pool::refused::Refusals;
use crate::pool::registry::BackendId;
use crate::pool::saved::SavedBackend;

/// Everything the pool lock guards: the configured backends and the
/// removed ones still being drained. No deref: a rule names the set it
/// walks (`active`, or `active` and `leaving`), so none skips the leaving
/// ones by accident.
#[derive(Debug, Default)]
pub(in crate::pool) struct Members {
    /// Configured, in config order.
    pub(in crate::pool) active: Vec<Backend>,
    /// Removed by a reload or by discovery (or left out of the config a
    /// live upgrade started with), their connections not all gone yet:
    /// out of selection, probes and snapshots.
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
            .any(|b| b.id() == backend && b.drain().is_some())
    }

    /// True when a configured backend can take a new client
    /// ([`Backend::takes_clients`]): the last-leg rule's question.
    pub(in crate::pool) fn any_takes_clients(&self, strict: bool) -> bool {
        self.active.iter().any(|b| b.takes_clients(strict))
    }
}

/// What a wanted backend is to the backends a pool has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// No backend of that name and address: a new node.
    Added,
    /// The same name, address and settings.
    Kept,
    /// The same name and address, other settings (`backup`, `probe_url`):
    /// updated in place, its state and connections kept.
    Changed,
}

/// The one place a change of a pool's backends is worked out, by name and
/// address (a backend whose address changes is another node: removed and
/// added): a reload's plan (static backends, old config against new) and
/// the pool's own membership (configured and discovered, what it has
/// against what it wants) are both this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberPlan<'a> {
    /// Every wanted backend, in the wanted order, with what it is.
    pub wanted: Vec<(&'a BackendConfig, Change)>,
    /// The backends had and no longer wanted, in the order had.
    pub removed: Vec<&'a BackendConfig>,
}

impl<'a> MemberPlan<'a> {
    /// The plan that turns `had` into `wanted`; linear in both (a lookup
    /// of a thousand members stays cheap).
    pub fn between(
        had: impl IntoIterator<Item = &'a BackendConfig>,
        wanted: &'a [BackendConfig],
    ) -> MemberPlan<'a> {
        let mut left: HashMap<(&str, &str), &'a BackendConfig> = HashMap::new();
        let mut order = Vec::new();
        for b in had {
            left.insert((b.name.as_str(), b.addr.as_str()), b);
            order.push(b);
        }
        let wanted: Vec<(&'a BackendConfig, Change)> = wanted
            .iter()
            .map(|w| {
                let change = match left.remove(&(w.name.as_str(), w.addr.as_str())) {
                    None => Change::Added,
                    Some(h) if h == w => Change::Kept,
                    Some(_) => Change::Changed,
                };
                (w, change)
            })
            .collect();
        let removed = order
            .into_iter()
            .filter(|b| left.contains_key(&(b.name.as_str(), b.addr.as_str())))
            .collect();
        MemberPlan { wanted, removed }
    }

    /// The names of the wanted backends that are `change`, in order.
    pub fn named(&self, change: Change) -> Vec<&'a str> {
        self.wanted
            .iter()
            .filter(|(_, c)| *c == change)
            .map(|(b, _)| b.name.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(name: &str, addr: &str, backup: bool) -> BackendConfig {
        BackendConfig {
            name: name.into(),
            addr: addr.into(),
            backup,
            probe_url: None,
            discovered_from: None,
        }
    }

    #[test]
    fn backends_are_matched_by_name_and_address() {
        let had = [
            backend("a", "h:1", false),
            backend("b", "h:2", false),
            backend("c", "h:3", false),
            backend("d", "h:4", false),
        ];
        let wanted = [
            backend("e", "h:5", false),
            backend("a", "h:1", false),
            backend("c", "h:9", false),
            backend("b", "h:2", true),
        ];
        let plan = MemberPlan::between(&had, &wanted);
        let changes: Vec<(&str, Change)> = plan
            .wanted
            .iter()
            .map(|(b, c)| (b.name.as_str(), *c))
            .collect();
        assert_eq!(
            changes,
            [
                ("e", Change::Added),
                ("a", Change::Kept),
                ("c", Change::Added),
                ("b", Change::Changed)
            ]
        );
        let removed: Vec<(&str, &str)> = plan
            .removed
            .iter()
            .map(|b| (b.name.as_str(), b.addr.as_str()))
            .collect();
        assert_eq!(removed, [("c", "h:3"), ("d", "h:4")]);
        assert_eq!(plan.named(Change::Added), ["e", "c"]);
        assert_eq!(plan.named(Change::Changed), ["b"]);
    }
}
