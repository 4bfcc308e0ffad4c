//! dq-timer: parses arguments and hands over to [`dq_timer::run`].

use std::path::PathBuf;

use clap::Parser;

/// mimalloc: glibc malloc showed as ~15% of dq-server's CPU under load (dq-server now uses jemalloc, for its
/// memory per idle connection; the timer holds no connections).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Promotes due jobs to their ready queues and returns expired reservations. Run as many as you like:
/// they share the delay buckets and take over from one another.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// TOML config file; every key can also be set as DQ__SECTION__KEY.
    #[arg(long, env = "DQ_CONFIG")]
    config: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (settings, shutdown, _flush) = dq_core::process::start(env!("CARGO_BIN_NAME"), args.config.as_deref())?;
    dq_timer::run(settings, shutdown).await
}
