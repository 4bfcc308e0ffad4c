//! dq-server: the HTTP API. Parses arguments and hands over to [`dq_server::run`].

use std::path::PathBuf;

use clap::Parser;

/// jemalloc: under load, glibc malloc showed as ~15% of dq-server's CPU, and jemalloc costs no more CPU
/// per request than mimalloc did. Unlike mimalloc, it writes nothing into a block it hands out, so the
/// 8 KiB buffers hyper gives each connection stay off the resident memory until they are used: a waiting
/// HTTP/1.1 long poll costs 7.4 KiB rather than 11.4 KiB (docs/operations.md).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    let (settings, shutdown, _flush) = dq_core::process::start(env!("CARGO_BIN_NAME"), args.config.as_deref())?;
    dq_server::run(settings, shutdown).await
}
