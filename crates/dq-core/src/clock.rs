//! This machine's clock, the one helper every dq crate reads it through.
//!
//! Due times and every decision that orders jobs use Redis's clock (`TIME` inside the scripts), so that
//! machines whose clocks disagree still agree on when a job is due; this clock serves bounds checks,
//! logs and the dashboard's minutes only.

/// The current Unix time in ms on this machine, for bounds checks only (due times are Redis's): dq-api's,
/// the one every crate reads (dq-cli and dq-bench, which do not depend on dq-core, included).
pub use dq_api::unix_ms;
