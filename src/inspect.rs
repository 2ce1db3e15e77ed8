//! What integration tests and tools outside the crate use to drive and read
//! a server in-process: its pools ([`Server::pools`](crate::Server::pools)),
//! their snapshots, the probe vocabulary a test feeds a pool with, one
//! probe of a node as a pool judges it, the P2P messages a test peer
//! speaks, and the parsers of bytes from outside (the network, the state
//! file, the other process of a live upgrade) for the fuzz harness
//! (fuzz/). Everything else in the crate is its own.

pub use crate::net::proxy_header;
pub use crate::ops::admin::{AdminRequest, parse_request};
pub use crate::ops::admin::{HEAD_TIMEOUT, MAX_CONNECTIONS, MAX_PER_SOURCE};
pub use crate::ops::status::{
    BackendStatus, PoolStatus, ProbeStatus, QuarantineStatus, Status, of_pool as status,
};
pub use crate::pool::health::{ProbeOutcome, QuarantineReason, State};
pub use crate::pool::node::{
    BlockbookFacts, ElectrumFacts, Misfit, NodeFacts, P2pFacts, Requirement, Services, Unfit, judge,
};
pub use crate::pool::registry::{ConnId, Pool, ProbeRecord};
pub use crate::pool::report::{Proof, Report, Verdict};
pub use crate::pool::snapshot::{
    BackendSnapshot, ConnSnapshot, ConnState, Counters, PoolSnapshot, QuarantineSnapshot,
};
pub use crate::probe::electrum::answers as electrum_answers;
pub use crate::probe::electrum_headers::parse as electrum_headers;
pub use crate::probe::http::{BlockbookStatus, judge_blockbook, parse_blockbook};
pub use crate::probe::prober::{probe_once, requirement};
pub use crate::probe::{pow, wire};
pub use crate::runtime::discover::dns;
pub use crate::runtime::handover::{protocol as handover, wire as handover_wire};
pub use crate::runtime::state_file;
