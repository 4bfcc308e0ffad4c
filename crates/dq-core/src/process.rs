//! What every dq binary does before its work: load the settings, start logging and span export, and
//! turn the drain signals into a cancellation token, so each `main.rs` stays a few lines over its
//! library's `run`.

use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::config::{ConfigError, Settings};
use crate::telemetry::LogGuard;
use crate::telemetry::otlp::{ExportError, SpanExport};

/// Why a binary could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The configuration is unusable; the message names the key.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(#[from] std::io::Error),
    /// Span export (`telemetry.otlp_endpoint`) could not be set up.
    #[error(transparent)]
    Spans(#[from] ExportError),
}

/// What a binary holds until `main` returns: dropped then, after the drain, it exports the spans still
/// queued and writes the last log lines (in that order, so a failed export is logged).
pub struct Flush {
    /// The span export, when `telemetry.otlp_endpoint` is set.
    _spans: Option<SpanExport>,
    /// The log writer's thread.
    _logs: Option<LogGuard>,
}

/// Loads the settings (the file at `config`, then `DQ__*`), starts logging and span export (as
/// `service`, the binary's name), and returns the settings, the token cancelled by SIGTERM, SIGINT or
/// SIGUSR2, and what flushes the logs and spans (hold it until `main` returns). Call it inside the
/// tokio runtime.
pub fn start(service: &'static str, config: Option<&Path>) -> Result<(Settings, CancellationToken, Flush), StartError> {
    let settings = Settings::load(config)?;
    let logs = crate::telemetry::init_logging(&settings.log);
    let spans = crate::telemetry::otlp::install(service, &settings.telemetry)?;
    let shutdown = crate::signals::shutdown_token()?;
    Ok((
        settings,
        shutdown,
        Flush {
            _spans: spans,
            _logs: logs,
        },
    ))
}
