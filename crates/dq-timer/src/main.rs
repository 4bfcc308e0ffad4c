//! dq-timer: parses arguments and hands over to [`dq_timer::run`].

use std::path::PathBuf;

use clap::Parser;

/// mimalloc, as in dq-server, where glibc malloc showed as ~15% of the CPU under load.
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
    let (settings, shutdown, _logs) = dq_core::process::start(args.config.as_deref())?;
    dq_timer::run(settings, shutdown).await
}
