//! What a reload changes: the pure diff between the running config and the
//! new one ([`plan`]). Applying it is the server's job.

use std::net::SocketAddr;

use crate::config::{Config, PoolConfig};
use crate::ops::control::Reloaded;
use crate::pool::members::{Change, MemberPlan};

/// Everything a reload changes. Empty (the default) when nothing does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadPlan<'a> {
    /// Pools only the new config has, in its order: bind every listen
    /// address and start them.
    pub bind: Vec<&'a str>,
    /// Pools only the old config has, in its order: stop listening and
    /// close their connections. A renamed pool is stopped and bound anew (its
    /// address joins the old listener's socket group: see `bind_all`).
    pub stop: Vec<&'a str>,
    /// Pools both configs have and that change, in the new config's order.
    pub keep: Vec<PoolPlan<'a>>,
    /// Keys whose change waits for the next restart (the admin endpoint,
    /// logging and the state file are set up once, at start-up).
    pub restart_only: Vec<&'static str>,
}

/// The changes to a pool both configs have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolPlan<'a> {
    /// The pool.
    pub name: &'a str,
    /// Listen addresses to bind, as the new config writes them.
    pub listen_added: Vec<SocketAddr>,
    /// Listen addresses to stop.
    pub listen_removed: Vec<SocketAddr>,
    /// Backends to add, by name, in the new config's order. They start
    /// with a fresh state and are probed at once.
    pub backends_added: Vec<&'a str>,
    /// Backends to remove, by name, in the old config's order; their
    /// connections are closed. A backend whose `addr` changes is in both
    /// lists: it is another node, so its state and connections do not
    /// carry over.
    pub backends_removed: Vec<&'a str>,
    /// Backends kept (same name and `addr`) whose other keys change
    /// (`backup`, `probe_url`): updated in place, state and connections kept.
    pub backends_changed: Vec<&'a str>,
    /// A pool setting (anything but `listen` and `backends`) changes: the
    /// pool's config is replaced and applies to new work.
    pub settings_changed: bool,
}

impl PoolPlan<'_> {
    /// True when the pool does not change.
    pub fn is_empty(&self) -> bool {
        self.listen_added.is_empty()
            && self.listen_removed.is_empty()
            && self.backends_added.is_empty()
            && self.backends_removed.is_empty()
            && self.backends_changed.is_empty()
            && !self.settings_changed
    }
}

impl ReloadPlan<'_> {
    /// The plan for the kept pool `name`; `None` when it does not change.
    pub fn kept(&self, name: &str) -> Option<&PoolPlan<'_>> {
        self.keep.iter().find(|p| p.name == name)
    }

    /// What the plan changes, by name, for `reloaded` and `POST /reload`.
    pub fn changes(&self) -> Reloaded {
        let names = |list: &[&str]| list.iter().map(|n| (*n).to_owned()).collect();
        let backends =
            |of: &dyn Fn(&PoolPlan<'_>) -> Vec<String>| self.keep.iter().flat_map(of).collect();
        let qualified = |p: &PoolPlan<'_>, list: &[&str]| -> Vec<String> {
            list.iter().map(|b| format!("{}/{b}", p.name)).collect()
        };
        Reloaded {
            pools_added: names(&self.bind),
            pools_removed: names(&self.stop),
            pools_changed: self.keep.iter().map(|p| p.name.to_owned()).collect(),
            backends_added: backends(&|p| qualified(p, &p.backends_added)),
            backends_removed: backends(&|p| qualified(p, &p.backends_removed)),
            backends_changed: backends(&|p| qualified(p, &p.backends_changed)),
        }
    }
}

/// The changes that turn the running `old` config into `new`. Listen
/// addresses compare as equal values: see [`in_bound_terms`] for how the
/// server writes them so that a port-0 listener is recognised.
pub fn plan<'a>(old: &'a Config, new: &'a Config) -> ReloadPlan<'a> {
    let find = |c: &'a Config, name: &str| c.pools.iter().find(|p| p.name == name);
    ReloadPlan {
        bind: new
            .pools
            .iter()
            .filter(|p| find(old, &p.name).is_none())
            .map(|p| p.name.as_str())
            .collect(),
        stop: old
            .pools
            .iter()
            .filter(|p| find(new, &p.name).is_none())
            .map(|p| p.name.as_str())
            .collect(),
        keep: new
            .pools
            .iter()
            .filter_map(|n| Some(pool_plan(find(old, &n.name)?, n)))
            .filter(|p| !p.is_empty())
            .collect(),
        restart_only: restart_only(old, new),
    }
}

fn pool_plan<'a>(old: &'a PoolConfig, new: &'a PoolConfig) -> PoolPlan<'a> {
    let missing = |from: &[SocketAddr], other: &[SocketAddr]| -> Vec<SocketAddr> {
        from.iter()
            .copied()
            .filter(|a| !other.contains(a))
            .collect()
    };
    let backends = MemberPlan::between(&old.backends, &new.backends);
    PoolPlan {
        name: &new.name,
        listen_added: missing(&new.listen, &old.listen),
        listen_removed: missing(&old.listen, &new.listen),
        backends_added: backends.named(Change::Added),
        backends_removed: backends.removed.iter().map(|b| b.name.as_str()).collect(),
        backends_changed: backends.named(Change::Changed),
        settings_changed: settings(old) != settings(new),
    }
}

/// The pool's settings: all but its listen addresses and backends.
fn settings(pool: &PoolConfig) -> PoolConfig {
    PoolConfig {
        listen: Vec::new(),
        backends: Vec::new(),
        ..pool.clone()
    }
}

/// The keys of `admin`, `log`, `state_file` and `pid_file` that differ:
/// they apply at the next restart.
fn restart_only(old: &Config, new: &Config) -> Vec<&'static str> {
    let (oa, na) = (old.admin.as_ref(), new.admin.as_ref());
    let (ol, nl) = (&old.log, &new.log);
    [
        ("admin.listen", oa.map(|a| a.listen) != na.map(|a| a.listen)),
        ("admin.allow", oa.map(|a| &a.allow) != na.map(|a| &a.allow)),
        ("admin.hosts", oa.map(|a| &a.hosts) != na.map(|a| &a.hosts)),
        ("log.level", ol.level != nl.level),
        ("log.format", ol.format != nl.format),
        ("log.file", ol.file != nl.file),
        ("state_file", old.state_file != new.state_file),
        ("pid_file", old.pid_file != new.pid_file),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}

/// A running listener: the address it was configured with and the one it
/// is bound to (they differ for a port-0 address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// As the config that bound it wrote it.
    pub configured: SocketAddr,
    /// As bound.
    pub local: SocketAddr,
}

impl Bound {
    /// True when `addr` from a config names this listener: as configured,
    /// or as bound (a port-0 address written back with its real port).
    pub fn serves(&self, addr: SocketAddr) -> bool {
        addr == self.configured || addr == self.local
    }
}

/// `old` and `new` with the listen addresses of the pools `bound` knows
/// written as bound addresses, so [`plan`] keeps a listener that any new
/// address names and binds only the addresses no listener serves: each
/// old pool lists its listeners' bound addresses, and each new address a
/// listener serves becomes the bound addresses of every listener serving it.
pub fn in_bound_terms(
    old: &Config,
    new: &Config,
    bound: impl Fn(&str) -> Option<Vec<Bound>>,
) -> (Config, Config) {
    let (mut old, mut new) = (old.clone(), new.clone());
    for pool in &mut old.pools {
        if let Some(listens) = bound(&pool.name) {
            pool.listen = listens.iter().map(|l| l.local).collect();
        }
    }
    for pool in &mut new.pools {
        if let Some(listens) = bound(&pool.name) {
            pool.listen = pool
                .listen
                .iter()
                .flat_map(|&a| {
                    let serving: Vec<SocketAddr> = listens
                        .iter()
                        .filter(|l| l.serves(a))
                        .map(|l| l.local)
                        .collect();
                    if serving.is_empty() { vec![a] } else { serving }
                })
                .collect();
        }
    }
    (old, new)
}

#[cfg(test)]
#[path = "reload_tests.rs"]
mod tests;
