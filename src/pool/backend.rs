//! One backend of a pool: its settings, health record, last probe, live
//! connections and counters. Only the pool reads it; each part changes
//! through the methods of the module that owns it: the health record
//! through [`crate::pool::health`]'s, a drain through
//! [`crate::pool::drain`]'s, the traffic sample through
//! [`crate::pool::stall`]'s, and the rest through the methods here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use crate::config::BackendConfig;
use crate::pool::drain::DrainRun;
use crate::pool::health::BackendHealth;
use crate::pool::node::NodeFacts;
use crate::pool::registry::{BackendId, BackendStats, ConnEntry, ConnId, LegSource, ProbeRecord};
use crate::pool::shed::ShedRun;
use crate::pool::stall::Traffic;

/// One backend of a pool. Everything else reads a
/// [`PoolSnapshot`](crate::pool::snapshot::PoolSnapshot).
#[derive(Debug)]
pub(in crate::pool) struct Backend {
    /// Stable id.
    id: BackendId,
    /// Its config.
    config: Arc<BackendConfig>,
    /// Its health record.
    health: BackendHealth,
    /// Last block height a probe read.
    height: Option<u64>,
    /// That height was proven by the node's headers.
    proven: bool,
    /// Last probe result.
    last_probe: Option<ProbeRecord>,
    /// Live connections, oldest first.
    conns: BTreeMap<ConnId, ConnEntry>,
    /// Its counters.
    stats: Arc<BackendStats>,
    /// The drain closing its connections, while one runs.
    drain: Option<DrainRun>,
    /// The operator's shed closing its newest connections, while one runs.
    shed: Option<ShedRun>,
    /// What its connections received, as the stall rule samples it.
    traffic: Traffic,
    /// What the node told its last probe that could tell (services,
    /// protocol, software, chain).
    node: Option<NodeFacts>,
    /// Whether it can serve this pool's clients, as that probe found.
    suitability: Suitability,
    /// The newest connection it closed at once: a client accepted after it
    /// and served since breaks the run of closes.
    last_refused: ConnId,
}

/// Whether a backend can serve its pool's clients: its services, protocol
/// and chain against the pool's requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Suitability {
    /// No probe has told yet.
    #[default]
    Unjudged,
    /// The last probe that told found it fit.
    Suitable,
    /// The last probe that told found it unfit.
    Unsuitable,
}

impl Backend {
    /// A backend with a fresh record.
    pub(in crate::pool) fn new(id: BackendId, config: BackendConfig) -> Backend {
        Backend {
            id,
            config: Arc::new(config),
            health: BackendHealth::default(),
            height: None,
            proven: false,
            last_probe: None,
            conns: BTreeMap::new(),
            stats: Arc::default(),
            drain: None,
            shed: None,
            traffic: Traffic::default(),
            node: None,
            suitability: Suitability::Unjudged,
            last_refused: 0,
        }
    }

    /// Its stable id.
    pub(in crate::pool) fn id(&self) -> BackendId {
        self.id
    }

    /// Its settings.
    pub(in crate::pool) fn config(&self) -> &Arc<BackendConfig> {
        &self.config
    }

    /// Take new settings (a reload kept it, perhaps changed).
    pub(in crate::pool) fn set_config(&mut self, config: Arc<BackendConfig>) {
        self.config = config;
    }

    /// Its health record.
    pub(in crate::pool) fn health(&self) -> &BackendHealth {
        &self.health
    }

    /// Its health record, to change by [`BackendHealth`]'s own methods.
    pub(in crate::pool) fn health_mut(&mut self) -> &mut BackendHealth {
        &mut self.health
    }

    /// The last height a probe read.
    pub(in crate::pool) fn height(&self) -> Option<u64> {
        self.height
    }

    /// Whether that height was proven by the node's headers.
    pub(in crate::pool) fn proven(&self) -> bool {
        self.proven
    }

    /// The height a probe read (`None`: it read none) and whether it was
    /// proven.
    pub(in crate::pool) fn set_height(&mut self, height: Option<u64>, proven: bool) {
        self.height = height;
        self.proven = height.is_some() && proven;
    }

    /// The last probe's result.
    pub(in crate::pool) fn last_probe(&self) -> Option<&ProbeRecord> {
        self.last_probe.as_ref()
    }

    /// Record the last probe's result.
    pub(in crate::pool) fn set_last_probe(&mut self, probe: Option<ProbeRecord>) {
        self.last_probe = probe;
    }

    /// Its live connections, oldest first.
    pub(in crate::pool) fn conns(&self) -> &BTreeMap<ConnId, ConnEntry> {
        &self.conns
    }

    /// A connection is placed on it.
    pub(in crate::pool) fn attach(&mut self, conn: ConnId, entry: ConnEntry) {
        self.conns.insert(conn, entry);
    }

    /// A connection left it.
    pub(in crate::pool) fn detach(&mut self, conn: ConnId) {
        self.conns.remove(&conn);
    }

    /// Connection `conn`'s backend leg is up, on the socket `source`.
    pub(in crate::pool) fn set_source(&mut self, conn: ConnId, source: LegSource) {
        if let Some(entry) = self.conns.get_mut(&conn) {
            entry.source = Some(source);
        }
    }

    /// Its counters.
    pub(in crate::pool) fn stats(&self) -> &Arc<BackendStats> {
        &self.stats
    }

    /// The drain closing its connections, while one runs.
    pub(in crate::pool) fn drain(&self) -> Option<&DrainRun> {
        self.drain.as_ref()
    }

    /// The drain slot, to start, step or end one by
    /// [`crate::pool::drain`]'s rules.
    pub(in crate::pool) fn drain_mut(&mut self) -> &mut Option<DrainRun> {
        &mut self.drain
    }

    /// The shed closing its newest connections, while one runs.
    pub(in crate::pool) fn shed(&self) -> Option<&ShedRun> {
        self.shed.as_ref()
    }

    /// The shed slot, to start, step or end one by
    /// [`crate::pool::shed`]'s rules.
    pub(in crate::pool) fn shed_mut(&mut self) -> &mut Option<ShedRun> {
        &mut self.shed
    }

    /// What its connections received, as the stall rule samples it.
    pub(in crate::pool) fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    /// Its live connections and its traffic sample, to update the one from
    /// the other.
    pub(in crate::pool) fn conns_and_traffic(
        &mut self,
    ) -> (&BTreeMap<ConnId, ConnEntry>, &mut Traffic) {
        (&self.conns, &mut self.traffic)
    }

    /// Whether it can serve this pool's clients, as last judged.
    pub(in crate::pool) fn suitability(&self) -> Suitability {
        self.suitability
    }

    /// What the node told its last probe that could tell.
    pub(in crate::pool) fn node(&self) -> Option<&NodeFacts> {
        self.node.as_ref()
    }

    /// A probe learnt what the node is, and judged it.
    pub(in crate::pool) fn set_node(&mut self, facts: NodeFacts, suitability: Suitability) {
        self.node = Some(facts);
        self.suitability = suitability;
    }

    /// It may be given a client: judged fit, or not judged while the pool
    /// asks nothing it must prove (`strict` false: no
    /// `health.require_services` or `min_protocol_version`).
    pub(in crate::pool) fn may_serve(&self, strict: bool) -> bool {
        match self.suitability {
            Suitability::Suitable => true,
            Suitability::Unsuitable => false,
            Suitability::Unjudged => !strict,
        }
    }

    /// Connection `conn` was closed at once (refused). True when a client
    /// accepted after the one refused before it has had bytes from the node
    /// since: the node serves, so the closes are not in a row. Walks only
    /// the connections accepted since that refusal.
    pub(in crate::pool) fn note_refused(&mut self, conn: ConnId) -> bool {
        let since = self.last_refused.saturating_add(1);
        let served = self
            .conns
            .range(since..)
            .any(|(id, e)| *id != conn && e.closer.bytes_down.load(Ordering::Relaxed) > 0);
        self.last_refused = self.last_refused.max(conn);
        served
    }

    /// A new client may be given to it now: usable and fit to serve the
    /// pool's clients. What the last-leg rule asks of another backend
    /// before it takes this one's clients away.
    pub(in crate::pool) fn takes_clients(&self, strict: bool) -> bool {
        self.health().is_usable() && self.may_serve(strict)
    }
}
