//! systemd integration for `Type=notify` units: `READY=1` once a process really serves, `STOPPING=1`
//! when it starts draining, and watchdog pings. Outside systemd (no `NOTIFY_SOCKET`) all of it is a no-op.

use sd_notify::NotifyState;
use tokio_util::sync::CancellationToken;

/// Tells systemd the process is ready, and starts the watchdog pings when the unit has `WatchdogSec`.
/// Call it when the process serves for real: listening, connected, its work loops running.
pub fn ready(shutdown: &CancellationToken) {
    if let Err(e) = sd_notify::notify(&[NotifyState::Ready]) {
        tracing::warn!(cause = %e, "cannot notify systemd");
    }
    if let Some(period) = sd_notify::watchdog_enabled() {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            // Twice per period, as systemd recommends, so one late tick does not kill the process.
            let mut tick = tokio::time::interval(period / 2);
            loop {
                tokio::select! {
                    _ = tick.tick() => { let _ = sd_notify::notify(&[NotifyState::Watchdog]); }
                    // `STOPPING=1` went out from the signal handler ([`stopping`]). Keep pinging through
                    // the drain: it may take up to shutdown.grace_ms.
                    _ = shutdown.cancelled() => loop {
                        tick.tick().await;
                        let _ = sd_notify::notify(&[NotifyState::Watchdog]);
                    },
                }
            }
        });
    }
}

/// Tells systemd the process is stopping. Sent by the signal handler as the drain begins, not by a task
/// that waits for the drain: a process with nothing in flight exits at once, before such a task runs.
pub fn stopping() {
    let _ = sd_notify::notify(&[NotifyState::Stopping]);
}
