//! dq-checker: parses arguments and hands over to [`dq_checker::run`] or [`dq_checker::audit`].

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// mimalloc, as in the other dq binaries.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Watches every Redis shard and raises alerts (webhook, e-mail), publishes queue depths, and audits and
/// repairs consistency.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// TOML config file; every key can also be set as DQ__SECTION__KEY.
    #[arg(long, env = "DQ_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// What to do; by default, run until SIGTERM.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Audit every shard once, repair what is broken, print the report as JSON, exit.
    Audit,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (settings, shutdown) = dq_core::process::start(args.config.as_deref())?;
    match args.command {
        Some(Command::Audit) => {
            let report = dq_checker::audit(&settings).await?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
        None => dq_checker::run(settings, shutdown).await,
    }
}
