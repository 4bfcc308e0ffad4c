//! dq-checker: parses arguments and hands over to [`dq_checker::run`] or [`dq_checker::audit`].

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// mimalloc, as dq-timer and dq-consumer (dq-server uses jemalloc, for its memory per idle connection).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Watches every Redis primary and raises alerts (webhook, e-mail), publishes queue depths, audits and
/// repairs consistency, and converts the layout of older releases.
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
    /// Audit every partition once, repair what is broken, print the report as JSON, exit.
    Audit,
    /// Convert the layout of releases before partitions (`redis.shards`) into the configured Redis: every
    /// job in every state, dead lists and the topic registry. Safe to run again after a crash. Print the
    /// report as JSON, exit.
    Migrate {
        /// An old shard's Redis URL; give one per shard (default: the configured standalone Redis).
        #[arg(long = "from", value_delimiter = ',')]
        from: Vec<String>,
    },
    /// Job records that could not be decoded, moved out of the way so that everything else keeps moving:
    /// list them, drop them, or put them back. Prints JSON lines, exits.
    Quarantine {
        /// What to do.
        #[command(subcommand)]
        command: dq_checker::quarantine::Command,
    },
    /// The keys that seal callback secrets and header values at rest (`secrets.keys`).
    Secrets {
        /// What to do.
        #[command(subcommand)]
        command: SecretsCommand,
    },
}

#[derive(Subcommand)]
enum SecretsCommand {
    /// Seal every topic registration again under the first key of `secrets.keys` (after putting a new
    /// key first), so the old key can be removed. Prints `{"rekeyed": [topics]}`, exits.
    Rekey,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (settings, shutdown, _flush) = dq_core::process::start(env!("CARGO_BIN_NAME"), args.config.as_deref())?;
    match args.command {
        Some(Command::Audit) => {
            let report = dq_checker::audit(&settings).await?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
        Some(Command::Migrate { mut from }) => {
            if from.is_empty() {
                from = settings.redis.urls.clone();
                anyhow::ensure!(
                    settings.redis.mode == dq_core::config::RedisMode::Standalone,
                    "name the old shards with --from when redis.mode is not standalone"
                );
            }
            let report = dq_checker::migrate::run(&settings, &from).await?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
        Some(Command::Quarantine { command }) => dq_checker::quarantine::run(&settings, command).await,
        Some(Command::Secrets {
            command: SecretsCommand::Rekey,
        }) => {
            let queue = dq_core::Queue::connect(&settings).await?;
            let rekeyed = queue.checker().rekey_topics().await?;
            println!("{}", serde_json::json!({ "rekeyed": rekeyed }));
            Ok(())
        }
        None => dq_checker::run(settings, shutdown).await,
    }
}
