//! The `pin-proxy` command line: parse, load config, set up logs and
//! signals, run.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use pin_proxy::config::{self, Config};

/// A TCP pinning connection balancer for long-lived P2P clients.
///
/// Each client connection is spliced, as raw bytes and for its whole life, to
/// one backend node chosen least-used-first.
#[derive(Debug, Parser)]
#[command(name = "pin-proxy", version, propagate_version = true)]
struct Cli {
    /// Config file.
    #[arg(
        short,
        long,
        global = true,
        env = "PIN_PROXY_CONFIG",
        default_value = "config.yaml"
    )]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the balancer (the default command).
    Run,
    /// Parse and validate the config, print the effective pools, bind nothing.
    /// Exits 0 when valid, 2 when not.
    Check,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(&cli.config) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    match cli.command.unwrap_or(Command::Run) {
        Command::Check => {
            print!("{}", config::describe(&config));
            ExitCode::SUCCESS
        }
        Command::Run => match run(config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("error: {err:#}");
                ExitCode::FAILURE
            }
        },
    }
}

fn run(config: Config) -> anyhow::Result<()> {
    let _log = pin_proxy::logging::init(&config.log)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        let shutdown = shutdown_signal()?;
        let server = pin_proxy::Server::bind(config)?;
        server.run(shutdown).await;
        anyhow::Ok(())
    });
    if let Err(err) = &result {
        tracing::error!(err = format!("{err:#}"), "fatal");
    }
    result
}

/// Resolves on the first SIGTERM or SIGINT.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
