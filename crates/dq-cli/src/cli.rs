//! The commands and their arguments.

use clap::{Args, Parser, Subcommand};
use clap_complete::Shell;

/// dq's command line: jobs, pull consumption, topics, dead letters, schedules and stats over dq's HTTP
/// API.
#[derive(Debug, Parser)]
#[command(name = "dq", version, propagate_version = true)]
pub struct Cli {
    /// The dq-server to talk to.
    #[arg(long, global = true, env = "DQ_URL", default_value = "http://127.0.0.1:6789")]
    pub url: String,
    /// A PEM file of CA certificates to trust for an https:// URL, besides the system's (for a
    /// dq-server whose certificate a private CA signed).
    #[arg(long, global = true, env = "DQ_CA_FILE")]
    pub ca_file: Option<std::path::PathBuf>,
    /// A bearer token, when the server has tokens configured.
    #[arg(long, global = true, env = "DQ_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Push a job: `dq push orders.close '{"order":42}' --delay 30s`.
    Push(Box<PushArgs>),
    /// Look a job up.
    Get {
        /// The job's id.
        id: String,
        /// Then its delivery attempts, newest first (with `--json`: the attempts' JSON alone).
        #[arg(long)]
        attempts: bool,
    },
    /// Delete a job, in any state.
    Cancel {
        /// The job's id.
        id: String,
    },
    /// Make a delayed or ready job due at another time, give it another priority, or both.
    Reschedule {
        /// The job's id.
        id: String,
        /// When it is due.
        #[command(flatten)]
        when: OptionalWhen,
        /// Its new priority (0 to 4294967295, lower is more urgent).
        #[arg(long, required_unless_present_any = ["delay", "at"])]
        priority: Option<u32>,
    },
    /// Reserve jobs of some topics (highest priority first); prints each job with its receipt.
    Reserve {
        /// The topics, highest priority first.
        #[arg(required = true)]
        topics: Vec<String>,
        /// Most jobs to take.
        #[arg(long, short = 'n', default_value_t = 1)]
        count: u32,
        /// Wait up to this long for a job (a long poll), e.g. `10s`.
        #[arg(long, value_parser = parse_duration_ms, default_value = "0")]
        wait: u64,
    },
    /// Mark a reserved job done.
    Ack {
        /// The job's id.
        id: String,
        /// The receipt its reserve gave.
        receipt: String,
        /// Jobs to push with the ack, stored if and only if it succeeds: a JSON array of push requests
        /// without `id` (theirs are `<id>~<index>`), or `@file`, or `-` for standard input.
        #[arg(long, value_name = "JSON")]
        push: Option<String>,
        /// Who acks.
        #[command(flatten)]
        consumer: ConsumerArg,
    },
    /// Mark a delivery failed: the job is retried after its backoff (or `--delay`), or goes dead.
    Nack {
        /// The job's id.
        id: String,
        /// The receipt its reserve gave.
        receipt: String,
        /// Retry after this long instead of the backoff list, e.g. `1m`.
        #[arg(long, value_parser = parse_duration_ms)]
        delay: Option<u64>,
        /// What went wrong (kept as the job's last error).
        #[arg(long)]
        error: Option<String>,
        /// Who nacks.
        #[command(flatten)]
        consumer: ConsumerArg,
    },
    /// Extend a reservation.
    Touch {
        /// The job's id.
        id: String,
        /// The receipt its reserve gave.
        receipt: String,
        /// The reservation lasts this long from now (default: the job's TTR).
        #[arg(long, value_parser = parse_duration_ms)]
        ttr: Option<u64>,
    },
    /// Topics: list, look up, register, delete, pause, resume.
    #[command(subcommand)]
    Topics(TopicsCommand),
    /// A page of a topic's jobs in one state, earliest first.
    Jobs {
        /// The topic.
        topic: String,
        /// Which jobs: delayed, ready, reserved or dead.
        #[arg(long, short = 's', default_value = "ready", value_parser = ["delayed", "ready", "reserved", "dead"])]
        state: String,
        /// Jobs to skip.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Jobs to show.
        #[arg(long, default_value_t = 50)]
        limit: u64,
    },
    /// A topic's dead letters: list, requeue, delete.
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Schedules: list, look up, register, delete, pause, resume.
    #[command(subcommand)]
    Schedules(SchedulesCommand),
    /// Jobs per topic and state, and Redis's health.
    Stats,
    /// Follow the topics' counts and their deaths live, until interrupted.
    Tail(TailArgs),
    /// Print a completion script: `dq completions bash > /etc/bash_completion.d/dq`.
    Completions {
        /// The shell.
        shell: Shell,
    },
}

impl Command {
    /// The name the command gives its attempt, for the client to send: only an ack or a nack ends one.
    pub fn consumer(&self) -> Option<String> {
        match self {
            Command::Ack { consumer, .. } | Command::Nack { consumer, .. } => consumer.consumer.clone(),
            _ => None,
        }
    }
}

/// The worker's name in the attempts it ends (`dq ack`, `dq nack`).
#[derive(Debug, Args)]
pub struct ConsumerArg {
    /// The name kept with the job's attempt as its `consumer` (1 to 128 characters), so that the
    /// attempts tell which worker acked or nacked.
    #[arg(long, env = "DQ_CONSUMER")]
    pub consumer: Option<String>,
}

/// `dq push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The topic.
    pub topic: String,
    /// The body: JSON text, `@file` for a file's, or `-` for standard input's.
    pub body: String,
    /// The job's id (an idempotency key); default: a fresh ULID (with `--flow-key`, the id dq makes).
    #[arg(long)]
    pub id: Option<String>,
    /// When it is due.
    #[command(flatten)]
    pub when: OptionalWhen,
    /// Time to run, e.g. `30s`.
    #[arg(long, value_parser = parse_duration_ms)]
    pub ttr: Option<u64>,
    /// Deliveries before it goes dead (0: unlimited).
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Its priority: 0 to 4294967295, lower is more urgent (default 1024). A topic's ready jobs go out
    /// by priority, then due time.
    #[arg(long)]
    pub priority: Option<u32>,
    /// A flow key (a customer, a tenant): the topic's `flow` limits apply to each key apart, and keys
    /// with ready jobs take turns. dq makes the job's id.
    #[arg(long)]
    pub flow_key: Option<String>,
    /// The W3C trace the job joins (`00-<trace id>-<parent id>-<flags>`): dq stores it with the job and
    /// hands it on with each delivery. Default: `TRACEPARENT` (the variable OpenTelemetry's tools set
    /// for a command run inside a span).
    #[arg(long, env = "TRACEPARENT")]
    pub traceparent: Option<String>,
    /// Its W3C `tracestate`, with `--traceparent`. Default: `TRACESTATE`.
    #[arg(long, env = "TRACESTATE", requires = "traceparent")]
    pub tracestate: Option<String>,
    /// A deduplication key, with `--dedup-window`.
    #[arg(long, requires = "dedup_window", conflicts_with = "id")]
    pub dedup_key: Option<String>,
    /// The deduplication window, e.g. `10m`.
    #[arg(long, value_parser = parse_duration_ms, requires = "dedup_key")]
    pub dedup_window: Option<u64>,
    /// A coalescing key: pushes with it become one job while it is pending, as `--coalesce` says.
    #[arg(long, requires_all = ["coalesce", "window"], conflicts_with = "dedup_key")]
    pub coalesce_key: Option<String>,
    /// How: `first` (deduplication), `last` (debounce: the last body, due a window after the last
    /// push), `merge` (every body an item of one job, due a window after the first).
    #[arg(long, value_enum, requires = "coalesce_key")]
    pub coalesce: Option<ModeArg>,
    /// The coalescing window, e.g. `500ms`, `5m`.
    #[arg(long, value_parser = parse_duration_ms, requires = "coalesce_key")]
    pub window: Option<u64>,
    /// `last`: due at most this long after the first push, e.g. `10m`.
    #[arg(long, value_parser = parse_duration_ms, requires = "coalesce_key")]
    pub max_wait: Option<u64>,
    /// `merge`: due at once with this many items.
    #[arg(long, requires = "coalesce_key")]
    pub max_items: Option<u32>,
}

/// A coalescing mode.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ModeArg {
    /// The first push's job stands for the window.
    First,
    /// The last push's body, due a window after it.
    Last,
    /// Every push's body an item of one job.
    Merge,
}

/// When a job is due: at most one of a delay and a time.
#[derive(Debug, Args)]
#[group(required = false, multiple = false)]
pub struct OptionalWhen {
    /// Due this long from now, e.g. `90s`, `5m`, `1500ms`.
    #[arg(long, value_parser = parse_duration_ms)]
    pub delay: Option<u64>,
    /// Due at this time: Unix ms, or RFC 3339 (`2026-12-01T09:00:00Z`).
    #[arg(long, value_parser = parse_time_ms)]
    pub at: Option<i64>,
}

/// `dq topics …`.
#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// List every topic with its counts.
    Ls,
    /// Show a topic's registration and counts.
    Get {
        /// The topic.
        topic: String,
    },
    /// Register a topic, or replace its registration whole.
    Put {
        /// The topic.
        topic: String,
        /// The registration: JSON text, `@file`, or `-` for standard input.
        config: String,
    },
    /// Delete a topic's registration (its jobs stay).
    Rm {
        /// The topic.
        topic: String,
    },
    /// Pause a topic: no reserve or delivery hands its jobs out.
    Pause {
        /// The topic.
        topic: String,
    },
    /// Resume a paused topic.
    Resume {
        /// The topic.
        topic: String,
    },
    /// Show how many of a topic's flow keys have ready jobs, and the busiest (most ready jobs first).
    Flows {
        /// The topic.
        topic: String,
        /// Keys to show (1 to 100).
        #[arg(long, default_value_t = 10)]
        limit: u64,
    },
}

/// `dq dead …`.
#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// List a topic's dead jobs, oldest death first.
    Ls {
        /// The topic.
        topic: String,
        /// Dead jobs to skip.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Dead jobs to show.
        #[arg(long, default_value_t = 100)]
        limit: u64,
    },
    /// Requeue dead jobs: the ids given, or every one with `--all`.
    Requeue(DeadSelection),
    /// Delete dead jobs: the ids given, or every one with `--all`.
    Rm(DeadSelection),
}

/// Which dead jobs.
#[derive(Debug, Args)]
pub struct DeadSelection {
    /// The topic.
    pub topic: String,
    /// The dead jobs' ids.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub ids: Vec<String>,
    /// Every dead job of the topic.
    #[arg(long)]
    pub all: bool,
}

/// `dq schedules …`.
#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// List every schedule.
    Ls,
    /// Show a schedule.
    Get {
        /// The schedule's name.
        name: String,
    },
    /// Register a schedule, or replace it.
    Put {
        /// The schedule's name.
        name: String,
        /// The registration (`{"cron", "timezone"?, "topic", "body", …}`): JSON text, `@file`, or `-`.
        config: String,
    },
    /// Delete a schedule.
    Rm {
        /// The schedule's name.
        name: String,
    },
    /// Pause a schedule.
    Pause {
        /// The schedule's name.
        name: String,
    },
    /// Resume a schedule.
    Resume {
        /// The schedule's name.
        name: String,
    },
}

/// `dq tail`.
#[derive(Debug, Args)]
pub struct TailArgs {
    /// Only these topics (default: every topic).
    pub topics: Vec<String>,
    /// How often to look, e.g. `1s`.
    #[arg(long, value_parser = parse_duration_ms, default_value = "1s")]
    pub every: u64,
}

/// A duration as milliseconds: `1500`, `1500ms`, `90s`, `5m`, `2h`, `1d`.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (e.g. 1500ms, 90s, 5m, 2h, 1d)"))?;
    let factor = match unit {
        "" | "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("`{text}`: unknown unit `{unit}` (ms, s, m, h or d)")),
    };
    n.checked_mul(factor).ok_or_else(|| format!("`{text}` is too long"))
}

/// A time as Unix milliseconds: digits, or RFC 3339.
pub fn parse_time_ms(text: &str) -> Result<i64, String> {
    if let Ok(ms) = text.parse::<u64>() {
        return i64::try_from(ms).map_err(|_| format!("`{text}` is too far in the future"));
    }
    let t = chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|e| format!("`{text}` is neither Unix ms nor an RFC 3339 time: {e}"))?;
    Some(t.timestamp_millis())
        .filter(|ms| *ms >= 0)
        .ok_or_else(|| format!("`{text}` is before 1970"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration_ms("1500"), Ok(1500));
        assert_eq!(parse_duration_ms("1500ms"), Ok(1500));
        assert_eq!(parse_duration_ms("90s"), Ok(90_000));
        assert_eq!(parse_duration_ms("5m"), Ok(300_000));
        assert_eq!(parse_duration_ms("2h"), Ok(7_200_000));
        assert_eq!(parse_duration_ms("1d"), Ok(86_400_000));
        assert!(parse_duration_ms("5 weeks").is_err());
        assert!(parse_duration_ms("s").is_err());
        assert!(parse_duration_ms("-5s").is_err());
    }

    #[test]
    fn times_take_unix_ms_or_rfc3339() {
        assert_eq!(parse_time_ms("1735689600000"), Ok(1_735_689_600_000));
        assert_eq!(parse_time_ms("2025-01-01T00:00:00Z"), Ok(1_735_689_600_000));
        assert_eq!(parse_time_ms("2025-01-01T01:00:00+01:00"), Ok(1_735_689_600_000));
        assert!(parse_time_ms("tomorrow").is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
