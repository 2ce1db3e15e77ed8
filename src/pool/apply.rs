//! The one place health events change a pool: connect outcomes from client
//! traffic, probe reports, manual quarantine and release. Each applies the
//! pure rules of [`crate::pool::health`] under the pool lock, logs what changed and
//! re-runs the drain check ([`crate::pool::drain`]) whenever a backend's
//! usability changed; a change to what is saved (quarantine, strikes,
//! state) is told to the writer.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::config::{BackendConfig, PoolConfig, ProbeKind};
use crate::pool::backend::{Backend, Suitability};
use crate::pool::health::{Effect, Policy, ProbeOutcome, State};
use crate::pool::lag::{self, Claim, Judgement, Own, Rule};
use crate::pool::lag_detail;
use crate::pool::node::{self, Requirement};
use crate::pool::registry::{BackendId, Pool, ProbeRecord};
use crate::pool::report::{Proof, Report, Verdict};
use crate::pool::saved::kept;
use crate::pool::stall;

/// The heights of `backends` other than `except` that the lag rule weighs:
/// those whose state comes from their probes (not quarantined for another
/// reason).
fn claims(backends: &[Backend], except: BackendId) -> Vec<Claim> {
    backends
        .iter()
        .filter(|b| b.id() != except)
        .filter_map(|b| {
            let state = b.health().state();
            let weighed = matches!(state, State::Healthy | State::Unknown | State::Lagging);
            Some(Claim {
                height: b.height().filter(|_| weighed)?,
                proven: b.proven(),
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
    /// Log an effect and count it; true if it changed usability.
    pub(in crate::pool) fn report(&self, b: &Backend, effect: Effect) -> bool {
        match effect {
            Effect::None => false,
            Effect::Quarantined { reason, window } => {
                b.stats().quarantines[reason.index()].fetch_add(1, Ordering::Relaxed);
                warn!(
                    pool = %self.name, backend = %b.config().name, reason = reason.as_str(),
                    window_ms = window.as_millis() as u64, strikes = b.health().strikes(),
                    "quarantined"
                );
                true
            }
            Effect::Released => {
                info!(pool = %self.name, backend = %b.config().name, height = b.height(), "released");
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
    /// Each backend's id and settings, in config order: what the prober
    /// subscribes to.
    pub fn probe_targets(&self) -> Vec<(BackendId, Arc<BackendConfig>)> {
        self.pool
            .backends()
            .active
            .iter()
            .map(|b| (b.id(), b.config().clone()))
            .collect()
    }

    /// The epoch of `backend` now; a probe passes it back to
    /// [`Probing::apply_probe`] so a result that raced a manual change is dropped.
    pub fn epoch_of(&self, backend: BackendId) -> Option<u64> {
        let mut backends = self.pool.backends();
        Pool::find(&mut backends.active, backend).map(|b| b.health().epoch())
    }

    /// When `backend`'s quarantine window ends (or ended, or was released:
    /// the probes that bring it back are due from then); `None` while it
    /// has none.
    pub fn window_end(&self, backend: BackendId) -> Option<Instant> {
        let mut backends = self.pool.backends();
        Pool::find(&mut backends.active, backend)
            .and_then(|b| b.health().quarantine())
            .map(|q| q.until)
    }

    /// True when `backend`'s claim of `height` must be proven (see
    /// [`lag::needs_proof`]).
    pub fn needs_proof(&self, backend: BackendId, height: u64) -> bool {
        let rule = rule(&self.pool.config());
        let backends = self.pool.backends();
        lag::needs_proof(height, &claims(&backends.active, backend), rule)
    }

    /// Judge each backend again against `req`, the pool's requirement now
    /// (after a reload, or once records kept under another config were put
    /// back: a state file, a live upgrade), on what its node last told.
    /// One found unfit is out as its probe would have put it: `unsuitable`
    /// at once, its last probe's outcome and detail saying so, drained.
    /// One found fit again returns through its probes, as ever. Left to
    /// the next probe, a node slow to answer would stay in selection
    /// meanwhile under a requirement it does not meet.
    pub fn judge_again(&self, req: &Requirement, now: Instant) {
        let config = self.pool.config();
        let policy = Policy::of(&config);
        let mut backends = self.pool.backends();
        let mut changed = false;
        for b in &mut backends.active {
            let Some(facts) = b.node().cloned() else {
                continue;
            };
            let unfit = node::judge(req, &facts).err();
            let suitability = match unfit {
                Some(_) => Suitability::Unsuitable,
                None => Suitability::Suitable,
            };
            if suitability == b.suitability() {
                continue;
            }
            b.set_node(facts, suitability);
            let Some(unfit) = unfit else {
                continue;
            };
            // The same probe, judged by the requirement now: its time kept.
            let at = b.last_probe().map_or_else(SystemTime::now, |p| p.at);
            b.set_last_probe(Some(ProbeRecord {
                at,
                outcome: ProbeOutcome::Unsuitable,
                detail: unfit.to_string(),
            }));
            let was_usable = b.health().is_usable();
            let before = kept(b.health());
            let effect = b.health_mut().probe(ProbeOutcome::Unsuitable, now, &policy);
            self.pool.note(before, b.health());
            changed |= self.pool.report(b, effect) || was_usable != b.health().is_usable();
        }
        self.pool.note_servable(&backends, &config);
        if changed {
            self.pool.drain(&mut backends, &config);
        }
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
        if b.health().epoch() != epoch {
            debug!(pool = %self.pool.name, backend = %b.config().name, "probe_stale");
            return;
        }
        let strict = node::strict(&config.health);
        // Judged fit for the first time, it becomes another leg: drains
        // the last-leg rule held may go on.
        let was_taking = b.takes_clients(strict);
        if report.height.is_some() {
            b.set_height(report.height, report.proof == Proof::Proven);
        } else if !reads_height(config.health.probe) {
            // The probe kind changed (a reload) to one that reads none: an
            // old height would be shown, and weighed, for good.
            b.set_height(None, false);
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
        // What the node says it is outweighs every other verdict: a node
        // that cannot serve the pool's clients gets none of them.
        let outcome = match &report.unfit {
            Some(unfit) => {
                detail = Some(unfit.to_string());
                ProbeOutcome::Unsuitable
            }
            None => outcome,
        };
        if let Some(facts) = &report.node {
            let suitability = if report.unfit.is_some() {
                Suitability::Unsuitable
            } else {
                Suitability::Suitable
            };
            b.set_node(facts.clone(), suitability);
        }
        b.stats().probes[outcome.index()].fetch_add(1, Ordering::Relaxed);
        let detail = detail.unwrap_or_else(|| report.detail.clone());
        if b.last_probe().as_ref().is_none_or(|p| p.outcome != outcome) {
            info!(
                pool = %self.pool.name, backend = %b.config().name, outcome = outcome.as_str(),
                height = report.height, detail = detail.as_str(), "probe"
            );
        }
        b.set_last_probe(Some(ProbeRecord {
            at: SystemTime::now(),
            outcome,
            detail,
        }));
        let was_usable = b.health().is_usable();
        let before = kept(b.health());
        let effect = b.health_mut().probe(outcome, now, &Policy::of(&config));
        self.pool.note(before, b.health());
        let changed = self.pool.report(b, effect)
            || was_usable != b.health().is_usable()
            || was_taking != b.takes_clients(strict);
        self.pool.note_servable(&backends, &config);
        if changed {
            self.pool.drain(&mut backends, &config);
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::config::Config;
    use crate::pool::admission::Refusal;
    use crate::pool::node::NodeFacts;
    use crate::pool::snapshot::BackendSnapshot;

    /// Pool `p` of one `bitcoin-p2p` backend `a` whose health has `extra`.
    fn config(extra: &str) -> PoolConfig {
        let yaml = format!(
            "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
             quarantine: {{ base: 1m, max: 1h }}\n    \
             health: {{ probe: bitcoin-p2p, network: litecoin-regtest{extra} }}\n    \
             backends: [{{ name: a, addr: \"127.0.0.1:9\" }}]\n"
        );
        Config::parse(&yaml, "inline.yaml".as_ref()).unwrap().pools[0].clone()
    }

    fn a(pool: &Pool) -> BackendSnapshot {
        pool.view().overview().backends.remove(0)
    }

    /// A reload that adds a requirement judges the node again at once on
    /// what its last probe read; one that drops it makes it fit again,
    /// returning through its probes.
    #[test]
    fn a_changed_requirement_is_applied_to_the_last_facts_at_once() {
        let pool = Arc::new(Pool::new(config(""), CancellationToken::new()));
        let now = Instant::now();
        // Litecoin Core without -peerblockfilters.
        let facts = NodeFacts::p2p(0x0100_0409, 70016, "/LitecoinCore:0.21.2.1/", 5);
        let report = Report::new(Verdict::Healthy, "").with_node(facts);
        let epoch = pool.probing().epoch_of(0).unwrap();
        pool.probing().apply_probe(0, &report, epoch, now);
        assert_eq!(a(&pool).suitability, Suitability::Suitable);
        assert_eq!(a(&pool).state, State::Healthy);

        let needs = config(", require_services: [compact_filters]");
        let req = Requirement::of(&needs.health, None);
        pool.reconfigure(needs);
        pool.probing().judge_again(&req, now);
        let b = a(&pool);
        assert_eq!(b.suitability, Suitability::Unsuitable);
        assert_eq!(b.state, State::Unsuitable);
        let probe = b.last_probe.unwrap();
        assert_eq!(probe.outcome, ProbeOutcome::Unsuitable);
        assert_eq!(probe.detail, "lacks compact_filters");
        let refused = pool.gate().admit_from("10.0.0.1".parse().unwrap());
        assert_eq!(refused.unwrap_err(), Refusal::NoSuitableBackend);
        // Judged again by the same requirement: nothing more happens.
        pool.probing().judge_again(&req, now);
        assert_eq!(a(&pool).strikes, 1);

        let relaxed = config("");
        let req = Requirement::of(&relaxed.health, None);
        pool.reconfigure(relaxed);
        pool.probing().judge_again(&req, now);
        let b = a(&pool);
        assert_eq!(b.suitability, Suitability::Suitable);
        assert_eq!(b.state, State::Unsuitable, "its window still runs");
        assert!(pool.gate().admit_from("10.0.0.1".parse().unwrap()).is_ok());
    }
}
