//! `dq-checker migrate`: converts the layout of releases before partitions into the partitioned layout
//! of the configured Redis (see [`dq_core::checker::migrate`] for how, and why running it again is safe).

use anyhow::Context;
use dq_core::Settings;

pub use dq_core::checker::migrate::MigrateReport;

/// Converts every old shard in `from` into the configured installation.
pub async fn run(settings: &Settings, from: &[String]) -> anyhow::Result<MigrateReport> {
    dq_core::checker::migrate::run(settings, from)
        .await
        .context("the conversion stopped; running it again finishes it")
}
