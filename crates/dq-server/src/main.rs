//! dq-server: the HTTP API. Parses arguments and hands over to [`dq_server::run`].

use std::path::PathBuf;

use clap::Parser;

/// mimalloc: under load, glibc malloc showed as ~15% of dq-server's CPU.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// dq's HTTP API for producers, pull consumers and admins.
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
    dq_server::run(settings, shutdown).await
}
