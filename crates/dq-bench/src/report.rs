//! Latency histograms, error tallies and the final report.
//!
//! Every subcommand measures the same way — each load task records its
//! request latencies in its own HDR histogram (microseconds, so recording is
//! lock-free and cheap), the histograms are merged once the timed phase ends,
//! and the result is summarised as throughput plus p50/p90/p99/p99.9/max in
//! ms. A run can also end in a verdict ([`Report::failure`]) for benchmarks
//! that check correctness (lost or duplicated jobs, a deadline missed).
//! Keeping that here gives all subcommands one human format and one JSON line
//! format, so their numbers can be compared and parsed by the same scripts.

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use crate::http::shorten;

/// Highest latency a histogram tracks, in µs (an hour); longer ones saturate.
const MAX_TRACKED_US: u64 = 3_600_000_000;

/// A latency histogram in microseconds.
pub type Hist = Histogram<u64>;

/// A new, empty latency histogram (µs, 3 significant figures).
pub fn new_hist() -> Hist {
    Histogram::new_with_bounds(1, MAX_TRACKED_US, 3).expect("static histogram bounds are valid")
}

/// Records one latency (at least 1 µs, at most [`MAX_TRACKED_US`]).
pub fn record(hist: &mut Hist, elapsed: Duration) {
    let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    hist.saturating_record(us.clamp(1, MAX_TRACKED_US));
}

/// Merges the per-task histograms into one.
pub fn merge<'a>(hists: impl IntoIterator<Item = &'a Hist>) -> Hist {
    let mut all = new_hist();
    for h in hists {
        all.add(h).expect("histograms share the same bounds");
    }
    all
}

/// Errors seen by all tasks of a run: a count, and the first one's text.
#[derive(Debug, Default)]
pub struct Errors {
    count: AtomicU64,
    first: OnceLock<String>,
}

impl Errors {
    /// Counts `n` errors; `describe` is only called for the run's first one.
    pub fn add(&self, n: u64, describe: impl FnOnce() -> String) {
        if n == 0 {
            return;
        }
        self.count.fetch_add(n, Ordering::Relaxed);
        if self.first.get().is_none() {
            let _ = self.first.set(describe());
        }
    }

    /// How many errors were counted.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The first error's description, if any.
    pub fn first(&self) -> Option<&str> {
        self.first.get().map(String::as_str)
    }
}

/// The summary of one latency histogram, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Percentiles {
    /// How many latencies were recorded.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

impl Percentiles {
    /// Summarises a µs histogram (all zero when it is empty).
    pub fn of(hist: &Hist) -> Self {
        if hist.is_empty() {
            return Self::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            count: hist.len(),
            p50_ms: ms(hist.value_at_quantile(0.50)),
            p90_ms: ms(hist.value_at_quantile(0.90)),
            p99_ms: ms(hist.value_at_quantile(0.99)),
            p999_ms: ms(hist.value_at_quantile(0.999)),
            max_ms: ms(hist.max()),
        }
    }

    /// `(name, value)` pairs for the JSON line, each name prefixed.
    fn json_fields(&self, prefix: &str) -> [(String, Value); 5] {
        [
            (format!("{prefix}p50_ms"), round(self.p50_ms, 3).into()),
            (format!("{prefix}p90_ms"), round(self.p90_ms, 3).into()),
            (format!("{prefix}p99_ms"), round(self.p99_ms, 3).into()),
            (format!("{prefix}p999_ms"), round(self.p999_ms, 3).into()),
            (format!("{prefix}max_ms"), round(self.max_ms, 3).into()),
        ]
    }
}

/// A finished run: what every subcommand prints.
#[derive(Debug, Clone)]
pub struct Report {
    /// The subcommand's name (`push`, `reserve-ack`, …).
    pub bench: String,
    /// Jobs completed in the timed phase.
    pub jobs: u64,
    /// Wall time of the timed phase, in seconds.
    pub seconds: f64,
    /// The headline latency: its label (`request`, `cycle`, …) and summary;
    /// its percentiles are the JSON line's top-level `p50_ms` … `max_ms`.
    pub latency: (String, Percentiles),
    /// Further latencies; in JSON their fields are prefixed with `<label>_`.
    pub more_latencies: Vec<(String, Percentiles)>,
    /// Errors counted in the timed phase.
    pub errors: u64,
    /// The first error's description.
    pub first_error: Option<String>,
    /// Run parameters and extra counters, shown after the standard fields.
    pub extras: Vec<(String, Value)>,
    /// Why the run failed its check, if it did (the process then exits 1).
    pub failure: Option<String>,
}

impl Report {
    /// A report with no further latencies or extras yet.
    pub fn new(
        bench: &str,
        jobs: u64,
        elapsed: Duration,
        latency_label: &str,
        latency: &Hist,
        errors: &Errors,
    ) -> Self {
        Self {
            bench: bench.to_string(),
            jobs,
            seconds: elapsed.as_secs_f64(),
            latency: (latency_label.to_string(), Percentiles::of(latency)),
            more_latencies: Vec::new(),
            errors: errors.count(),
            first_error: errors.first().map(str::to_string),
            extras: Vec::new(),
            failure: None,
        }
    }

    /// Adds a further latency summary.
    pub fn with_latency(mut self, label: &str, hist: &Hist) -> Self {
        self.more_latencies.push((label.to_string(), Percentiles::of(hist)));
        self
    }

    /// Adds a parameter or counter.
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.extras.push((name.to_string(), value.into()));
        self
    }

    /// Marks the run as failed (exit status 1) for `reason`.
    pub fn failed(mut self, reason: impl Into<String>) -> Self {
        self.failure = Some(reason.into());
        self
    }

    /// Whether the run should exit with status 1: errors, or a failed check.
    pub fn is_failure(&self) -> bool {
        self.errors > 0 || self.failure.is_some()
    }

    /// Jobs per second of wall time (0 when no time passed).
    pub fn jobs_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.jobs as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// The multi-line report for people.
    pub fn human(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}: {} jobs in {:.3} s = {:.1} jobs/s, {} error{}",
            self.bench,
            self.jobs,
            self.seconds,
            self.jobs_per_sec(),
            self.errors,
            if self.errors == 1 { "" } else { "s" },
        );
        if !self.extras.is_empty() {
            let params: Vec<String> = self
                .extras
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                })
                .collect();
            let _ = writeln!(out, "  {}", params.join(" "));
        }
        let _ = writeln!(
            out,
            "  {:<12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "latency ms", "count", "p50", "p90", "p99", "p99.9", "max"
        );
        for (label, p) in std::iter::once(&self.latency).chain(&self.more_latencies) {
            let _ = writeln!(
                out,
                "  {:<12} {:>10} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                label, p.count, p.p50_ms, p.p90_ms, p.p99_ms, p.p999_ms, p.max_ms
            );
        }
        if let Some(e) = &self.first_error {
            let _ = writeln!(out, "  first error: {e}");
        }
        if let Some(f) = &self.failure {
            let _ = writeln!(out, "  FAILED: {f}");
        }
        out
    }

    /// The one-line JSON summary, fields in a fixed order.
    pub fn json_line(&self) -> String {
        let mut fields: Vec<(String, Value)> = vec![
            ("bench".into(), self.bench.clone().into()),
            ("jobs".into(), self.jobs.into()),
            ("seconds".into(), round(self.seconds, 4).into()),
            ("jobs_per_sec".into(), round(self.jobs_per_sec(), 1).into()),
        ];
        fields.extend(self.latency.1.json_fields(""));
        fields.push(("errors".into(), self.errors.into()));
        for (label, p) in &self.more_latencies {
            fields.extend(p.json_fields(&format!("{}_", label.replace('-', "_"))));
        }
        fields.extend(self.extras.iter().cloned());
        if let Some(e) = &self.first_error {
            fields.push(("first_error".into(), shorten(e, 300).into()));
        }
        if let Some(f) = &self.failure {
            fields.push(("failure".into(), shorten(f, 300).into()));
        }
        serde_json::to_string(&Ordered(&fields)).expect("a report always serializes")
    }
}

/// Serializes `(name, value)` pairs as a JSON object, keeping their order.
struct Ordered<'a>(&'a [(String, Value)]);

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// Rounds to `places` decimals (JSON readers need no more precision).
fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist_of(us: impl IntoIterator<Item = u64>) -> Hist {
        let mut h = new_hist();
        for v in us {
            record(&mut h, Duration::from_micros(v));
        }
        h
    }

    #[test]
    fn percentiles_of_known_values() {
        // 1..=1000 µs: p50 ≈ 0.5 ms, p90 ≈ 0.9 ms, p99 ≈ 0.99 ms, p99.9 ≈ 0.999 ms, max 1 ms.
        let p = Percentiles::of(&hist_of(1..=1000));
        assert_eq!(p.count, 1000);
        assert!((p.p50_ms - 0.500).abs() < 0.001, "{p:?}");
        assert!((p.p90_ms - 0.900).abs() < 0.001, "{p:?}");
        assert!((p.p99_ms - 0.990).abs() < 0.001, "{p:?}");
        assert!((p.p999_ms - 0.999).abs() < 0.001, "{p:?}");
        assert!((p.max_ms - 1.000).abs() < 0.001, "{p:?}");
        assert_eq!(Percentiles::of(&new_hist()), Percentiles::default());
    }

    #[test]
    fn records_clamp() {
        let h = hist_of([0]);
        assert_eq!(h.min(), 1);
        let mut h = new_hist();
        record(&mut h, Duration::from_secs(10 * 3600));
        assert!(h.max() >= MAX_TRACKED_US);
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn merges_task_histograms() {
        let a = hist_of([100, 200]);
        let b = hist_of([300]);
        let all = merge([&a, &b]);
        assert_eq!(all.len(), 3);
        assert_eq!(all.max(), 300);
    }

    #[test]
    fn errors_keep_the_first() {
        let e = Errors::default();
        e.add(0, || unreachable!());
        assert_eq!((e.count(), e.first()), (0, None));
        e.add(1, || "first".into());
        e.add(3, || "second".into());
        assert_eq!((e.count(), e.first()), (4, Some("first")));
    }

    fn sample() -> Report {
        let errors = Errors::default();
        Report::new(
            "reserve-ack",
            1000,
            Duration::from_millis(500),
            "cycle",
            &hist_of(1..=1000),
            &errors,
        )
        .with_latency("reserve", &hist_of([2000]))
        .with("connections", 64)
        .with("topic", "bench-ra")
    }

    #[test]
    fn json_line_has_fixed_fields_in_order() {
        let line = sample().json_line();
        assert!(!line.contains('\n'));
        assert!(
            line.starts_with(
                r#"{"bench":"reserve-ack","jobs":1000,"seconds":0.5,"jobs_per_sec":2000.0,"p50_ms":0.5,"p90_ms":0.9,"p99_ms":0.99,"p999_ms":0.999,"max_ms":1.0,"errors":0,"reserve_p50_ms":2.0,"#
            ),
            "{line}"
        );
        assert!(line.ends_with(r#""connections":64,"topic":"bench-ra"}"#), "{line}");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["reserve_max_ms"], 2.0);
        assert!(v.get("first_error").is_none());
        assert!(v.get("failure").is_none());
        assert!(!sample().is_failure());
    }

    #[test]
    fn json_line_reports_errors() {
        let errors = Errors::default();
        errors.add(2, || "HTTP 400 Bad Request: {\"error\":1}".into());
        let r = Report::new("push", 0, Duration::ZERO, "request", &new_hist(), &errors);
        let v: Value = serde_json::from_str(&r.json_line()).unwrap();
        assert_eq!(v["errors"], 2);
        assert_eq!(v["jobs_per_sec"], 0.0);
        assert_eq!(v["p99_ms"], 0.0);
        assert_eq!(v["first_error"], "HTTP 400 Bad Request: {\"error\":1}");
        assert!(r.is_failure());
    }

    #[test]
    fn failed_checks_are_reported() {
        let r = sample().failed("3 jobs missing");
        assert!(r.is_failure());
        let v: Value = serde_json::from_str(&r.json_line()).unwrap();
        assert_eq!(v["failure"], "3 jobs missing");
        assert_eq!(r.human().lines().last(), Some("  FAILED: 3 jobs missing"));
    }

    #[test]
    fn human_report_lines() {
        let text = sample().human();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "reserve-ack: 1000 jobs in 0.500 s = 2000.0 jobs/s, 0 errors");
        assert_eq!(lines[1], "  connections=64 topic=bench-ra");
        assert!(lines[2].trim_start().starts_with("latency ms"));
        assert_eq!(
            lines[3],
            "  cycle              1000     0.500     0.900     0.990     0.999     1.000"
        );
        assert!(lines[4].starts_with("  reserve               1     2.000"));
        assert_eq!(lines.len(), 5);
    }
}
