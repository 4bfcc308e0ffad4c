//! `dq`, the command line over [`dq_client`]: one subcommand per verb of the API, human tables by
//! default and the API's JSON with `--json`, the server, token and CA file from flags or
//! `DQ_URL`/`DQ_TOKEN`/`DQ_CA_FILE` (and an ack's or nack's consumer name from `--consumer` or
//! `DQ_CONSUMER`).
//!
//! - `cli.rs`: the commands and their arguments (clap);
//! - `jobs.rs`: push, get, cancel, reschedule, reserve, ack, nack, touch;
//! - `attempts.rs`: a job's delivery attempts, one line each (`dq get --attempts`);
//! - `manage.rs`: topics (and their busiest flow keys), dead letters, schedules, stats;
//! - `tail.rs`: follows counts and deaths live;
//! - `output.rs`: tables, times and JSON.

mod attempts;
mod cli;
mod jobs;
mod manage;
mod output;
mod tail;

pub use cli::Cli;

use anyhow::Result;
use clap::CommandFactory;
use dq_client::Client;

use crate::cli::Command;

/// Runs one command.
pub async fn run(cli: Cli) -> Result<()> {
    let out = output::Output { json: cli.json };
    if let Command::Completions { shell } = cli.command {
        let mut command = Cli::command();
        clap_complete::generate(shell, &mut command, "dq", &mut std::io::stdout());
        return Ok(());
    }
    let client = Client::builder(&cli.url)
        .token(cli.token.clone())
        .ca_file(cli.ca_file.clone())
        .consumer(cli.command.consumer())
        .build()?;
    match cli.command {
        Command::Completions { .. } => unreachable!("answered above"),
        Command::Tail(args) => tail::run(&client, &out, args).await,
        Command::Topics(cmd) => manage::topics(&client, &out, cmd).await,
        Command::Dead(cmd) => manage::dead(&client, &out, cmd).await,
        Command::Schedules(cmd) => manage::schedules(&client, &out, cmd).await,
        Command::Stats => manage::stats(&client, &out).await,
        Command::Jobs {
            topic,
            state,
            offset,
            limit,
        } => manage::jobs(&client, &out, &topic, &state, offset, limit).await,
        other => jobs::run(&client, &out, other).await,
    }
}
