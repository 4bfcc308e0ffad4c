//! This machine's clock, the one helper every dq crate reads it through.
//!
//! Due times and every decision that orders jobs use Redis's clock (`TIME` inside the scripts), so that
//! machines whose clocks disagree still agree on when a job is due; this clock serves bounds checks,
//! logs and the dashboard's minutes only.

use std::time::{SystemTime, UNIX_EPOCH};

/// The current Unix time in ms on this machine, for bounds checks only (due times are Redis's).
pub fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
