//! dq's beanstalkd listener against the real beanstalkd 1.12, byte for byte: scripted sessions of raw
//! protocol exchanges (sessions.rs) run against a fresh beanstalkd and a fresh dq (dq-server with
//! `beanstalkd.listen`, dq-timer, a Redis with one partition), and every reply is compared. A few steps are
//! marked with a named difference (`DIFFERENCES`) and compared as that difference allows. Sessions about
//! the order across tubes in several partitions run against a dq of `sessions::ACROSS_PARTITIONS`, whose
//! job numbers differ from beanstalkd's: their replies' numbers are compared by the order they first
//! appear in (`run::renumbered`).
//!
//! On failure every mismatching step is printed (session, step, what was sent, both replies), not only
//! the first. `BEANSTALKD_DIFF_ONLY=<text>` runs only the sessions whose name holds the text;
//! `BEANSTALKD_DIFF_TRANSCRIPT=1` prints every step of the reference's replies.
//!
//! A second test runs beanstalkd against beanstalkd: it proves that every step is deterministic, so that a
//! mismatch against dq is dq's.

mod beanstalkd_diff {
    pub mod run;
    pub mod script;
    pub mod sessions;
}
mod common;

use beanstalkd_diff::run::{Reply, escape, renumbered, run};
use beanstalkd_diff::script::Session;
use beanstalkd_diff::sessions;
use common::beanstalkd::{Beanstalkd, DqBeanstalkd};

/// Where dq may answer otherwise, and why: (name, reason). A step marked with one is compared by
/// [`allowed`]; every other step must match byte for byte.
const DIFFERENCES: &[(&str, &str)] = &[
    (
        "server-stats",
        "stats: pid, version, rusage-*, uptime, binlog-*, id, hostname, os and platform describe beanstalkd's process, machine and binlog, not the queue",
    ),
    (
        "job-stats",
        "stats-job: age and time-left are whole seconds read off each server's clock as it answers; file is a binlog file number (dq has no binlog)",
    ),
    (
        "job-age",
        "stats-job: age is whole seconds read off each server's clock since the put (time-left is compared: both round the time left down)",
    ),
    (
        "tube-pause",
        "stats-tube: pause-time-left is whole seconds read off each server's clock as it answers",
    ),
];

/// The YAML keys whose values difference `name` lets differ.
fn ignored_keys(name: &str) -> &'static [&'static str] {
    match name {
        "server-stats" => &[
            "pid",
            "version",
            "rusage-utime",
            "rusage-stime",
            "uptime",
            "binlog-oldest-index",
            "binlog-current-index",
            "binlog-records-migrated",
            "binlog-records-written",
            "binlog-max-size",
            "id",
            "hostname",
            "os",
            "platform",
        ],
        "job-stats" => &["age", "time-left", "file"],
        "job-age" => &["age"],
        "tube-pause" => &["pause-time-left"],
        other => panic!("no difference named {other:?} in DIFFERENCES"),
    }
}

/// Whether `reference`'s and `dq`'s replies to a step marked `difference` match as it allows: both `OK <n>`
/// replies with a YAML mapping of the same keys in the same order, equal but for the ignored keys' values.
/// Any other reply must match exactly.
fn allowed(difference: &str, reference: &Reply, dq: &Reply) -> bool {
    let (Some(a), Some(b)) = (yaml_mapping(reference), yaml_mapping(dq)) else {
        return reference == dq;
    };
    let ignored = ignored_keys(difference);
    a.len() == b.len()
        && a.iter()
            .zip(&b)
            .all(|((ka, va), (kb, vb))| ka == kb && (va == vb || ignored.contains(&ka.as_str())))
}

/// The (key, value) lines of an `OK <n>` reply's YAML mapping.
fn yaml_mapping(reply: &Reply) -> Option<Vec<(String, String)>> {
    let Reply::Bytes(bytes) = reply else { return None };
    let text = std::str::from_utf8(bytes).ok()?;
    let (line, body) = text.split_once("\r\n")?;
    if !line.starts_with("OK ") {
        return None;
    }
    let yaml = body.strip_suffix("\r\n")?.strip_prefix("---\n")?;
    yaml.lines()
        .map(|l| l.split_once(": ").map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

/// A step whose replies do not match.
struct Mismatch {
    session: &'static str,
    step: usize,
    conn: usize,
    verb: &'static str,
    sent: Vec<u8>,
    difference: Option<&'static str>,
    reference: Reply,
    other: Reply,
}

/// The mismatching steps of `session` (a step fails too when either side could not do it).
fn compare(session: &Session, reference: &[Reply], other: &[Reply]) -> Vec<Mismatch> {
    let mut found = Vec::new();
    for (i, step) in session.steps.iter().enumerate() {
        let (a, b) = (&reference[i], &other[i]);
        let same = a.is_sound()
            && b.is_sound()
            && match step.difference {
                Some(d) => allowed(d, a, b),
                None => a == b,
            };
        if !same {
            found.push(Mismatch {
                session: session.name,
                step: i + 1,
                conn: step.conn,
                verb: step.action.verb(),
                sent: step.action.sent().to_vec(),
                difference: step.difference,
                reference: a.clone(),
                other: b.clone(),
            });
        }
    }
    found
}

/// Both servers' replies as `session` compares them: as they are, or renumbered (see [`renumbered`])
/// when dq ran on several partitions and numbered the jobs otherwise.
fn comparable(session: &Session, reference: Vec<Reply>, other: Vec<Reply>) -> (Vec<Reply>, Vec<Reply>) {
    if session.partitions > 1 {
        (renumbered(&reference), renumbered(&other))
    } else {
        (reference, other)
    }
}

/// The sessions to run: all, or those `BEANSTALKD_DIFF_ONLY` names.
fn chosen() -> Vec<Session> {
    let only = std::env::var("BEANSTALKD_DIFF_ONLY").unwrap_or_default();
    let all = sessions::all();
    for s in &all {
        for step in &s.steps {
            if let Some(d) = step.difference {
                assert!(
                    DIFFERENCES.iter().any(|(n, _)| *n == d),
                    "{}: no difference {d:?}",
                    s.name
                );
            }
        }
    }
    all.into_iter().filter(|s| s.name.contains(only.as_str())).collect()
}

/// Prints the reference's replies when `BEANSTALKD_DIFF_TRANSCRIPT` is set.
fn transcript(session: &Session, replies: &[Reply]) {
    if std::env::var_os("BEANSTALKD_DIFF_TRANSCRIPT").is_none() {
        return;
    }
    println!("== {}", session.name);
    for (i, (step, reply)) in session.steps.iter().zip(replies).enumerate() {
        println!(
            "{:>3} c{} {} {}  =>  {reply}",
            i + 1,
            step.conn,
            step.action.verb(),
            escape(step.action.sent())
        );
    }
}

/// Panics listing every mismatch, if there is any.
fn assert_none(mismatches: &[Mismatch], other_name: &str) {
    if mismatches.is_empty() {
        return;
    }
    let mut text = String::new();
    for m in mismatches {
        text.push_str(&format!(
            "\n[{}] step {} on connection {}: {} {}{}\n  beanstalkd: {}\n  {other_name:<10}: {}\n",
            m.session,
            m.step,
            m.conn,
            m.verb,
            escape(&m.sent),
            m.difference.map(|d| format!("  (difference {d})")).unwrap_or_default(),
            m.reference,
            m.other,
        ));
        // For YAML replies, the keys that differ, in full.
        if let (Some(a), Some(b)) = (yaml_mapping(&m.reference), yaml_mapping(&m.other)) {
            let ignored = m.difference.map(ignored_keys).unwrap_or_default();
            for ((ka, va), (kb, vb)) in a.iter().zip(&b) {
                if (ka != kb || va != vb) && !ignored.contains(&ka.as_str()) {
                    text.push_str(&format!("    {ka}: {va}  |  {kb}: {vb}\n"));
                }
            }
            if a.len() != b.len() {
                text.push_str(&format!("    {} keys  |  {} keys\n", a.len(), b.len()));
            }
        }
    }
    panic!("{} step(s) differ from beanstalkd:{text}", mismatches.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dq_answers_as_beanstalkd_does() {
    let mut mismatches = Vec::new();
    for session in chosen() {
        let reference = Beanstalkd::start();
        let dq = DqBeanstalkd::with_partitions(session.partitions).await;
        let (a, b) = tokio::join!(run(&session, &reference.addr), run(&session, &dq.addr));
        transcript(&session, &a);
        let (a, b) = comparable(&session, a, b);
        mismatches.extend(compare(&session, &a, &b));
    }
    assert_none(&mismatches, "dq");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_is_deterministic_on_beanstalkd() {
    let mut mismatches = Vec::new();
    for session in chosen() {
        let (one, two) = (Beanstalkd::start(), Beanstalkd::start());
        let (a, b) = tokio::join!(run(&session, &one.addr), run(&session, &two.addr));
        transcript(&session, &a);
        let (a, b) = comparable(&session, a, b);
        mismatches.extend(compare(&session, &a, &b));
    }
    assert_none(&mismatches, "beanstalkd");
}

#[test]
fn differences_compare_as_they_say() {
    let ok = |yaml: &str| {
        let body = format!("---\n{yaml}");
        Reply::Bytes(format!("OK {}\r\n{body}\r\n", body.len()).into_bytes())
    };
    let a = ok("id: 1\nage: 0\nfile: 0\n");
    assert!(allowed("job-stats", &a, &ok("id: 1\nage: 12\nfile: 3\n")));
    assert!(
        !allowed("job-stats", &a, &ok("id: 2\nage: 0\nfile: 0\n")),
        "a value dq defines"
    );
    assert!(
        !allowed("job-stats", &a, &ok("age: 0\nid: 1\nfile: 0\n")),
        "the order of the keys"
    );
    assert!(!allowed("job-stats", &a, &ok("id: 1\nage: 0\n")), "a missing key");
    let nf = Reply::Bytes(b"NOT_FOUND\r\n".to_vec());
    assert!(allowed("job-stats", &nf, &nf));
    assert!(!allowed("job-stats", &a, &nf));
    for (name, _) in DIFFERENCES {
        assert!(!ignored_keys(name).is_empty());
    }
}

#[test]
fn renumbering_keeps_the_order_of_jobs() {
    let bytes = |s: &str| Reply::Bytes(s.as_bytes().to_vec());
    let dq = [
        "INSERTED 196\r\n",
        "INSERTED 67\r\n",
        "RESERVED 67 2\r\nab\r\n",
        "FOUND 196 1\r\nx\r\n",
        "TIMED_OUT\r\n",
    ]
    .map(bytes);
    let want = [
        "INSERTED #1\r\n",
        "INSERTED #2\r\n",
        "RESERVED #2 2\r\nab\r\n",
        "FOUND #1 1\r\nx\r\n",
        "TIMED_OUT\r\n",
    ]
    .map(bytes);
    assert!(renumbered(&dq) == want);
    let beanstalkd = ["INSERTED 1\r\n", "INSERTED 2\r\n", "RESERVED 1 2\r\nab\r\n"].map(bytes);
    assert!(
        renumbered(&beanstalkd)[2] != renumbered(&dq)[2],
        "another job is another rank"
    );
}

/// The sessions over tubes in several partitions test the order across tubes only if the tubes put into
/// later have lower home partitions: numbers taken from each partition's own sequence would then put the
/// later jobs first.
#[test]
fn tubes_across_partitions_are_in_partitions_that_test_the_order() {
    use dq_core::beanstalkd::home_partition;
    let p = sessions::ACROSS_PARTITIONS;
    let [mail, stat, dynamic] = ["mail", "static", "dynamic"].map(|t| home_partition(t, p));
    assert!(mail > stat && stat > dynamic, "{mail} {stat} {dynamic}");
}
