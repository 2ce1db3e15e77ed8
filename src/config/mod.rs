//! The typed, validated configuration: what `config.yaml` means once parsed.
//!
//! Parsing, default merging and validation live in `parse`, with the list
//! of every key the man page prints ([`keys`]); the printed summary of
//! `pin-proxy check` lives in [`describe`]. Every value here is
//! final: no `Option` stands for "use the default".
//!
//! Layer: the ground. Uses nothing else of the crate; everything uses it.

mod describe;
mod discover;
pub(crate) mod files;
mod identity;
mod lag_warnings;
pub(crate) mod local;
mod parse;
mod services;
mod span;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use describe::{describe, warnings};
pub use discover::{DiscoverConfig, DiscoverQuery, DiscoveryConfig, Found, ProbeTemplate};
pub use identity::{BackendSource, ProxyProtocol};
pub use ipnet::IpNet;
pub(crate) use parse::default_probe_url;
pub use parse::{ConfigError, KeyGroup, keys};
pub use services::Services;
pub use span::{Span, span};

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The admin HTTP endpoint; none when `admin.listen` is absent.
    pub admin: Option<AdminConfig>,
    /// Where and how to log.
    pub log: LogConfig,
    /// How long a live upgrade waits for the new process to report ready.
    pub upgrade_timeout: Duration,
    /// Where quarantine windows and strikes are kept across restarts;
    /// none kept when `None`.
    pub state_file: Option<PathBuf>,
    /// Where the serving process writes its pid (rewritten by the new
    /// process of a live upgrade); none written when `None`.
    pub pid_file: Option<PathBuf>,
    /// The pools, in file order.
    pub pools: Vec<PoolConfig>,
}

/// `admin:` section.
#[derive(Debug, Clone, PartialEq)]
pub struct AdminConfig {
    /// Address the admin endpoint binds.
    pub listen: SocketAddr,
    /// Clients allowed to use it (default: loopback only).
    pub allow: Vec<IpNet>,
    /// Names (lower case) and addresses it answers to in `Host`, besides
    /// its own address, `localhost` and loopback addresses.
    pub hosts: Vec<String>,
}

/// `log:` section.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// tracing `EnvFilter` directive (`RUST_LOG` overrides it).
    pub level: String,
    /// Line format.
    pub format: LogFormat,
    /// Daily-rotated log file; stdout when `None`.
    pub file: Option<PathBuf>,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One flat JSON object per line.
    Json,
    /// Human-readable `key=value` lines.
    Text,
}

/// One pool: its listeners, its settings (defaults merged in) and its backends.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    /// `[a-z0-9_-]+`, unique.
    pub name: String,
    /// One or more listen addresses.
    pub listen: Vec<SocketAddr>,
    /// Client allow-list; empty means every client is allowed.
    pub allow: Vec<IpNet>,
    /// Which senders must begin with a PROXY protocol header; `None`: no
    /// header is ever read.
    pub proxy_protocol: Option<ProxyProtocol>,
    /// The address backend connections are made from.
    pub source: BackendSource,
    /// Budget for one backend TCP connect (name resolution included).
    pub connect_timeout: Duration,
    /// TCP keepalive and `TCP_USER_TIMEOUT` settings for both legs.
    pub keepalive: KeepaliveConfig,
    /// Close a splice with no byte either way for this long; `None` = never.
    pub idle_timeout: Option<Duration>,
    /// Live client connections allowed in this pool.
    pub max_connections: usize,
    /// Live client connections allowed from one client address (IPv4 /32,
    /// IPv6 /64); `None` = no limit (`0` in the file).
    pub max_connections_per_source: Option<usize>,
    /// Rebalance tick settings.
    pub rebalance: RebalanceConfig,
    /// Quarantine window settings.
    pub quarantine: QuarantineConfig,
    /// Health probe settings.
    pub health: HealthConfig,
    /// Static backends in config order (order breaks selection ties).
    pub backends: Vec<BackendConfig>,
    /// `discover:` entries of the `backends` list, in config order: their
    /// members follow the static backends.
    pub discover: Vec<DiscoverConfig>,
    /// How discover entries are looked up.
    pub discovery: DiscoveryConfig,
}

/// `keepalive:` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepaliveConfig {
    /// Idle time before the first keepalive probe.
    pub idle: Duration,
    /// Time between keepalive probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub count: u32,
}

impl KeepaliveConfig {
    /// `TCP_USER_TIMEOUT` matching the keepalive budget, so unacknowledged
    /// data gives up on the same schedule as an unanswered keepalive.
    pub fn user_timeout(&self) -> Duration {
        self.idle + self.interval * self.count
    }
}

/// `rebalance:` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebalanceConfig {
    /// Tick period; `None` disables rebalancing (`0s` in the file).
    pub interval: Option<Duration>,
    /// Minimum connection gap between the busiest and an emptier backend.
    pub min_imbalance: usize,
}

/// `quarantine:` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuarantineConfig {
    /// First window.
    pub base: Duration,
    /// Cap for the doubling windows.
    pub max: Duration,
    /// Consecutive connect failures that quarantine a backend.
    pub failures: u32,
    /// Client addresses remembered as refused by a backend (steered to
    /// the others for `base`); the oldest are forgotten first.
    pub refused_clients: usize,
}

/// `health:` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthConfig {
    /// Probe kind.
    pub probe: ProbeKind,
    /// Probe period.
    pub interval: Duration,
    /// Budget for one probe.
    pub timeout: Duration,
    /// Blocks a backend may trail the best usable backend.
    pub max_lag_blocks: u64,
    /// The chain whose proof-of-work rules prove heights;
    /// [`Network::Custom`] when only `magic` was given.
    pub network: Network,
    /// Message-start bytes in wire order.
    pub magic: [u8; 4],
    /// Consecutive bad verdicts before a backend is acted on.
    pub fall: u32,
    /// Consecutive passed probes before a quarantined backend returns.
    pub rise: u32,
    /// Close an unhealthy backend's connections (never the last usable leg).
    pub drain: bool,
    /// A drain closes its connections one by one, oldest first, spread
    /// evenly over this window (zero: all at once). A `down` backend is
    /// always drained at once.
    pub drain_spread: Duration,
    /// A backend whose clients' connections received nothing from it this
    /// long, while another usable backend's did, is `stalled`; `None` = off.
    pub stall_timeout: Option<Duration>,
    /// Which silence counts toward `stall_timeout`.
    pub stall_rule: StallRule,
    /// Service bits a `bitcoin-p2p` backend must announce to be given
    /// clients; none by default.
    pub require_services: Services,
    /// Lowest protocol version a `bitcoin-p2p` backend may announce;
    /// `None`: any.
    pub min_protocol_version: Option<u32>,
}

/// `health.stall_rule`: which silence of a connection counts as stalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StallRule {
    /// Any silence: for nodes and subscription services that send on
    /// their own (P2P pings every 2 minutes).
    Push,
    /// Only while the connection owes an answer (its client sent bytes
    /// after the backend's last byte): quiet clients of a
    /// request/response service never stall their backend.
    Request,
}

impl StallRule {
    /// The name used in config.yaml.
    pub fn as_str(self) -> &'static str {
        match self {
            StallRule::Push => "push",
            StallRule::Request => "request",
        }
    }
}

/// How a backend is probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// TCP connect and close.
    Connect,
    /// Bitcoin-family P2P `version` handshake, reads the node's height.
    BitcoinP2p,
    /// Blockbook REST `GET /api/`, reads `inSync` and `bestHeight`.
    Blockbook,
    /// Any 2xx answer is healthy.
    Http,
    /// Electrum server over TCP: `server.version`, then
    /// `blockchain.headers.subscribe` reads the height and the tip header.
    Electrum,
    /// As [`ProbeKind::Electrum`] over TLS; any certificate is accepted.
    ElectrumTls,
}

impl ProbeKind {
    /// The name used in config.yaml.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Connect => "connect",
            ProbeKind::BitcoinP2p => "bitcoin-p2p",
            ProbeKind::Blockbook => "blockbook",
            ProbeKind::Http => "http",
            ProbeKind::Electrum => "electrum",
            ProbeKind::ElectrumTls => "electrum-tls",
        }
    }

    /// True for the probes that read a node's height (lag is judged).
    pub fn reads_height(self) -> bool {
        match self {
            ProbeKind::BitcoinP2p
            | ProbeKind::Blockbook
            | ProbeKind::Electrum
            | ProbeKind::ElectrumTls => true,
            ProbeKind::Connect | ProbeKind::Http => false,
        }
    }

    /// True for the probes whose heights are checked against `network`'s
    /// proof-of-work rules.
    pub fn uses_network(self) -> bool {
        matches!(
            self,
            ProbeKind::BitcoinP2p | ProbeKind::Electrum | ProbeKind::ElectrumTls
        )
    }
}

/// The chain a `bitcoin-p2p` or `electrum*` probe checks (`health.network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Network {
    /// Litecoin mainnet.
    Litecoin,
    /// Litecoin testnet4.
    LitecoinTestnet,
    /// Litecoin regtest.
    LitecoinRegtest,
    /// Bitcoin mainnet.
    Bitcoin,
    /// Bitcoin testnet3.
    BitcoinTestnet,
    /// Bitcoin regtest.
    BitcoinRegtest,
    /// Only a `magic` was given: no known chain, so no rules to prove a
    /// height by. Not a value config.yaml can name.
    #[serde(skip_deserializing)]
    Custom,
}

impl Network {
    /// Every network config.yaml can name.
    pub const NAMED: [Network; 6] = [
        Network::Litecoin,
        Network::LitecoinTestnet,
        Network::LitecoinRegtest,
        Network::Bitcoin,
        Network::BitcoinTestnet,
        Network::BitcoinRegtest,
    ];

    /// Its name in config.yaml, logs and details (`custom` for a magic only).
    pub fn name(self) -> &'static str {
        match self {
            Network::Litecoin => "litecoin",
            Network::LitecoinTestnet => "litecoin-testnet",
            Network::LitecoinRegtest => "litecoin-regtest",
            Network::Bitcoin => "bitcoin",
            Network::BitcoinTestnet => "bitcoin-testnet",
            Network::BitcoinRegtest => "bitcoin-regtest",
            Network::Custom => "custom",
        }
    }

    /// Its P2P message-start bytes in wire order; none for `Custom` (the
    /// config's `magic` is the only one).
    pub fn magic(self) -> Option<[u8; 4]> {
        Some(match self {
            Network::Litecoin => [0xfb, 0xc0, 0xb6, 0xdb],
            Network::LitecoinTestnet => [0xfd, 0xd2, 0xc8, 0xf1],
            Network::LitecoinRegtest => [0xfa, 0xbf, 0xb5, 0xda],
            Network::Bitcoin => [0xf9, 0xbe, 0xb4, 0xd9],
            Network::BitcoinTestnet => [0x0b, 0x11, 0x09, 0x07],
            Network::BitcoinRegtest => [0xfa, 0xbf, 0xb5, 0xda],
            Network::Custom => return None,
        })
    }

    /// The names a Blockbook of this chain gives as `blockbook.coin` in
    /// its `/api/` status: its coin definition's `coin.name` (trezor/blockbook
    /// `configs/coins/*.json`). Blockbook ships no Litecoin regtest
    /// definition; `Litecoin Regtest` is the name one would take. None for
    /// `Custom`: no chain to check.
    pub fn blockbook_coins(self) -> &'static [&'static str] {
        match self {
            Network::Litecoin => &["Litecoin"],
            Network::LitecoinTestnet => &["Litecoin Testnet"],
            // Blockbook ships no Litecoin regtest coin: one run on regtest
            // carries a copy of the mainnet coin file, or a renamed one.
            Network::LitecoinRegtest => &["Litecoin Regtest", "Litecoin"],
            Network::Bitcoin => &["Bitcoin"],
            Network::BitcoinTestnet => &["Testnet"],
            Network::BitcoinRegtest => &["Regtest"],
            Network::Custom => &[],
        }
    }

    /// A test chain (testnet or regtest).
    pub fn is_test(self) -> bool {
        matches!(
            self,
            Network::LitecoinTestnet
                | Network::LitecoinRegtest
                | Network::BitcoinTestnet
                | Network::BitcoinRegtest
        )
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl HealthConfig {
    /// True when the probe can prove a height with the network's headers
    /// (`bitcoin-p2p`, `electrum*` on a named network): proof then
    /// outranks corroboration.
    pub fn proves_heights(&self) -> bool {
        self.probe.uses_network() && self.network != Network::Custom
    }
}

/// One backend node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendConfig {
    /// Unique within the pool; defaults to `addr`.
    pub name: String,
    /// `host:port`; host names are resolved again at each connect.
    pub addr: String,
    /// Only a candidate while no primary is usable.
    pub backup: bool,
    /// The backend's REST twin for `blockbook`/`http` probes.
    pub probe_url: Option<SecretUrl>,
    /// The discover entry it was found by; `None` for a static backend.
    pub discovered_from: Option<String>,
}

/// A URL that may carry secrets (userinfo, query); `Display` and `Debug`
/// print it with those parts masked.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(pub url::Url);

impl BackendConfig {
    /// True when `self` and `other` are the same backend across a reload:
    /// same name, same address. Only then do its state and connections
    /// carry over.
    pub fn same_backend(&self, other: &BackendConfig) -> bool {
        self.name == other.name && self.addr == other.addr
    }
}

impl SecretUrl {
    /// The full URL, secrets included: only for making the request.
    pub fn expose(&self) -> &url::Url {
        &self.0
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.clone();
        if !shown.username().is_empty() || shown.password().is_some() {
            // Setting these fails only for URLs that cannot carry userinfo.
            let _ = shown.set_username("***");
            let _ = shown.set_password(None);
        }
        if shown.query().is_some() {
            shown.set_query(Some("***"));
        }
        shown.set_fragment(None);
        write!(f, "{shown}")
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretUrl({self})")
    }
}

/// The largest config file read: far above any real one, and it keeps a
/// stray huge file from costing hundreds of MiB to parse.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// The file's text, refusing one over [`MAX_FILE_BYTES`] without reading
/// more than that.
fn read_capped(path: &Path) -> Result<String, ConfigError> {
    let bytes = files::read_bounded(path, MAX_FILE_BYTES)
        .map_err(|e| ConfigError::io(path, &e))?
        .ok_or_else(|| ConfigError::too_large(path, MAX_FILE_BYTES))?;
    String::from_utf8(bytes).map_err(|e| {
        let err = std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error());
        ConfigError::io(path, &err)
    })
}

impl Config {
    /// Read and validate a config file, including the rules that need the
    /// host: no backend may be one of the instance's own listen addresses
    /// (backend names on a listen port are resolved for that), and
    /// `log.file` and `state_file` must be writable.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the file, the YAML path and, where known, the
    /// line and column.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read_capped(path)?;
        let config = Config::parse(&text, path)?;
        parse::check_host(&config, &text, path)?;
        Ok(config)
    }

    /// Read and parse a config file without the host rules: for commands
    /// that only need a value from it (`admin.listen`).
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn load_unchecked(path: &Path) -> Result<Config, ConfigError> {
        Config::parse(&read_capped(path)?, path)
    }

    /// Parse and validate config text; `path` is only used in messages.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        parse::parse(text, path)
    }
}
