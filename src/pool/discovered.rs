//! Members found through DNS: what each discover entry's lookups have
//! found and when each member was last in a successful answer, and the
//! rule that turns that into the pool's backends.
//!
//! A failed lookup never reaches the pool: the runtime keeps the last good
//! set by not calling [`Pool::apply_lookup`]. A successful answer refreshes
//! every member it names; a member missing from successful answers for
//! `discovery.hold` is removed (its connections drained as on a reload); one
//! that comes back within `hold` never left, so it keeps its connections and
//! its health record. Membership changes go through the same path as a
//! reload ([`Pool::set_members`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tracing::info;

use crate::config::{BackendConfig, DiscoverConfig, Found, PoolConfig};
use crate::pool::members::Members;
use crate::pool::registry::{BackendId, Pool};

/// What one discover entry has found so far.
#[derive(Debug)]
pub(in crate::pool) struct Source {
    /// The entry, as configured now.
    pub(in crate::pool) config: DiscoverConfig,
    /// Its members by key (the name after `<entry>/`), with the last time
    /// a successful answer named them and, once one did not, the time of
    /// the first successful answer that left them out.
    pub(in crate::pool) members: BTreeMap<String, (Found, Instant, Option<Instant>)>,
    /// A lookup has succeeded since the entry was configured.
    pub(in crate::pool) answered: bool,
    /// The last lookup: when, and why it failed (`None`: it succeeded).
    pub(in crate::pool) last_lookup: Option<(SystemTime, Option<String>)>,
    /// Lookups since the entry was configured: succeeded, failed.
    pub(in crate::pool) lookups: (u64, u64),
}

impl Source {
    pub(in crate::pool) fn new(config: DiscoverConfig) -> Source {
        Source {
            config,
            members: BTreeMap::new(),
            answered: false,
            last_lookup: None,
            lookups: (0, 0),
        }
    }
}

/// What a successful lookup changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LookupChange {
    /// Members that joined: their ids and settings (to probe at once).
    pub added: Vec<(BackendId, Arc<BackendConfig>)>,
    /// Members removed after `hold`.
    pub removed: usize,
    /// Members of the entry now.
    pub members: usize,
    /// The lookup before this one had failed.
    pub recovered: bool,
}

/// One entry's members as a live upgrade carries them: each with how long
/// ago a successful answer last named it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedSource {
    /// The entry's name.
    pub name: String,
    /// What it looks up (as written in the config).
    pub query: String,
    /// Its members.
    pub members: Vec<HandedMember>,
    /// Its lookups so far: succeeded, failed (counters go on across the
    /// upgrade; absent from an older process: from zero).
    #[serde(default)]
    pub lookups: (u64, u64),
}

/// One member handed over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedMember {
    /// What the lookup found.
    pub found: Found,
    /// Milliseconds since a successful answer last named it.
    pub seen_ms_ago: u64,
    /// Milliseconds since the first successful answer that left it out,
    /// if the last one did (absent from a process that did not keep it:
    /// counted from the next answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_ms_ago: Option<u64>,
}

fn ms_ago(now: Instant, at: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(at).as_millis()).unwrap_or(u64::MAX)
}

/// The backends `config` and `sources` make: the static ones in config
/// order, then each discover entry's members in key order.
pub(in crate::pool) fn wanted(config: &PoolConfig, sources: &[Source]) -> Vec<BackendConfig> {
    let mut out = config.backends.clone();
    for entry in &config.discover {
        let Some(source) = sources.iter().find(|s| s.config.name == entry.name) else {
            continue;
        };
        out.extend(source.members.values().map(|(f, ..)| entry.member(f)));
    }
    out
}

/// When each member that successful answers left out is removed (at the
/// end of `hold`), by backend name.
pub(in crate::pool) fn leaving(sources: &[Source], hold: Duration) -> HashMap<String, Instant> {
    sources
        .iter()
        .flat_map(|s| {
            s.members.values().filter_map(move |(found, _, missing)| {
                Some((s.config.member(found).name, (*missing)? + hold))
            })
        })
        .collect()
}

/// The sources `config` asks for, keeping what `old` found for an entry
/// that looks up the same thing (its settings may have changed).
pub(in crate::pool) fn follow(config: &PoolConfig, old: Vec<Source>) -> Vec<Source> {
    let mut old = old;
    config
        .discover
        .iter()
        .map(
            |entry| match old.iter().position(|s| s.config.same_source(entry)) {
                Some(i) => Source {
                    config: entry.clone(),
                    ..old.swap_remove(i)
                },
                None => Source::new(entry.clone()),
            },
        )
        .collect()
}

/// Put `found` into `source` at `now`; drop members that successful
/// answers have left out for `hold`, counted from the first answer that
/// left each out (an outage before that answer does not count). True when
/// the set of members (or one's address) changed.
fn merge(source: &mut Source, found: Vec<Found>, now: Instant, hold: Duration) -> bool {
    let mut changed = false;
    let named: BTreeSet<String> = found.iter().map(|f| f.key.clone()).collect();
    for f in found {
        match source.members.get_mut(&f.key) {
            Some((known, seen, missing)) => {
                *seen = now;
                *missing = None;
                if *known != f {
                    *known = f;
                    changed = true;
                }
            }
            None => {
                source.members.insert(f.key.clone(), (f, now, None));
                changed = true;
            }
        }
    }
    let before = source.members.len();
    source.members.retain(|key, (_, _, missing)| {
        if named.contains(key) {
            return true;
        }
        let since = *missing.get_or_insert(now);
        now.saturating_duration_since(since) < hold
    });
    source.answered = true;
    source.last_lookup = Some((SystemTime::now(), None));
    source.lookups.0 += 1;
    changed || source.members.len() != before
}

/// A pool's discovery role: what its discover entries' lookups found,
/// applied to its membership, and what `/status` and metrics show of them.
#[derive(Clone, Copy)]
pub struct Discovery<'a> {
    pool: &'a Pool,
}

impl Pool {
    /// This pool's discovery role.
    pub fn discovery(&self) -> Discovery<'_> {
        Discovery { pool: self }
    }
}

impl Discovery<'_> {
    /// Apply a successful lookup of the discover entry `entry` made at
    /// `now`: `found` is every member the answer names. `None` when the
    /// entry is no longer configured (a reload raced the lookup).
    pub fn apply_lookup(
        &self,
        entry: &str,
        found: Vec<Found>,
        now: Instant,
    ) -> Option<LookupChange> {
        let config = self.pool.config();
        let hold = config.discovery.hold;
        let mut m = self.pool.backends();
        let source = m.sources.iter_mut().find(|s| s.config.name == entry)?;
        let first = !source.answered;
        let recovered = matches!(source.last_lookup, Some((_, Some(_))));
        let changed = merge(source, found, now, hold);
        let members = source.members.len();
        if first {
            // The records a state file kept for members it did not name
            // are of nodes that are gone.
            let prefix = format!("{entry}/");
            let keys: Vec<String> = source
                .members
                .keys()
                .map(|k| format!("{prefix}{k}"))
                .collect();
            m.unclaimed
                .retain(|s| !s.name.starts_with(&prefix) || keys.contains(&s.name));
        }
        if !changed {
            return Some(LookupChange {
                members,
                recovered,
                ..LookupChange::default()
            });
        }
        let (added, removed) = self.pool.set_members(&mut m, &config, now);
        let change = LookupChange {
            added,
            removed,
            members,
            recovered,
        };
        info!(
            pool = %self.pool.name, name = entry, added = change.added.len(),
            removed = change.removed, members, "discovered"
        );
        Some(change)
    }

    /// A lookup of `entry` failed with `error`: nothing changes but what
    /// `/status` shows of it. True when the one before had not failed, or
    /// failed for another reason (worth a log line).
    pub fn lookup_failed(&self, entry: &str, error: &str) -> bool {
        let mut m = self.pool.backends();
        let Some(source) = m.sources.iter_mut().find(|s| s.config.name == entry) else {
            return false;
        };
        let news = !matches!(&source.last_lookup, Some((_, Some(e))) if e == error);
        source.last_lookup = Some((SystemTime::now(), Some(error.to_owned())));
        source.lookups.1 += 1;
        news
    }

    /// Each discover entry's members, for a live upgrade to carry.
    pub(in crate::pool) fn hand_over_sources(&self) -> Vec<HandedSource> {
        let now = Instant::now();
        self.pool
            .backends()
            .sources
            .iter()
            .map(|s| HandedSource {
                name: s.config.name.clone(),
                query: s.config.query.to_string(),
                lookups: s.lookups,
                members: s
                    .members
                    .values()
                    .map(|(found, seen, missing)| HandedMember {
                        found: found.clone(),
                        seen_ms_ago: ms_ago(now, *seen),
                        missing_ms_ago: missing.map(|at| ms_ago(now, at)),
                    })
                    .collect(),
            })
            .collect()
    }

    /// Take the members an upgrade handed over for the entries this config
    /// still has (same name, same lookup); returns how many. Run before
    /// the health records are put back, which find them by name.
    pub(in crate::pool) fn take_handed_sources(&self, handed: &[HandedSource]) -> usize {
        let config = self.pool.config();
        let now = Instant::now();
        let mut m = self.pool.backends();
        let mut taken = 0;
        for source in &mut m.sources {
            let q = source.config.query.to_string();
            let Some(c) = handed
                .iter()
                .find(|c| c.name == source.config.name && c.query == q)
            else {
                continue;
            };
            let at = |ms: u64| now.checked_sub(Duration::from_millis(ms)).unwrap_or(now);
            for member in &c.members {
                let seen = at(member.seen_ms_ago);
                let missing = member.missing_ms_ago.map(at);
                source.members.insert(
                    member.found.key.clone(),
                    (member.found.clone(), seen, missing),
                );
            }
            source.answered = true;
            source.lookups = c.lookups;
            taken += c.members.len();
        }
        if taken > 0 {
            self.pool.set_members(&mut m, &config, now);
        }
        taken
    }

    /// The members the discover entry `entry` has now.
    pub fn members_of(&self, entry: &str) -> Vec<Found> {
        self.pool
            .backends()
            .sources
            .iter()
            .find(|s| s.config.name == entry)
            .map(|s| s.members.values().map(|(f, ..)| f.clone()).collect())
            .unwrap_or_default()
    }

    /// How many members each discover entry has, in config order.
    pub fn discovered_counts(&self) -> Vec<(String, usize)> {
        self.pool
            .backends()
            .sources
            .iter()
            .map(|s| (s.config.name.clone(), s.members.len()))
            .collect()
    }
}

/// Keep `m`'s sources in step with `config` (a reload).
pub(in crate::pool) fn reconfigure_sources(m: &mut Members, config: &PoolConfig) {
    let old = std::mem::take(&mut m.sources);
    m.sources = follow(config, old);
}

#[cfg(test)]
#[path = "discovered_tests.rs"]
mod tests;
