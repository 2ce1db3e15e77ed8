//! The one place health events change a pool: connect outcomes from client
//! traffic, probe reports, manual quarantine and release. Each applies the
//! pure rules of [`crate::pool::health`] under the pool lock, logs what changed and
//! re-runs the drain check ([`crate::pool::drain`]) whenever a backend's
//! usability changed; a change to what is saved (quarantine, strikes,
//! state) is told to the writer.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::config::{PoolConfig, ProbeKind};
use crate::pool::admission::source_of;
use crate::pool::health::{Effect, Policy, ProbeOutcome, QuarantineReason, State};
use crate::pool::lag::{self, Claim, Judgement, Own, Rule};
use crate::pool::lag_detail;
use crate::pool::registry::{Backend, BackendId, Pool, ProbeRecord};
use crate::pool::report::{Proof, Report, Verdict};
use crate::pool::saved::kept;
use crate::pool::stall;

/// A manual command named a backend the pool does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pool {pool} has no backend {backend}; it has {}", names(.known))]
pub struct UnknownBackend {
    /// The pool.
    pub pool: String,
    /// The name asked for.
    pub backend: String,
    /// The names it has, in config order.
    pub known: Vec<String>,
}

/// Names listed in an [`UnknownBackend`] error, at most this many.
const NAMES_SHOWN: usize = 20;

/// `a, b, c`, or the first [`NAMES_SHOWN`] and how many more.
fn names(known: &[String]) -> String {
    match known.len() {
        0 => "none".to_owned(),
        n if n <= NAMES_SHOWN => known.join(", "),
        n => format!(
            "{} and {} more",
            known[..NAMES_SHOWN].join(", "),
            n - NAMES_SHOWN
        ),
    }
}

/// The heights of `backends` other than `except` that the lag rule weighs:
/// those whose state comes from their probes (not quarantined for another
/// reason).
fn claims(backends: &[Backend], except: BackendId) -> Vec<Claim> {
    backends
        .iter()
        .filter(|b| b.id != except)
        .filter_map(|b| {
            let state = b.health.state();
            let weighed = matches!(state, State::Healthy | State::Unknown | State::Lagging);
            Some(Claim {
                height: b.height.filter(|_| weighed)?,
                proven: b.proven,
                healthy: state == State::Healthy,
            })
        })
        .collect()
}

/// Whether probes of `kind` read a height.
fn reads_height(kind: ProbeKind) -> bool {
    !matches!(kind, ProbeKind::Connect | ProbeKind::Http)
}

/// How `config`'s pool weighs heights.
fn rule(config: &PoolConfig) -> Rule {
    Rule {
        max_lag: config.health.max_lag_blocks,
        provable: config.health.proves_heights(),
    }
}

/// What the lag rule needs of a probe's proof.
fn own(proof: &Proof) -> Own {
    match proof {
        Proof::NotAsked => Own::NotAsked,
        Proof::Proven => Own::Proven,
        Proof::Unproven(_) | Proof::Contradicted(_) => Own::Unproven,
    }
}

/// The detail of a claim that does not count.
fn unproven(height: u64, lowest_other: u64, max_lag: u64, proof: &Proof) -> String {
    let why = match proof {
        Proof::Unproven(why) | Proof::Contradicted(why) => why.as_str(),
        Proof::Proven | Proof::NotAsked => "no headers were checked",
    };
    format!(
        "height {height} not counted: more than {max_lag} blocks above another backend \
         (at {lowest_other}) and not proven: {why}"
    )
}

impl Pool {
    /// Record the outcome of a client connect to `backend` that began at
    /// `started`.
    pub fn record_connect(&self, backend: BackendId, started: Instant, ok: bool) {
        if ok {
            let mut backends = self.backends();
            if let Some(b) = Pool::find(&mut backends.active, backend) {
                b.stats.connections_total.fetch_add(1, Ordering::Relaxed);
                let before = kept(&b.health);
                b.health.connect_succeeded();
                self.note(before, &b.health);
            }
            return;
        }
        self.record_failure(backend, |_, b, policy| {
            b.health.connect_failed(started, Instant::now(), policy)
        });
    }

    /// A client connection from `client` to `backend` that began at
    /// `started` was closed by the backend at once, before it sent a byte:
    /// what a node that banned our address does to every client, and what
    /// any node does to one client's garbage. Counts toward
    /// `quarantine.failures` like a failed connect, one incident once, as
    /// far as such closes come from 2 client addresses or more; the address
    /// is steered to the other backends for `quarantine.base`
    /// ([`crate::pool::refused`]).
    pub fn record_closed_at_once(&self, backend: BackendId, started: Instant, client: IpAddr) {
        let source = source_of(client);
        self.record_refused(backend, source, client);
        self.record_failure(backend, |pool, b, policy| {
            let now = Instant::now();
            let (effect, counted) = b.health.closed_at_once(source, started, now, policy);
            let closing = b.health.closes_at_once > 0;
            b.stats.closing_at_once.store(closing, Ordering::Relaxed);
            if counted {
                warn!(
                    pool = %pool.name, backend = %b.config.name,
                    closes = b.health.closes_at_once, failures = policy.failures,
                    "closed_at_once"
                );
            }
            effect
        });
    }

    /// Remember that `backend` refused the address `source`; logged at
    /// its 1st, 2nd, 4th, 8th ... close in a row.
    fn record_refused(&self, backend: BackendId, source: IpAddr, client: IpAddr) {
        let config = self.config();
        let q = &config.quarantine;
        let mut m = self.backends();
        let count = m
            .refused
            .record(source, backend, Instant::now(), q.base, q.refused_clients);
        if let Some(b) = m.active.iter().find(|b| b.id == backend)
            && count.is_power_of_two()
        {
            info!(
                pool = %self.name, backend = %b.config.name, client = %client, count,
                "refused_by_node"
            );
        }
    }

    /// A client connection received bytes from `backend`: the closes at
    /// once counted so far were not the backend refusing clients.
    pub fn record_served(&self, backend: BackendId) {
        let mut backends = self.backends();
        if let Some(b) = Pool::find(&mut backends.active, backend) {
            b.health.served();
            b.stats.closing_at_once.store(false, Ordering::Relaxed);
        }
    }

    /// A client connect or a probe found `backend`'s address to be our own
    /// listener `to`: take it out at once (logged once per window).
    pub fn record_self_loop(&self, backend: BackendId, to: std::net::SocketAddr) {
        self.record_failure(backend, |pool, b, policy| {
            let effect = b.health.self_loop(Instant::now(), policy);
            if effect != Effect::None {
                warn!(
                    pool = %pool.name, backend = %b.config.name, addr = b.config.addr.as_str(),
                    listener = %to, "self_loop"
                );
            }
            effect
        });
    }

    /// Count a failure of client traffic on `backend`, apply it with
    /// `apply`, and act on the effect.
    fn record_failure(
        &self,
        backend: BackendId,
        apply: impl FnOnce(&Pool, &mut Backend, &Policy) -> Effect,
    ) {
        let config = self.config();
        let mut backends = self.backends();
        let Some(b) = Pool::find(&mut backends.active, backend) else {
            return;
        };
        b.stats
            .connect_failures_total
            .fetch_add(1, Ordering::Relaxed);
        let before = kept(&b.health);
        let effect = apply(self, b, &Policy::of(&config));
        self.note(before, &b.health);
        if self.report(b, effect) {
            self.drain(&mut backends, &config);
        }
    }

    /// Put the backend named `name` into maintenance for exactly `window`.
    /// Returns how many of its connections the last-leg rule keeps: when
    /// no other backend of the pool is usable they stay (logged as
    /// `last_leg_kept`) and are drained once one is; 0 when they drain now
    /// (or it has none).
    ///
    /// # Errors
    /// When the pool has no such backend.
    pub fn quarantine(&self, name: &str, window: Duration) -> Result<usize, UnknownBackend> {
        let config = self.config();
        let mut backends = self.backends();
        let b = self.by_name(&mut backends.active, name)?;
        let before = kept(&b.health);
        b.health.quarantine_manual(window, Instant::now());
        self.note(before, &b.health);
        self.report(
            b,
            Effect::Quarantined {
                reason: QuarantineReason::Manual,
                window,
            },
        );
        self.drain(&mut backends, &config);
        let kept = backends.last_leg_kept(&config, name);
        if kept > 0 {
            warn!(
                pool = %self.name, backend = name, connections = kept,
                "last_leg_kept"
            );
        }
        Ok(kept)
    }

    /// End the backend's quarantine window now; it returns once `rise`
    /// probes pass. `Ok(false)` when it was not quarantined (nothing changes).
    ///
    /// # Errors
    /// When the pool has no such backend.
    pub fn release(&self, name: &str) -> Result<bool, UnknownBackend> {
        let mut backends = self.backends();
        let b = self.by_name(&mut backends.active, name)?;
        let before = kept(&b.health);
        let ended = b.health.release(Instant::now());
        self.note(before, &b.health);
        if ended {
            info!(pool = %self.name, backend = %b.config.name, "release_requested");
        }
        Ok(ended)
    }

    fn by_name<'a>(
        &self,
        backends: &'a mut [Backend],
        name: &str,
    ) -> Result<&'a mut Backend, UnknownBackend> {
        let Some(i) = backends.iter().position(|b| b.config.name == name) else {
            return Err(UnknownBackend {
                pool: self.name.clone(),
                backend: name.to_owned(),
                known: backends.iter().map(|b| b.config.name.clone()).collect(),
            });
        };
        Ok(&mut backends[i])
    }

    /// Log an effect and count it; true if it changed usability.
    fn report(&self, b: &Backend, effect: Effect) -> bool {
        match effect {
            Effect::None => false,
            Effect::Quarantined { reason, window } => {
                b.stats.quarantines[reason.index()].fetch_add(1, Ordering::Relaxed);
                warn!(
                    pool = %self.name, backend = %b.config.name, reason = reason.as_str(),
                    window_ms = window.as_millis() as u64, strikes = b.health.strikes,
                    "quarantined"
                );
                true
            }
            Effect::Released => {
                info!(pool = %self.name, backend = %b.config.name, height = b.height, "released");
                true
            }
        }
    }
}

/// A pool's side of its probes: the epoch a probe starts in, whether a
/// claim needs proof, and the report applied.
#[derive(Clone, Copy)]
pub struct Probing<'a> {
    pool: &'a Pool,
}

impl Pool {
    /// This pool's side of its probes.
    pub fn probing(&self) -> Probing<'_> {
        Probing { pool: self }
    }
}

impl Probing<'_> {
    /// The epoch of `backend` now; a probe passes it back to
    /// [`Probing::apply_probe`] so a result that raced a manual change is dropped.
    pub fn epoch_of(&self, backend: BackendId) -> Option<u64> {
        let mut backends = self.pool.backends();
        Pool::find(&mut backends.active, backend).map(|b| b.health.epoch)
    }

    /// True when `backend`'s quarantine window ended (or was released) after
    /// `since` and is over at `now`: the probes that bring it back are due.
    pub fn window_ended_since(&self, backend: BackendId, since: Instant, now: Instant) -> bool {
        let mut backends = self.pool.backends();
        Pool::find(&mut backends.active, backend)
            .and_then(|b| b.health.quarantine)
            .is_some_and(|q| since < q.until && q.until <= now)
    }

    /// True when `backend`'s claim of `height` must be proven (see
    /// [`lag::needs_proof`]).
    pub fn needs_proof(&self, backend: BackendId, height: u64) -> bool {
        let rule = rule(&self.pool.config());
        let backends = self.pool.backends();
        lag::needs_proof(height, &claims(&backends.active, backend), rule)
    }

    /// Apply a probe `report` for `backend`, taken while its epoch was `epoch`.
    pub fn apply_probe(&self, backend: BackendId, report: &Report, epoch: u64, now: Instant) {
        let config = self.pool.config();
        let mut backends = self.pool.backends();
        // Only a height is weighed against the others' (a walk over them all).
        let others = match report.height {
            Some(_) => claims(&backends.active, backend),
            None => Vec::new(),
        };
        let stall = config.health.stall_timeout.and_then(|timeout| {
            stall::sample(&mut backends.active, now);
            stall::stalled(
                &backends.active,
                backend,
                now,
                timeout,
                config.health.stall_rule,
            )
        });
        let Some(b) = Pool::find(&mut backends.active, backend) else {
            return;
        };
        if b.health.epoch != epoch {
            debug!(pool = %self.pool.name, backend = %b.config.name, "probe_stale");
            return;
        }
        if report.height.is_some() {
            b.height = report.height;
            b.proven = report.proof == Proof::Proven;
        } else if !reads_height(config.health.probe) {
            // The probe kind changed (a reload) to one that reads none: an
            // old height would be shown, and weighed, for good.
            b.height = None;
            b.proven = false;
        }
        let rule = rule(&config);
        let max_lag = rule.max_lag;
        let mut detail = None;
        // Its own headers say the claim is false: lying or broken.
        let contradicted = match (report.height, &report.proof) {
            (Some(h), Proof::Contradicted(why)) => {
                Some(format!("height {h} contradicted by its own headers: {why}"))
            }
            _ => None,
        };
        let outcome = match report.verdict {
            Verdict::Healthy if contradicted.is_some() => {
                detail = contradicted;
                ProbeOutcome::Unhealthy
            }
            Verdict::Healthy => match report
                .height
                .map(|h| (h, lag::judge(h, own(&report.proof), &others, rule)))
            {
                Some((h, Judgement::Lagging { reference })) => {
                    detail = Some(lag_detail::lagging(h, reference, max_lag));
                    ProbeOutcome::Lagging
                }
                Some((h, Judgement::Unproven { lowest_other })) => {
                    detail = Some(unproven(h, lowest_other, max_lag, &report.proof));
                    ProbeOutcome::Unknown
                }
                Some((_, Judgement::Fine)) | None => ProbeOutcome::Healthy,
            },
            Verdict::Unknown => ProbeOutcome::Unknown,
            Verdict::Unhealthy => ProbeOutcome::Unhealthy,
            Verdict::Down => ProbeOutcome::Down,
        };
        // A probe that passes does not outweigh what its clients see.
        let outcome = match (outcome, stall) {
            (ProbeOutcome::Healthy | ProbeOutcome::Unknown, Some(why)) => {
                detail = Some(why);
                ProbeOutcome::Stalled
            }
            (outcome, _) => outcome,
        };
        b.stats.probes[outcome.index()].fetch_add(1, Ordering::Relaxed);
        let detail = detail.unwrap_or_else(|| report.detail.clone());
        if b.last_probe.as_ref().is_none_or(|p| p.outcome != outcome) {
            info!(
                pool = %self.pool.name, backend = %b.config.name, outcome = outcome.as_str(),
                height = report.height, detail = detail.as_str(), "probe"
            );
        }
        b.last_probe = Some(ProbeRecord {
            at: SystemTime::now(),
            outcome,
            detail,
        });
        let was_usable = b.health.is_usable();
        let before = kept(&b.health);
        let effect = b.health.probe(outcome, now, &Policy::of(&config));
        self.pool.note(before, &b.health);
        let changed = self.pool.report(b, effect) || was_usable != b.health.is_usable();
        if changed {
            self.pool.drain(&mut backends, &config);
        }
    }
}
