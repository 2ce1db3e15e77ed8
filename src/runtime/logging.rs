//! Tracing setup: one event per line, JSON (flat objects) or text
//! (`key=value`, [`Logfmt`]), to stdout or a daily-rotated file ([`DailyFile`]), through a non-blocking
//! writer that is flushed when the returned guard drops.

use std::io;

use anyhow::Context;
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

use super::log_lists::ArraysInJson;
use super::log_text::Logfmt;
use super::logfile::DailyFile;
use crate::config::{LogConfig, LogFormat};

/// Keeps the log writer alive; dropping it flushes every pending line.
#[must_use = "dropping the guard stops logging"]
pub struct LogGuard(#[allow(dead_code)] WorkerGuard);

/// `log.file` could not be made or opened: as much a setting `run` cannot
/// work with as an invalid config (`main` exits 2, which the unit does not
/// restart).
#[derive(Debug, thiserror::Error)]
#[error("{step} {}: {source}", path.display())]
pub struct LogFileError {
    step: &'static str,
    path: std::path::PathBuf,
    source: io::Error,
}

/// Install the global subscriber for `config`. `RUST_LOG`, when set, replaces
/// `log.level`.
///
/// # Errors
/// A bad filter, a [`LogFileError`], or a subscriber already set.
pub fn init(config: &LogConfig) -> anyhow::Result<LogGuard> {
    let level = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| config.level.clone());
    let filter = EnvFilter::try_new(&level).with_context(|| format!("log level {level:?}"))?;
    // Lossless: under pressure the writer blocks rather than drop events.
    let builder = NonBlockingBuilder::default().lossy(false);
    let (writer, guard) = match &config.file {
        Some(path) => {
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            if path.file_name().is_none() {
                anyhow::bail!("log file {} has no file name", path.display());
            }
            let failed = |step, path: &std::path::Path| {
                let path = path.to_owned();
                move |source| LogFileError { step, path, source }
            };
            std::fs::create_dir_all(dir).map_err(failed("create log directory", dir))?;
            let file = DailyFile::open(path).map_err(failed("open log file", path))?;
            builder.finish(file)
        }
        None => builder.finish(io::stdout()),
    };
    let base = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_target(false);
    let installed = match config.format {
        LogFormat::Json => base
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .map_event_format(ArraysInJson)
            .try_init(),
        LogFormat::Text => base.with_ansi(false).fmt_fields(Logfmt).try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("install log subscriber: {e}"))?;
    Ok(LogGuard(guard))
}
