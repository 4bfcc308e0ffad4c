//! Turns SIGTERM, SIGINT and SIGUSR2 into a cancellation token: the start of a drain.

use futures_util::StreamExt;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR2};
use signal_hook_tokio::Signals;
use tokio_util::sync::CancellationToken;

/// A token cancelled on the first SIGTERM, SIGINT or SIGUSR2. A second signal does not kill the process:
/// the drain is bounded by `shutdown.grace_ms`, and systemd's `TimeoutStopSec` is the backstop.
pub fn shutdown_token() -> std::io::Result<CancellationToken> {
    let token = CancellationToken::new();
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGUSR2])?;
    let cancel = token.clone();
    tokio::spawn(async move {
        while let Some(sig) = signals.next().await {
            let name = match sig {
                SIGTERM => "SIGTERM",
                SIGINT => "SIGINT",
                _ => "SIGUSR2",
            };
            if cancel.is_cancelled() {
                tracing::info!(signal = name, "already draining");
            } else {
                tracing::info!(signal = name, "draining: finishing in-flight work, then exiting");
                // Before the drain begins: a process with nothing in flight may exit right after.
                crate::systemd::stopping();
                cancel.cancel();
            }
        }
    });
    Ok(token)
}

/// Calls `reload` on every SIGHUP until `shutdown`: each binary's [`crate::reload::Reload`] reads the
/// configuration again. (Installed, the handler also keeps SIGHUP from ending the process, its default.)
pub fn on_hangup(shutdown: CancellationToken, mut reload: impl FnMut() + Send + 'static) -> std::io::Result<()> {
    let mut signals = Signals::new([signal_hook::consts::SIGHUP])?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                s = signals.next() => match s {
                    Some(_) => reload(),
                    None => return,
                },
                _ = shutdown.cancelled() => return,
            }
        }
    });
    Ok(())
}
