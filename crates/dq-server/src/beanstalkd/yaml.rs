//! The YAML bodies of `stats`, `stats-tube`, `stats-job` and the tube lists, in beanstalkd's format
//! and key order. Keys that mean nothing in dq (binlog, rusage) are kept, at 0, so clients that read
//! them keep working; docs/beanstalkd.md lists them.

use std::collections::HashMap;
use std::fmt::Write;

use dq_core::State;
use dq_core::beanstalkd::BsJob;

use super::counters::Gauges;

/// `---\n- a\n- b\n`
pub fn list(names: &[String]) -> Vec<u8> {
    let mut out = String::from("---\n");
    for n in names {
        let _ = writeln!(out, "- {n}");
    }
    out.into_bytes()
}

/// The whole seconds left at `now_ms` until `until_ms` (both Unix ms), as beanstalkd shows them
/// (`time-left`, `pause-time-left`): it cuts the nanoseconds left, and an instant it set is always some
/// nanoseconds past when it is read, so a TTR of 60 s shows 59 right after the reserve. dq's instants
/// are whole milliseconds (Redis's clock, cut), so the difference is the time left only to within a
/// millisecond either way, and is 60,000 when the stats are read in the millisecond of the reserve:
/// one millisecond is taken off so that such a read shows 59 too. Never below 0.
pub fn secs_left(until_ms: i64, now_ms: i64) -> i64 {
    (until_ms - now_ms - 1).max(0) / 1000
}

/// `stats-job`.
pub fn job(n: u64, tube: &str, job: &BsJob, now_ms: i64) -> Vec<u8> {
    let secs = |ms: i64| ms.max(0) / 1000;
    let time_left = match job.state {
        State::Reserved => job.deadline.map_or(0, |d| secs_left(d, now_ms)),
        State::Delayed => secs_left(job.run_at, now_ms),
        _ => 0,
    };
    let [timeouts, releases, buries, kicks] = job.counters;
    format!(
        "---\nid: {n}\ntube: {tube}\nstate: {}\npri: {}\nage: {}\ndelay: {}\nttr: {}\ntime-left: {time_left}\n\
         file: 0\nreserves: {}\ntimeouts: {timeouts}\nreleases: {releases}\nburies: {buries}\nkicks: {kicks}\n",
        state_name(job),
        job.priority,
        secs(now_ms - job.created_at),
        job.delay_s.map_or(secs(job.run_at - job.created_at), |d| d as i64),
        job.ttr_ms / 1000,
        job.attempts,
    )
    .into_bytes()
}

fn count(counts: &HashMap<State, i64>, state: State) -> i64 {
    counts.get(&state).copied().unwrap_or(0).max(0)
}

/// `stats-tube`. `paused`: when the tube's pause ends (Unix ms) and its length in seconds.
pub fn tube(
    name: &str,
    topic: &str,
    urgent: u64,
    counts: &HashMap<State, i64>,
    totals: &HashMap<String, i64>,
    gauges: &Gauges,
    paused: Option<(i64, u64)>,
) -> Vec<u8> {
    let total = |k: &str| totals.get(&format!("{topic}:{k}")).copied().unwrap_or(0);
    let [using, watching, waiting] = gauges.tubes.get(topic).copied().unwrap_or_default();
    let now = dq_core::clock::unix_ms();
    let (pause, left) = match paused {
        Some((until, secs)) if until > now => (secs, secs_left(until, now)),
        _ => (0, 0),
    };
    format!(
        "---\nname: {name}\ncurrent-jobs-urgent: {urgent}\ncurrent-jobs-ready: {}\ncurrent-jobs-reserved: {}\n\
         current-jobs-delayed: {}\ncurrent-jobs-buried: {}\ntotal-jobs: {}\ncurrent-using: {using}\n\
         current-watching: {watching}\ncurrent-waiting: {waiting}\ncmd-delete: {}\ncmd-pause-tube: {}\n\
         pause: {pause}\npause-time-left: {left}\n",
        count(counts, State::Ready),
        count(counts, State::Reserved),
        count(counts, State::Delayed),
        count(counts, State::Dead),
        total("total-jobs"),
        total("cmd-delete"),
        total("cmd-pause-tube"),
    )
    .into_bytes()
}

/// What `stats` says about the server.
pub struct ServerInfo<'a> {
    /// `current-jobs-urgent`.
    pub urgent: u64,
    /// `max-job-size`.
    pub max_job_size: usize,
    /// `current-tubes`.
    pub tubes: usize,
    /// `draining`.
    pub draining: bool,
    /// `id`: this dq-server's.
    pub server_id: &'a str,
    /// `uptime`: of the listener, seconds.
    pub uptime_s: u64,
}

/// `stats`: the counts over every tube, the counters and gauges over every dq-server.
pub fn stats(
    counts: &HashMap<String, HashMap<State, i64>>,
    totals: &HashMap<String, i64>,
    gauges: &Gauges,
    info: &ServerInfo<'_>,
) -> Vec<u8> {
    let sum = |state: State| counts.values().map(|c| count(c, state)).sum::<i64>();
    let total_jobs: i64 = totals
        .iter()
        .filter(|(k, _)| k.ends_with(":total-jobs"))
        .map(|(_, v)| v)
        .sum();
    let mut out = String::from("---\n");
    let _ = writeln!(out, "current-jobs-urgent: {}", info.urgent);
    let _ = writeln!(out, "current-jobs-ready: {}", sum(State::Ready));
    let _ = writeln!(out, "current-jobs-reserved: {}", sum(State::Reserved));
    let _ = writeln!(out, "current-jobs-delayed: {}", sum(State::Delayed));
    let _ = writeln!(out, "current-jobs-buried: {}", sum(State::Dead));
    // beanstalkd's `stats` lists its own commands, in this order; dq's `reserve-job`, `kick-job` and
    // `quit` are counted but not listed, as in beanstalkd.
    for cmd in super::counters::COMMAND_NAMES
        .iter()
        .filter(|c| !["reserve-job", "kick-job", "quit"].contains(c))
    {
        let n = totals.get(&format!("cmd-{cmd}")).copied().unwrap_or(0);
        let _ = writeln!(out, "cmd-{cmd}: {n}");
    }
    let _ = writeln!(out, "job-timeouts: 0");
    let _ = writeln!(out, "total-jobs: {total_jobs}");
    let _ = writeln!(out, "max-job-size: {}", info.max_job_size);
    let _ = writeln!(out, "current-tubes: {}", info.tubes);
    let _ = writeln!(out, "current-connections: {}", gauges.connections);
    let _ = writeln!(out, "current-producers: {}", gauges.producers);
    let _ = writeln!(out, "current-workers: {}", gauges.workers);
    let _ = writeln!(out, "current-waiting: {}", gauges.waiting);
    let _ = writeln!(out, "total-connections: {}", gauges.total_connections);
    let _ = writeln!(out, "pid: {}", std::process::id());
    let _ = writeln!(out, "version: \"dq {}\"", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(out, "rusage-utime: 0.000000");
    let _ = writeln!(out, "rusage-stime: 0.000000");
    let _ = writeln!(out, "uptime: {}", info.uptime_s);
    for key in [
        "binlog-oldest-index",
        "binlog-current-index",
        "binlog-records-migrated",
        "binlog-records-written",
        "binlog-max-size",
    ] {
        let _ = writeln!(out, "{key}: 0");
    }
    let _ = writeln!(out, "draining: {}", info.draining);
    let _ = writeln!(out, "id: {}", info.server_id);
    // As beanstalkd 1.12 writes them (uname's node name, version and machine), without quotes.
    let _ = writeln!(out, "hostname: {}", kernel("hostname"));
    let _ = writeln!(out, "os: {}", kernel("version"));
    let _ = writeln!(out, "platform: {}", std::env::consts::ARCH);
    out.into_bytes()
}

/// One of the kernel's names (`hostname`, `version`), as `uname` reads it.
fn kernel(name: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// A [`BsJob`]'s state as beanstalkd names it.
pub fn state_name(job: &BsJob) -> &'static str {
    match job.state {
        State::Delayed => "delayed",
        State::Reserved => "reserved",
        State::Dead => "buried",
        _ => "ready",
    }
}

#[cfg(test)]
mod tests {
    use super::secs_left;

    #[test]
    fn seconds_left_are_cut_as_beanstalkd_cuts_them() {
        // Read in the millisecond of a 60 s reservation, and just after it.
        assert_eq!(secs_left(60_000, 0), 59);
        assert_eq!(secs_left(60_000, 1), 59);
        assert_eq!(secs_left(60_000, 998), 59);
        assert_eq!(secs_left(60_000, 1_001), 58);
        assert_eq!(secs_left(1_000, 0), 0);
        assert_eq!(secs_left(1, 0), 0);
        // Past: 0, never below.
        assert_eq!(secs_left(0, 0), 0);
        assert_eq!(secs_left(0, 5_000), 0);
    }
}
