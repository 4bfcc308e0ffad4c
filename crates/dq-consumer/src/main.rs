//! dq-consumer: parses arguments and hands over to [`dq_consumer::run`].

use std::path::PathBuf;

use clap::Parser;

/// mimalloc: under load, glibc malloc showed as ~15% of dq-server's CPU; the consumer allocates alike.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Delivers ready jobs of every topic with a callback by HTTP POST, with retries and dead letters. Run as
/// many as you like: each reserves jobs before delivering them.
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
    dq_consumer::run(settings, shutdown).await
}
