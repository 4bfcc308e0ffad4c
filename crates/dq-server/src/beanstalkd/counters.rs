//! The protocol's counters (`cmd-…`, per tube `cmd-delete`, `cmd-pause-tube`, `total-jobs`) and gauges
//! (connections, producers, workers, waiting reserves, per tube `current-using`, `current-watching`,
//! `current-waiting`), summed over every dq-server that serves the protocol.
//!
//! Counting costs no Redis call: a server adds its counts to `{<prefix>}:bs:stats` once a second, and
//! rewrites its gauges in `{<prefix>}:bs:server:<id>` (expiring 5 s after the last write, so a server that
//! died stops counting), listed in `{<prefix>}:bs:servers`. A reader adds what its own server has not
//! written yet, and its own gauges as they are now, so one server's answers are exact at once and
//! another server's within a second.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use dq_core::Queue;
use tokio_util::sync::CancellationToken;

use super::command::Command;

/// Every command dq counts, in the order of beanstalkd's `stats` (which lists all but `reserve-job`,
/// `kick-job` and `quit`).
pub const COMMAND_NAMES: &[&str] = &[
    "put",
    "peek",
    "peek-ready",
    "peek-delayed",
    "peek-buried",
    "reserve",
    "reserve-with-timeout",
    "reserve-job",
    "delete",
    "release",
    "use",
    "watch",
    "ignore",
    "bury",
    "kick",
    "kick-job",
    "touch",
    "stats",
    "stats-job",
    "stats-tube",
    "list-tubes",
    "list-tube-used",
    "list-tubes-watched",
    "pause-tube",
    "quit",
];

/// `dq_beanstalkd_commands_total` with each command, served from the start.
pub const COMMANDS: dq_core::series::Counter =
    dq_core::series::Counter::labelled("dq_beanstalkd_commands_total", &[("command", COMMAND_NAMES)]);

/// How long a server's gauges count after its last write.
const GAUGES_TTL_MS: i64 = 5_000;

/// The `cmd-…` counter a command counts in (put and reserve count themselves).
pub fn counter_name(command: &Command) -> &'static str {
    match command {
        Command::Use(_) => "cmd-use",
        Command::Reserve { .. } => "cmd-reserve",
        // Counted apart, and not shown by `stats` (as in beanstalkd).
        Command::ReserveJob(_) => "cmd-reserve-job",
        Command::KickJob(_) => "cmd-kick-job",
        Command::Delete(_) => "cmd-delete",
        Command::Release(..) => "cmd-release",
        Command::Bury(..) => "cmd-bury",
        Command::Touch(_) => "cmd-touch",
        Command::Watch(_) => "cmd-watch",
        Command::Ignore(_) => "cmd-ignore",
        Command::Peek(_) => "cmd-peek",
        Command::PeekReady => "cmd-peek-ready",
        Command::PeekDelayed => "cmd-peek-delayed",
        Command::PeekBuried => "cmd-peek-buried",
        Command::Kick(_) => "cmd-kick",
        Command::StatsJob(_) => "cmd-stats-job",
        Command::StatsTube(_) => "cmd-stats-tube",
        Command::Stats => "cmd-stats",
        Command::ListTubes => "cmd-list-tubes",
        Command::ListTubeUsed => "cmd-list-tube-used",
        Command::ListTubesWatched => "cmd-list-tubes-watched",
        Command::PauseTube(..) => "cmd-pause-tube",
        Command::Quit => "cmd-quit",
    }
}

/// One server's gauges.
#[derive(Debug, Default, Clone)]
pub struct Gauges {
    /// Open connections.
    pub connections: i64,
    /// Connections that put a job.
    pub producers: i64,
    /// Connections that reserved.
    pub workers: i64,
    /// Reserves waiting now.
    pub waiting: i64,
    /// Connections accepted since start.
    pub total_connections: i64,
    /// Per topic: connections using it, watching it, waiting on it.
    pub tubes: HashMap<String, [i64; 3]>,
}

/// Which per-tube gauge.
#[derive(Debug, Clone, Copy)]
pub enum TubeGauge {
    /// `current-using`
    Using = 0,
    /// `current-watching`
    Watching = 1,
    /// `current-waiting`
    Waiting = 2,
}

/// This server's counts not yet written, and its gauges.
#[derive(Debug)]
pub struct Counters {
    /// This server's id (`id` in `stats`).
    pub server_id: String,
    /// Counts since the last write.
    unwritten: Mutex<HashMap<String, i64>>,
    /// `dq_beanstalkd_commands_total`'s counter of each command seen, registered at its first count:
    /// looking a counter up in the recorder on every command was a few per cent of a pipelined
    /// reserve + delete's CPU.
    commands: Mutex<HashMap<&'static str, metrics::Counter>>,
    /// Gauges as they are.
    gauges: Mutex<Gauges>,
}

impl Counters {
    /// Counters of a server with a fresh id.
    pub fn new() -> Self {
        Counters {
            server_id: format!("{:016x}", rand::random::<u64>()),
            unwritten: Mutex::default(),
            commands: Mutex::default(),
            gauges: Mutex::default(),
        }
    }

    /// Counts one of `field` for `stats` (`<topic>:cmd-delete`; a command of its own: [`Counters::count_command`]).
    pub fn count(&self, field: &str) {
        let mut unwritten = self.unwritten.lock().expect("not poisoned");
        match unwritten.get_mut(field) {
            Some(n) => *n += 1,
            None => {
                unwritten.insert(field.to_string(), 1);
            }
        }
    }

    /// Counts one `command` (`cmd-put`): for `stats` and in `dq_beanstalkd_commands_total`.
    pub fn count_command(&self, command: &'static str) {
        self.count(command);
        let name = command.strip_prefix("cmd-").unwrap_or(command);
        self.commands
            .lock()
            .expect("not poisoned")
            .entry(name)
            .or_insert_with(|| metrics::counter!("dq_beanstalkd_commands_total", "command" => name))
            .increment(1);
    }

    /// Changes this server's gauges.
    pub fn gauge(&self, change: impl FnOnce(&mut Gauges)) {
        change(&mut self.gauges.lock().expect("not poisoned"));
    }

    /// Moves a per-tube gauge of `topic` by `by`.
    pub fn tube_gauge(&self, topic: &str, which: TubeGauge, by: i64) {
        self.gauge(|g| {
            let entry = g.tubes.entry(topic.to_string()).or_default();
            entry[which as usize] += by;
            if entry.iter().all(|&v| v == 0) {
                g.tubes.remove(topic);
            }
        });
    }

    /// Every server's counts: what was written, plus this server's unwritten counts.
    pub async fn totals(&self, queue: &Queue) -> HashMap<String, i64> {
        let written = queue.beanstalkd().written_counters().await.unwrap_or_default();
        let mut totals: HashMap<String, i64> = written.into_iter().map(|(k, v)| (k, v.parse().unwrap_or(0))).collect();
        for (k, v) in self.unwritten.lock().expect("not poisoned").iter() {
            *totals.entry(k.clone()).or_default() += v;
        }
        totals
    }

    /// Every server's gauges summed: this one's as they are, the others' as they last wrote them.
    pub async fn all_gauges(&self, queue: &Queue) -> Gauges {
        let mut sum = self.gauges.lock().expect("not poisoned").clone();
        let bs = queue.beanstalkd();
        let servers = bs.live_servers(dq_core::clock::unix_ms()).await.unwrap_or_default();
        for id in servers.iter().filter(|id| **id != self.server_id) {
            let Ok(fields) = bs.server_gauges(id).await else {
                continue;
            };
            for (k, v) in fields {
                let v: i64 = v.parse().unwrap_or(0);
                match k.split_once(':') {
                    Some((kind, topic)) => {
                        let i = match kind {
                            "using" => 0,
                            "watching" => 1,
                            _ => 2,
                        };
                        sum.tubes.entry(topic.to_string()).or_default()[i] += v;
                    }
                    None => match k.as_str() {
                        "connections" => sum.connections += v,
                        "producers" => sum.producers += v,
                        "workers" => sum.workers += v,
                        "waiting" => sum.waiting += v,
                        "total_connections" => sum.total_connections += v,
                        _ => {}
                    },
                }
            }
        }
        sum
    }

    /// Writes the counts and gauges once a second until `stop`, and once more then (the gauges then
    /// removed).
    pub async fn write_every_second(&self, queue: &Queue, stop: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => self.write(queue, false).await,
                _ = stop.cancelled() => {
                    self.write(queue, true).await;
                    return;
                }
            }
        }
    }

    /// One write (see the module's doc); on failure the counts wait for the next.
    async fn write(&self, queue: &Queue, last: bool) {
        let counts: HashMap<String, i64> = std::mem::take(&mut *self.unwritten.lock().expect("not poisoned"));
        let gauges = self.gauges.lock().expect("not poisoned").clone();
        let fields = (!last).then(|| {
            let mut fields: Vec<(String, i64)> = vec![
                ("connections".into(), gauges.connections),
                ("producers".into(), gauges.producers),
                ("workers".into(), gauges.workers),
                ("waiting".into(), gauges.waiting),
                ("total_connections".into(), gauges.total_connections),
            ];
            for (topic, v) in &gauges.tubes {
                for (i, kind) in ["using", "watching", "waiting"].iter().enumerate() {
                    if v[i] != 0 {
                        fields.push((format!("{kind}:{topic}"), v[i]));
                    }
                }
            }
            fields
        });
        let now = dq_core::clock::unix_ms();
        let written = queue
            .beanstalkd()
            .write_counters(&self.server_id, &counts, fields, now, GAUGES_TTL_MS)
            .await;
        if let Err(e) = written {
            tracing::warn!(error = %e, "could not write the beanstalkd protocol's counters; trying again in a second");
            let mut unwritten = self.unwritten.lock().expect("not poisoned");
            for (k, v) in counts {
                *unwritten.entry(k).or_default() += v;
            }
        }
    }
}

impl Default for Counters {
    fn default() -> Self {
        Self::new()
    }
}
