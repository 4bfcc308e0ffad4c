//! What every dq binary does before its work: load the settings, start logging, and turn the drain
//! signals into a cancellation token, so each `main.rs` stays a few lines over its library's `run`.

use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::config::{ConfigError, Settings};
use crate::telemetry::LogGuard;

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
}

/// Loads the settings (the file at `config`, then `DQ__*`), starts logging, and returns the settings,
/// the token cancelled by SIGTERM, SIGINT or SIGUSR2, and the log writer's guard (hold it until `main`
/// returns, so the last lines are written). Call it inside the tokio runtime.
pub fn start(config: Option<&Path>) -> Result<(Settings, CancellationToken, Option<LogGuard>), StartError> {
    let settings = Settings::load(config)?;
    let logs = crate::telemetry::init_logging(&settings.log);
    let shutdown = crate::signals::shutdown_token()?;
    Ok((settings, shutdown, logs))
}
