//! What a probe learnt about a node (its services and protocol, its
//! software, its chain) and the judgement of whether it can serve the
//! pool's clients: [`judge`] against the pool's [`Requirement`].
//!
//! Pure: no I/O. Text a node chose is kept as printable ASCII and bounded
//! here, whoever builds the facts. `NodeFacts` serializes as the `node`
//! object of `/status` and travels in the state file and a live upgrade.

use std::fmt;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

pub use crate::config::Services;
use crate::config::{HealthConfig, Network};

/// Longest user agent shown (Bitcoin Core's `MAX_SUBVERSION_LENGTH`); the
/// rest is cut.
pub const MAX_USER_AGENT: usize = 256;

/// Longest other text a server chose that is kept (software and protocol
/// versions, coin names); the rest is cut.
pub const MAX_TEXT: usize = 80;

/// What one probe learnt about a node; which facts depends on the probe
/// kind. Serialized without a tag: the fields tell the kinds apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NodeFacts {
    /// From a `bitcoin-p2p` probe: the node's `version`.
    P2p(P2pFacts),
    /// From an `electrum*` probe: `server.version` and `server.features`.
    Electrum(ElectrumFacts),
    /// From a `blockbook` probe: its `/api/` status.
    Blockbook(BlockbookFacts),
}

/// What a P2P node's `version` says of it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct P2pFacts {
    /// The service bits it announces.
    pub services: Services,
    /// Its protocol version (a negative one reads as 0).
    pub protocol: u32,
    /// Its user agent: printable ASCII, at most [`MAX_USER_AGENT`] bytes.
    pub user_agent: String,
    /// The best height it announced. Not shown (the backend's height is)
    /// nor kept: 0 when read back.
    #[serde(default)]
    pub start_height: i32,
}

/// What an Electrum server says of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElectrumFacts {
    /// Its software (`ElectrumX 1.16.0`), from `server.version`.
    pub server_version: String,
    /// The protocol version it agreed to speak with us.
    pub protocol: String,
    /// The newest protocol version it speaks, from `server.features`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_max: Option<String>,
    /// Its chain's genesis block hash, from `server.features`; `None` when
    /// it did not answer that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub genesis_hash: Option<String>,
}

/// What a Blockbook's status says of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockbookFacts {
    /// `blockbook.coin`: the coin it indexes (`Litecoin`, `Testnet`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coin: Option<String>,
    /// `blockbook.version`: its software version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// One line for people: `/LitecoinCore:0.21.2.1/, protocol 70016,
/// services 0x1000409 (network, witness, network_limited, mweb)`.
impl fmt::Display for NodeFacts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeFacts::P2p(p) => write!(
                f,
                "{}, protocol {}, services {} ({})",
                p.user_agent,
                p.protocol,
                p.services,
                p.services.describe()
            ),
            NodeFacts::Electrum(e) => {
                write!(f, "{}, protocol {}", e.server_version, e.protocol)?;
                if let Some(genesis) = &e.genesis_hash {
                    write!(f, ", genesis {genesis}")?;
                }
                Ok(())
            }
            NodeFacts::Blockbook(b) => {
                let coin = b.coin.as_deref().unwrap_or("coin not told");
                match &b.version {
                    Some(v) => write!(f, "{coin}, blockbook {v}"),
                    None => f.write_str(coin),
                }
            }
        }
    }
}

impl NodeFacts {
    /// The facts of a P2P node's `version`, its user agent made printable
    /// and cut to [`MAX_USER_AGENT`] bytes.
    pub fn p2p(services: u64, protocol: i32, user_agent: &str, start_height: i32) -> NodeFacts {
        NodeFacts::P2p(P2pFacts {
            services: Services(services),
            protocol: u32::try_from(protocol).unwrap_or(0),
            user_agent: printable(user_agent, MAX_USER_AGENT),
            start_height,
        })
    }

    /// The facts of an Electrum server, its texts made printable and cut
    /// to [`MAX_TEXT`].
    pub fn electrum(
        server_version: &str,
        protocol: &str,
        protocol_max: Option<&str>,
        genesis_hash: Option<&str>,
    ) -> NodeFacts {
        NodeFacts::Electrum(ElectrumFacts {
            server_version: printable(server_version, MAX_TEXT),
            protocol: printable(protocol, MAX_TEXT),
            protocol_max: protocol_max.map(|p| printable(p, MAX_TEXT)),
            genesis_hash: genesis_hash.map(hash_text),
        })
    }

    /// The facts of a Blockbook, its texts made printable and cut to
    /// [`MAX_TEXT`].
    pub fn blockbook(coin: Option<&str>, version: Option<&str>) -> NodeFacts {
        NodeFacts::Blockbook(BlockbookFacts {
            coin: coin.map(|c| printable(c, MAX_TEXT)),
            version: version.map(|v| printable(v, MAX_TEXT)),
        })
    }
}

// By hand for `service_names`, which is shown but derived from `services`
// (and ignored when read back): the contract's `node` object.
impl Serialize for P2pFacts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut out = s.serialize_struct("P2pFacts", 4)?;
        out.serialize_field("services", &self.services)?;
        out.serialize_field("service_names", &self.services.names())?;
        out.serialize_field("protocol", &self.protocol)?;
        out.serialize_field("user_agent", &self.user_agent)?;
        out.end()
    }
}

/// `text` as printable ASCII: any other character becomes `?`; at most
/// `max` characters (and so bytes), the rest cut.
pub fn printable(text: &str, max: usize) -> String {
    text.chars()
        .take(max)
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// A block hash as a server gave it: 64 hex digits in lower case, or, when
/// it is no such thing, the printable text (which then matches no hash).
fn hash_text(text: &str) -> String {
    if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        text.to_ascii_lowercase()
    } else {
        printable(text, MAX_TEXT)
    }
}

/// What a pool asks of a backend before it is given clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// Service bits a P2P node must announce (`health.require_services`).
    pub services: Services,
    /// Lowest P2P protocol version (`health.min_protocol_version`).
    pub min_protocol: Option<u32>,
    /// The pool's chain (`health.network`); `Custom`: no chain check.
    pub network: Network,
    /// That chain's genesis block hash as Electrum servers give it (hex,
    /// display order, lower case); `None`: no genesis check.
    pub genesis: Option<String>,
}

impl Requirement {
    /// The requirement of a pool with `health`, whose network's genesis
    /// hash is `genesis` (display hex; the probe layer knows the chains).
    pub fn of(health: &HealthConfig, genesis: Option<String>) -> Requirement {
        Requirement {
            services: health.require_services,
            min_protocol: health.min_protocol_version,
            network: health.network,
            genesis: genesis.map(|g| g.to_ascii_lowercase()),
        }
    }
}

/// One thing that keeps a node from serving the pool's clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misfit {
    /// Service bits it does not announce.
    Lacks(Services),
    /// Its protocol version is below the minimum.
    Protocol {
        /// What it announces.
        have: u32,
        /// The pool's minimum.
        min: u32,
    },
    /// An Electrum server of another chain: its genesis hash.
    Genesis {
        /// The genesis hash it gave.
        have: String,
        /// The pool's chain.
        network: Network,
    },
    /// A Blockbook of another coin.
    Coin {
        /// The coin it names.
        have: String,
        /// The pool's chain.
        network: Network,
    },
}

impl fmt::Display for Misfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misfit::Lacks(services) => write!(f, "lacks {}", services.describe()),
            Misfit::Protocol { have, min } => write!(f, "protocol {have} below {min}"),
            Misfit::Genesis { have, network } => write!(f, "genesis {have} is not {network}'s"),
            Misfit::Coin { have, network } => write!(f, "coin \"{have}\" is not {network}"),
        }
    }
}

/// Why a node cannot serve the pool's clients: everything it misses
/// (services, then protocol; or its chain). Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfit(Vec<Misfit>);

impl Unfit {
    /// Each thing the node misses.
    pub fn misfits(&self) -> &[Misfit] {
        &self.0
    }
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, misfit) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{misfit}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Unfit {}

/// Whether a node with `facts` can serve the clients of a pool that asks
/// `req`. Only the facts the probe kind produced are judged: an Electrum
/// server has no services, a P2P node no genesis hash to give, and a fact
/// the node did not give (no `server.features`) is not held against it.
///
/// # Errors
/// [`Unfit`], naming everything the node misses.
pub fn judge(req: &Requirement, facts: &NodeFacts) -> Result<(), Unfit> {
    let mut misfits = Vec::new();
    let named = req.network != Network::Custom;
    match facts {
        NodeFacts::P2p(p) => {
            let lacks = req.services.missing_from(p.services);
            if !lacks.is_empty() {
                misfits.push(Misfit::Lacks(lacks));
            }
            if let Some(min) = req.min_protocol
                && p.protocol < min
            {
                misfits.push(Misfit::Protocol {
                    have: p.protocol,
                    min,
                });
            }
        }
        NodeFacts::Electrum(e) => {
            if let (true, Some(want), Some(have)) = (named, &req.genesis, &e.genesis_hash)
                && !have.eq_ignore_ascii_case(want)
            {
                misfits.push(Misfit::Genesis {
                    have: have.clone(),
                    network: req.network,
                });
            }
        }
        NodeFacts::Blockbook(b) => {
            let coins = req.network.blockbook_coins();
            if let (true, Some(have)) = (named, &b.coin)
                && !coins.iter().any(|c| c.eq_ignore_ascii_case(have))
            {
                misfits.push(Misfit::Coin {
                    have: have.clone(),
                    network: req.network,
                });
            }
        }
    }
    if misfits.is_empty() {
        Ok(())
    } else {
        Err(Unfit(misfits))
    }
}

/// The pool asks for something a node must prove before it gets a client
/// (`health.require_services`, `min_protocol_version`): a backend no probe
/// has judged yet gets none.
pub fn strict(health: &HealthConfig) -> bool {
    !health.require_services.is_empty() || health.min_protocol_version.is_some()
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
