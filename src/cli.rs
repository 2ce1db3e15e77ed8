//! The command line as clap reads it: every command, its arguments and
//! their help, from which `pin-proxy man` and `completions` render too.
//! What each command does is in `main.rs`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use pin_proxy::admin_cli;

/// A TCP pinning connection balancer for long-lived P2P clients.
///
/// Each client connection is spliced, as raw bytes and for its whole life, to
/// one backend node chosen least-used-first.
#[derive(Debug, Parser)]
#[command(name = "pin-proxy", version, propagate_version = true)]
pub(crate) struct Cli {
    /// Config file [default: config.yaml, env PIN_PROXY_CONFIG].
    #[arg(short, long)]
    pub(crate) config: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

/// The config file of a command that reads one; also accepted before the
/// command (`pin-proxy -c FILE run`). The demo, `completions` and `man`
/// read none, so they do not take it.
#[derive(Debug, Default, clap::Args)]
pub(crate) struct ConfigArg {
    /// Config file [default: config.yaml, env PIN_PROXY_CONFIG].
    #[arg(short, long)]
    config: Option<PathBuf>,
}

/// Where the config is when nobody says: `./config.yaml`.
const DEFAULT_CONFIG: &str = "config.yaml";

/// The config `PIN_PROXY_CONFIG` names; unset and empty are alike (a blank
/// `Environment=` line, an `export PIN_PROXY_CONFIG=`), so `./config.yaml`.
pub(crate) fn config_from_env() -> Option<PathBuf> {
    std::env::var_os("PIN_PROXY_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the balancer (the default command).
    Run {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Parse and validate the config, print the effective pools, bind nothing.
    /// Exits 0 when valid, 2 when not.
    Check {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Show a running instance's pools and backends (reads `/status`).
    Status {
        #[command(flatten)]
        admin: AdminArg,
        /// Print the raw JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Fetch and print again every second until Ctrl-C.
        #[arg(long)]
        watch: bool,
    },
    /// Put a backend into maintenance: no new clients, its connections
    /// drained, for exactly this long.
    Quarantine {
        /// Pool name.
        pool: String,
        /// Backend name.
        backend: String,
        /// How long, e.g. `10m`.
        #[arg(long = "for", value_parser = humantime::parse_duration)]
        window: Duration,
        #[command(flatten)]
        admin: AdminArg,
    },
    /// End a backend's quarantine now (it returns once its probes pass).
    Release {
        /// Pool name.
        pool: String,
        /// Backend name.
        backend: String,
        #[command(flatten)]
        admin: AdminArg,
    },
    /// List a running instance's client connections, newest first (reads
    /// `/connections`): who is pinned to which node, since when, how much
    /// traffic, how long idle.
    Connections {
        /// Only this pool's.
        #[arg(long)]
        pool: Option<String>,
        /// Only those on backends of this name.
        #[arg(long)]
        backend: Option<String>,
        /// Only clients in this network (`10.0.0.0/8`) or at this address.
        #[arg(long, value_name = "CIDR")]
        client: Option<String>,
        /// How many, the newest [default: 100, at most 10000].
        #[arg(long)]
        limit: Option<usize>,
        /// Print the raw JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminArg,
    },
    /// Close client connections by id (`conn` in the logs and in
    /// `connections`). Exits 1 when any is unknown (the others are closed).
    Close {
        /// Connection ids.
        #[arg(required = true, value_name = "CONN")]
        conns: Vec<u64>,
        #[command(flatten)]
        admin: AdminArg,
    },
    /// Close a backend's N newest connections, spread over
    /// `health.drain_spread` (their clients redial).
    Shed {
        /// Pool name.
        pool: String,
        /// Backend name.
        backend: String,
        /// How many.
        #[arg(value_name = "N")]
        count: usize,
        #[command(flatten)]
        admin: AdminArg,
    },
    /// Re-read the config file of a running instance and apply it (as
    /// SIGHUP does). Exits 0 when applied, 1 when refused (the instance
    /// then runs on its old config) or unreachable.
    Reload {
        #[command(flatten)]
        admin: AdminArg,
    },
    /// Live upgrade: start the binary this instance was started from, hand
    /// it every listener and connection, and exit once it serves. Exits 0
    /// when done, 1 when it failed (the instance then serves on unchanged).
    Upgrade {
        #[command(flatten)]
        admin: AdminArg,
    },
    /// Self-contained demo on loopback: simulated P2P nodes, clients, a
    /// scripted failure, recovery and lag. Ends by itself.
    #[cfg(feature = "sim")]
    Demo,
    /// Print a shell completion script to stdout.
    Completions {
        /// The shell to complete for.
        shell: CompletionShell,
    },
    /// Print the man page (roff) to stdout.
    Man,
}

/// The shells `completions` writes scripts for.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl CompletionShell {
    pub(crate) fn generator(self) -> clap_complete::Shell {
        match self {
            CompletionShell::Bash => clap_complete::Shell::Bash,
            CompletionShell::Zsh => clap_complete::Shell::Zsh,
            CompletionShell::Fish => clap_complete::Shell::Fish,
        }
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct AdminArg {
    /// Admin endpoint of the running instance [default: admin.listen of the
    /// config, else 127.0.0.1:9900].
    #[arg(long)]
    admin: Option<String>,
    #[command(flatten)]
    config: ConfigArg,
}

impl AdminArg {
    /// The endpoint to call. When a config named with `-c` (or the
    /// environment) gives no address, the default is tried after a warning
    /// on stderr: it may be another instance's.
    pub(crate) fn resolve(self, top: Option<PathBuf>) -> admin_cli::Instance {
        let named = self.config.config.is_some() || top.is_some();
        let path = self.config.or(top);
        let instance = admin_cli::Instance::resolve(self.admin, &path);
        match instance.defaulted().filter(|_| named) {
            Some(why) => {
                eprintln!("warning: no --admin given and {why}");
                instance.warned()
            }
            None => instance,
        }
    }
}

impl ConfigArg {
    /// This command's `-c`, else the one before the command, else the default.
    pub(crate) fn or(self, top: Option<PathBuf>) -> PathBuf {
        self.config
            .or(top)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG))
    }
}

impl Command {
    /// The name of a command that reads no config file.
    pub(crate) fn reads_no_config(&self) -> Option<&'static str> {
        match self {
            #[cfg(feature = "sim")]
            Command::Demo => Some("demo"),
            Command::Completions { .. } => Some("completions"),
            Command::Man => Some("man"),
            _ => None,
        }
    }
}
