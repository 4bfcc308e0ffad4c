//! `dq-bench`: a load tool for a running dq-server.
//!
//! For push delivery it is also the receiving end: `sink` is a callback
//! server, and `deliver` runs one in-process to measure delivery through
//! dq-consumer end to end.
//!
//! It drives the HTTP API with a fixed number of keep-alive connections and
//! prints throughput and latency percentiles for people, plus one JSON line
//! with `--json` for scripts. It runs on the same small box as the server and
//! Redis, so it uses a bare HTTP/1.1 client ([`http`]) and, by default, a
//! single runtime worker thread. This file only parses arguments, builds the
//! runtime and dispatches; each subcommand lives in its own module and returns
//! a [`report::Report`], which is printed the same way for all of them.

mod baseline;
mod beanstalkd;
mod burst;
mod coalesce;
mod deliver;
mod due;
mod flow;
mod http;
mod lateness;
mod ledger;
mod push;
mod report;
mod reserve_ack;
mod sink;
mod waiters;
mod wire;

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::http::Target;

/// The allocator dq-server uses, so `baseline` is compared like for like (and the load costs less CPU).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
use crate::report::Report;

/// Measure a running dq-server over HTTP.
#[derive(Debug, Parser)]
#[command(name = "dq-bench", version, about)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

/// Flags every subcommand takes.
#[derive(Debug, Args)]
struct Common {
    /// Base URL of the dq-server.
    #[arg(long, global = true, default_value = "http://127.0.0.1:6789")]
    url: String,
    /// API token, sent as `Authorization: Bearer` (a token with the scopes the benchmark uses; the
    /// admin token for all of them).
    #[arg(long, global = true, env = "DQ_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Also print one JSON line with the results (the last line of stdout).
    #[arg(long, global = true)]
    json: bool,
    /// Runtime worker threads (keep it low to leave CPU to server and Redis).
    #[arg(long, global = true, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    threads: u32,
}

/// The benchmarks.
#[derive(Debug, Subcommand)]
enum Command {
    /// Push N delayed jobs over C connections, singly or in batches.
    Push(push::PushArgs),
    /// Fill a topic with N ready jobs, then reserve and ack them with C workers.
    ReserveAck(reserve_ack::ReserveAckArgs),
    /// Push jobs falling due at a steady rate; measure how late long-poll workers get them.
    Lateness(lateness::LatenessArgs),
    /// Push N jobs due in the same ms; measure how soon all are ready.
    Burst(burst::BurstArgs),
    /// Serve push-delivery callbacks until SIGINT/SIGTERM; count them and measure their lateness.
    Sink(sink::SinkArgs),
    /// Register a topic with an in-process sink as callback, push N jobs, measure delivery end to end.
    Deliver(deliver::DeliverArgs),
    /// Serve the bare axum + redis-rs push path (no dq) until SIGINT/SIGTERM, to load with `push`.
    Baseline(baseline::BaselineArgs),
    /// Hold W long polls open; measure dq-server's memory per waiter and Redis commands per push.
    Waiters(waiters::WaitersArgs),
    /// Put, then reserve and delete, M jobs on each of C connections over the beanstalkd protocol (dq-server's
    /// beanstalkd listener or a beanstalkd, at `--addr`; `--url` is not used).
    Beanstalkd(beanstalkd::BeanstalkdArgs),
    /// Push to coalescing keys (`last`: one key, debounced; `merge`: items over many keys) with an
    /// in-process callback; check what is delivered.
    Coalesce(coalesce::CoalesceArgs),
    /// Flow keys: fairness behind a big key's backlog, each key's rate, the cost of many keys.
    Flow(flow::FlowArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(report) => {
            print!("{}", report.human());
            if cli.common.json {
                println!("{}", report.json_line());
            }
            if report.is_failure() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("dq-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Builds the runtime and runs the chosen benchmark on it.
fn run(cli: &Cli) -> Result<Report> {
    let target = Target::parse_with(&cli.common.url, cli.common.token.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.common.threads as usize)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(async {
        match &cli.command {
            Command::Push(args) => push::run(&target, args).await,
            Command::ReserveAck(args) => reserve_ack::run(&target, args).await,
            Command::Lateness(args) => lateness::run(&target, args).await,
            Command::Burst(args) => burst::run(&target, args).await,
            Command::Sink(args) => sink::run(args).await,
            Command::Deliver(args) => deliver::run(&target, args).await,
            Command::Baseline(args) => baseline::run(args).await,
            Command::Waiters(args) => waiters::run(&target, args).await,
            Command::Beanstalkd(args) => beanstalkd::run(args).await,
            Command::Coalesce(args) => coalesce::run(&target, args).await,
            Command::Flow(args) => flow::run(&target, args).await,
        }
    })?;
    Ok(report.with("threads", cli.common.threads))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_defaults_and_global_flags() {
        let cli = Cli::try_parse_from(["dq-bench", "push", "--json", "-n", "10"]).unwrap();
        assert!(cli.common.json);
        assert_eq!(cli.common.url, "http://127.0.0.1:6789");
        assert_eq!(cli.common.threads, 1);
        let Command::Push(p) = cli.command else {
            panic!("not push")
        };
        assert_eq!((p.jobs, p.connections, p.batch, p.body_bytes), (10, 64, 1, 64));
        assert_eq!((p.topic.as_str(), p.delay_ms, p.warmup), ("bench", 3_600_000, 2000));

        let cli = Cli::try_parse_from(["dq-bench", "--threads", "2", "reserve-ack", "--no-fill", "-c", "8"]).unwrap();
        assert_eq!(cli.common.threads, 2);
        let Command::ReserveAck(r) = cli.command else {
            panic!("not reserve-ack")
        };
        assert!(r.no_fill);
        assert_eq!((r.jobs, r.connections, r.topic.as_str()), (100_000, 8, "bench-ra"));
    }

    #[test]
    fn parses_lateness_and_burst() {
        let cli = Cli::try_parse_from(["dq-bench", "lateness"]).unwrap();
        let Command::Lateness(l) = cli.command else {
            panic!("not lateness")
        };
        assert_eq!(
            (l.rate, l.seconds, l.lead_ms, l.workers, l.connections),
            (2000, 10, 3000, 16, 8)
        );
        assert_eq!(
            (l.topic, l.deadline_ms, l.kill_pid, l.kill_at),
            (None, 30_000, None, 0.5)
        );

        let cli = Cli::try_parse_from([
            "dq-bench",
            "lateness",
            "--kill-pid",
            "42",
            "--kill-at",
            "0.3",
            "--topic",
            "x",
        ])
        .unwrap();
        let Command::Lateness(l) = cli.command else {
            panic!("not lateness")
        };
        assert_eq!((l.kill_pid, l.kill_at, l.topic.as_deref()), (Some(42), 0.3, Some("x")));

        let cli = Cli::try_parse_from(["dq-bench", "burst"]).unwrap();
        let Command::Burst(b) = cli.command else {
            panic!("not burst")
        };
        assert_eq!(
            (b.jobs, b.lead_ms, b.connections, b.deadline_ms, b.poll_ms),
            (100_000, 10_000, 8, 30_000, 10)
        );
        assert!(b.cleanup && b.topic.is_none());
        for (flag, cleanup) in [
            (&["--cleanup"][..], true),
            (&["--cleanup", "false"], false),
            (&["--cleanup=false"], false),
        ] {
            let args = ["dq-bench", "burst", "-n", "5"].iter().chain(flag).copied();
            let Command::Burst(b) = Cli::try_parse_from(args).unwrap().command else {
                panic!("not burst")
            };
            assert_eq!((b.jobs, b.cleanup), (5, cleanup), "{flag:?}");
        }
    }

    #[test]
    fn parses_sink_and_deliver() {
        let cli = Cli::try_parse_from(["dq-bench", "sink"]).unwrap();
        let Command::Sink(s) = cli.command else {
            panic!("not sink")
        };
        assert_eq!(
            (s.listen.to_string().as_str(), s.status, s.reply.as_str(), s.delay_ms),
            ("127.0.0.1:0", 200, r#"{"ok":true}"#, 0)
        );
        let cli = Cli::try_parse_from([
            "dq-bench",
            "sink",
            "--listen",
            "0.0.0.0:9000",
            "--status",
            "503",
            "--reply",
            "",
            "--delay-ms",
            "250",
        ])
        .unwrap();
        let Command::Sink(s) = cli.command else {
            panic!("not sink")
        };
        assert_eq!(
            (s.listen.to_string().as_str(), s.status, s.reply.as_str(), s.delay_ms),
            ("0.0.0.0:9000", 503, "", 250)
        );

        let cli = Cli::try_parse_from(["dq-bench", "deliver", "--json"]).unwrap();
        assert!(cli.common.json);
        let Command::Deliver(d) = cli.command else {
            panic!("not deliver")
        };
        assert_eq!(
            (d.jobs, d.concurrency, d.rate, d.lead_ms, d.connections, d.deadline_ms),
            (50_000, 64, 0, 3000, 8, 60_000)
        );
        assert_eq!(
            (d.topic, d.sink_listen.to_string().as_str(), d.callback_url),
            (None, "127.0.0.1:0", None)
        );
        assert_eq!((d.sink_delay_ms, d.settle_ms, d.linger_ms), (0, 2000, 1000));
        let cli = Cli::try_parse_from([
            "dq-bench",
            "deliver",
            "-n",
            "10",
            "--rate",
            "500",
            "--connections",
            "2",
            "--topic",
            "t",
        ])
        .unwrap();
        let Command::Deliver(d) = cli.command else {
            panic!("not deliver")
        };
        assert_eq!(
            (d.jobs, d.rate, d.connections, d.topic.as_deref()),
            (10, 500, 2, Some("t"))
        );
    }

    #[test]
    fn parses_beanstalkd() {
        let cli = Cli::try_parse_from(["dq-bench", "beanstalkd", "--json"]).unwrap();
        let Command::Beanstalkd(b) = cli.command else {
            panic!("not beanstalkd")
        };
        assert_eq!(
            (
                b.addr.as_str(),
                b.jobs_per_connection,
                b.connections,
                b.body_bytes,
                b.tube.as_str()
            ),
            ("127.0.0.1:11300", 1000, 64, 64, "bench")
        );
        assert!(Cli::try_parse_from(["dq-bench", "beanstalkd", "--body-bytes", "65536"]).is_err());
        assert!(Cli::try_parse_from(["dq-bench", "beanstalkd", "-c", "0"]).is_err());
    }

    #[test]
    fn rejects_bad_values() {
        for args in [
            &["dq-bench", "push", "--body-bytes", "1"][..],
            &["dq-bench", "push", "-c", "0"],
            &["dq-bench", "push", "--batch", "0"],
            &["dq-bench", "reserve-ack", "-n", "0"],
            &["dq-bench", "--threads", "0", "push"],
            &["dq-bench", "lateness", "--rate", "0"],
            &["dq-bench", "lateness", "--kill-at", "0.5"],
            &["dq-bench", "lateness", "--kill-pid", "1", "--kill-at", "1.5"],
            &["dq-bench", "lateness", "--workers", "0"],
            &["dq-bench", "burst", "-n", "0"],
            &["dq-bench", "burst", "--poll-ms", "0"],
            &["dq-bench", "sink", "--status", "600"],
            &["dq-bench", "sink", "--status", "199"],
            &["dq-bench", "sink", "--listen", "localhost"],
            &["dq-bench", "deliver", "-n", "0"],
            &["dq-bench", "deliver", "--concurrency", "0"],
            &["dq-bench", "deliver", "-c", "0"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?}");
        }
    }
}
