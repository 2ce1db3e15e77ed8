//! The `pin-proxy` command line: parse (the commands are declared in
//! `cli.rs`), load config, set up logs and signals, run.

#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod cli;
mod man;

use std::path::PathBuf;
use std::process::ExitCode;

use std::time::Duration;

use clap::{CommandFactory, FromArgMatches};
use pin_proxy::BindError;
use pin_proxy::Control;
use pin_proxy::SourceError;
use pin_proxy::admin_cli;
use pin_proxy::config::{self, Config};
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::{AdminArg, Cli, Command, CompletionShell, ConfigArg};

/// mimalloc instead of glibc's malloc: tokio aligns every task and socket
/// registration to 128 bytes, which glibc serves by over-allocating and
/// leaving fragments behind; mimalloc's size classes are aligned already.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Huge pages off: mimalloc's arenas would grow RSS in 2 MiB steps, and
    // small, predictable RSS is worth more here than fewer TLB misses.
    // Best effort: an old kernel without the flag just keeps its default.
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    let matches = match Cli::command().try_get_matches() {
        Ok(matches) => matches,
        Err(err) => return usage_error(&err),
    };
    let given = matches.value_source("config") == Some(clap::parser::ValueSource::CommandLine);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    let command = cli.command.unwrap_or(Command::Run {
        config: ConfigArg::default(),
    });
    let top = cli.config.or_else(cli::config_from_env);
    if let Some(name) = command.reads_no_config()
        && given
    {
        eprintln!("error: `pin-proxy {name}` reads no config file; drop -c/--config");
        return ExitCode::from(2);
    }
    let call_admin = |admin: AdminArg, call: Call| -> ExitCode {
        let addr = admin.resolve(top.clone());
        let sent = block_on(call.send(&addr));
        match sent {
            Ok(out) => {
                print!("{out}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: {err:#}");
                ExitCode::FAILURE
            }
        }
    };
    match command {
        Command::Status { admin, json, watch } => call_admin(admin, Call::Status { json, watch }),
        Command::Quarantine {
            pool,
            backend,
            window,
            admin,
        } => call_admin(
            admin,
            Call::Quarantine {
                pool,
                backend,
                window,
            },
        ),
        Command::Release {
            pool,
            backend,
            admin,
        } => call_admin(admin, Call::Release { pool, backend }),
        Command::Connections {
            pool,
            backend,
            client,
            limit,
            json,
            admin,
        } => {
            let wanted = admin_cli::Wanted {
                pool,
                backend,
                client,
                limit,
            };
            call_admin(admin, Call::Connections { wanted, json })
        }
        Command::Close { conns, admin } => call_admin(admin, Call::Close { conns }),
        Command::Shed {
            pool,
            backend,
            count,
            admin,
        } => call_admin(
            admin,
            Call::Shed {
                pool,
                backend,
                count,
            },
        ),
        Command::Reload { admin } => call_admin(admin, Call::Reload),
        Command::Upgrade { admin } => call_admin(admin, Call::Upgrade),
        #[cfg(feature = "sim")]
        Command::Demo => exit(demo()),
        Command::Completions { shell } => exit(print_completions(shell)),
        Command::Man => exit(print_man()),
        Command::Check { config } => load_and(config.or(top), true),
        Command::Run { config } => load_and(config.or(top), false),
    }
}

/// `check` (print the effective config) or `run`, on the config at `path`.
fn load_and(path: PathBuf, check: bool) -> ExitCode {
    let config = match Config::load(&path) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    if check {
        print!("{}", config::describe(&config));
        for warning in config::warnings(&config) {
            eprintln!("warning: {warning}");
        }
        return ExitCode::SUCCESS;
    }
    let result = run(config, path);
    if let Err(err) = &result
        && (err
            .chain()
            .filter_map(|e| e.downcast_ref::<BindError>())
            .any(BindError::is_lasting)
            || err
                .chain()
                .filter_map(|e| e.downcast_ref::<SourceError>())
                .any(SourceError::is_lasting))
    {
        eprintln!("error: {err:#}");
        return ExitCode::from(EXIT_BIND);
    }
    // A log file that cannot be opened is a setting to fix, like an
    // invalid config: the unit does not restart on 2.
    if let Err(err) = &result
        && err.is::<pin_proxy::logging::LogFileError>()
    {
        eprintln!("error: {err:#}");
        return ExitCode::from(2);
    }
    exit(result)
}

/// Exit status when a listen address is taken or needs a privilege: the
/// unit's `RestartPreventExitStatus=` keeps systemd from retrying forever.
const EXIT_BIND: u8 = 3;

/// Print clap's message for `err` and exit: 0 for `--help` and
/// `--version`; 1 for a usage error of a command that talks to a running
/// instance (`status`, `quarantine`, `release`, `reload`, `upgrade`,
/// `connections`, `close`, `shed` exit 0 or 1);
/// clap's 2 otherwise.
fn usage_error(err: &clap::Error) -> ExitCode {
    let _ = err.print();
    if !err.use_stderr() {
        return ExitCode::SUCCESS;
    }
    let admin = std::env::args().skip(1).any(|a| {
        matches!(
            a.as_str(),
            "status"
                | "quarantine"
                | "release"
                | "reload"
                | "upgrade"
                | "connections"
                | "close"
                | "shed"
        )
    });
    if admin {
        ExitCode::FAILURE
    } else {
        ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2))
    }
}

fn exit(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Renders into memory first: the generator panics on a write error, and
/// `pin-proxy completions bash | head` closes the pipe early.
fn print_completions(shell: CompletionShell) -> anyhow::Result<()> {
    let mut script = Vec::new();
    let mut cli = Cli::command();
    clap_complete::generate(shell.generator(), &mut cli, "pin-proxy", &mut script);
    if matches!(shell, CompletionShell::Bash) {
        // clap_complete 4.6 spells the bash state of a subcommand of a
        // hyphenated binary two ways: the loop sets `pin__proxy__subcmd__X`,
        // the case arms test `pin__subcmd__proxy__subcmd__X`, so nothing
        // after a subcommand completed (clap-rs/clap#6421). Spell the arms
        // as the loop does.
        let text = String::from_utf8(script)?.replace("pin__subcmd__proxy", "pin__proxy");
        return write_stdout(text.as_bytes());
    }
    write_stdout(&script)
}

fn print_man() -> anyhow::Result<()> {
    write_stdout(&man::page(Cli::command())?)
}

/// A reader that stopped early (`| head`) is not an error.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::anyhow!("write to stdout: {e}"))
        }
        _ => Ok(()),
    }
}

/// One admin request from the command line.
enum Call {
    Status {
        json: bool,
        watch: bool,
    },
    Quarantine {
        pool: String,
        backend: String,
        window: Duration,
    },
    Release {
        pool: String,
        backend: String,
    },
    Reload,
    Upgrade,
    Connections {
        wanted: admin_cli::Wanted,
        json: bool,
    },
    Close {
        conns: Vec<u64>,
    },
    Shed {
        pool: String,
        backend: String,
        count: usize,
    },
}

impl Call {
    async fn send(self, admin: &admin_cli::Instance) -> anyhow::Result<String> {
        match self {
            Call::Status { json, watch: true } => {
                use std::io::IsTerminal;
                let terminal = std::io::stdout().is_terminal();
                admin_cli::watch(admin, json, &mut std::io::stdout(), terminal).await?;
                Ok(String::new())
            }
            Call::Status { json, watch: false } => admin_cli::status(admin, json).await,
            Call::Quarantine {
                pool,
                backend,
                window,
            } => admin_cli::quarantine(admin, &pool, &backend, window).await,
            Call::Release { pool, backend } => admin_cli::release(admin, &pool, &backend).await,
            Call::Reload => admin_cli::reload(admin).await,
            Call::Upgrade => admin_cli::upgrade(admin).await,
            Call::Connections { wanted, json } => {
                admin_cli::connections(admin, &wanted, json).await
            }
            Call::Close { conns } => admin_cli::close(admin, &conns).await,
            Call::Shed {
                pool,
                backend,
                count,
            } => admin_cli::shed(admin, &pool, &backend, count).await,
        }
    }
}

fn block_on<T>(fut: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(fut)
}

#[cfg(feature = "sim")]
fn demo() -> anyhow::Result<()> {
    use pin_proxy::config::{LogConfig, LogFormat};
    let log = LogConfig {
        level: "info".to_owned(),
        format: LogFormat::Text,
        file: None,
    };
    let _log = pin_proxy::logging::init(&log)?;
    runtime()?.block_on(pin_proxy::sim::demo::run())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn run(config: Config, path: PathBuf) -> anyhow::Result<()> {
    let _log = pin_proxy::logging::init(&config.log)?;
    let files = pin_proxy::limits::raise_nofile();
    tracing::info!(
        before = files.before,
        limit = files.now,
        hard = files.hard,
        "fd_limit"
    );
    let result = runtime()?.block_on(async {
        let shutdown = shutdown_signal()?;
        match pin_proxy::Takeover::from_env().await? {
            None => {
                let server = pin_proxy::Server::bind_file(config, Some(path))?;
                on_signals(server.control())?;
                server.run(shutdown).await;
            }
            Some(takeover) => {
                let (server, takeover) = takeover.into_server(config, path).await?;
                on_signals(server.control())?;
                server.run_taken_over(shutdown, takeover).await;
            }
        }
        anyhow::Ok(())
    });
    if let Err(err) = &result {
        tracing::error!(err = format!("{err:#}"), "fatal");
    }
    result
}

/// Resolves on the first SIGTERM or SIGINT.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// Each SIGHUP re-reads the config file; each SIGUSR2 starts a live
/// upgrade. The outcomes are logged by the server.
fn on_signals(control: Control) -> anyhow::Result<()> {
    let mut hup = signal(SignalKind::hangup())?;
    let reloads = control.clone();
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            // `reloaded` / `reload_failed` are logged where the reload runs.
            let _ = reloads.reload().await;
        }
    });
    let mut usr2 = signal(SignalKind::user_defined2())?;
    tokio::spawn(async move {
        while usr2.recv().await.is_some() {
            let control = control.clone();
            // Not awaited here: a second signal while one runs is refused
            // (and logged) at once. `upgraded` / `upgrade_failed` are
            // logged where the upgrade runs.
            tokio::spawn(async move {
                if let Err(pin_proxy::UpgradeError::Busy) = control.upgrade().await {
                    tracing::warn!(reason = "an upgrade is already running", "upgrade_failed");
                }
            });
        }
    });
    Ok(())
}
