//! The dashboard at the top of `/admin`: jobs pushed, delivered, failed and dead per minute and the
//! lateness of first deliveries over the last hours (from the activity counts every process adds to
//! Redis, see `dq_core::activity`), drawn as SVG on the server, and each Redis primary's health and
//! memory.
//!
//! The charts are plain SVG in the page: no script, no library, nothing from another origin. Colours
//! are SVG presentation attributes (`stroke="…"`), which the page's Content-Security-Policy allows,
//! unlike `style="…"`.

use std::time::Duration;

use dq_core::activity::{LATENESS_BOUNDS_MS, MinuteActivity};
use dq_core::admin::NodeStats;
use maud::{Markup, html};

use crate::AppState;
use crate::error::ApiError;

/// The windows a dashboard offers, in hours; the first is the default.
const WINDOWS: [u32; 3] = [6, 1, 24];

/// Points drawn per series at most: longer windows add up minutes per point.
const MAX_POINTS: usize = 360;

/// The chart's size and margins (SVG user units, which the page shows as pixels).
const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 200.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;

/// The throughput series: name, colour.
const SERIES: [(&str, &str); 4] = [
    ("pushed", "#1f77b4"),
    ("delivered", "#2ca02c"),
    ("failed", "#ff7f0e"),
    ("dead", "#d62728"),
];

/// The window a request asks for: `?hours=1|6|24`.
#[derive(Debug, Default, serde::Deserialize)]
pub struct DashboardQuery {
    /// Hours shown; absent for the default.
    hours: Option<String>,
}

impl DashboardQuery {
    /// The window in hours, or a 400 naming what is allowed.
    pub fn hours(&self) -> Result<u32, ApiError> {
        match self.hours.as_deref() {
            None => Ok(WINDOWS[0]),
            Some(h) => h
                .parse()
                .ok()
                .filter(|h| WINDOWS.contains(h))
                .ok_or_else(|| ApiError::invalid(format!("hours must be one of 1, 6 or 24, not {h:?}"))),
        }
    }
}

/// The dashboard over the last `hours`: activity charts, then the Redis primaries with their memory
/// (one `INFO memory` per primary, side by side with the activity read).
pub async fn section(app: &AppState, hours: u32) -> Markup {
    let (activity, nodes) = tokio::join!(
        app.queue.admin().activity(hours * 60),
        app.queue.admin().node_memory(Duration::from_millis(1000))
    );
    html! {
        h2 { "Activity" }
        p {
            "Last " (hours) " h, per minute, UTC. "
            @for h in [1, 6, 24] {
                @if h == hours { b { (h) " h" } } @else { a href={ "/admin?hours=" (h) } { (h) " h" } }
                " "
            }
        }
        @match activity {
            Err(e) => { p class="down" { "Cannot read the activity counts: " (e) } }
            Ok(minutes) => { (charts(&minutes)) }
        }
        (redis(app, &nodes))
    }
}

/// Minutes added up `step` at a time: per-minute rates (the mean of the step) and the worst lateness
/// percentiles of the step.
struct Point {
    /// First minute of the step (Unix minutes).
    minute: i64,
    /// Pushed, delivered, failed, dead per minute.
    rates: [f64; 4],
    /// Worst p50 and p99 lateness in the step, ms.
    p50: Option<u64>,
    p99: Option<u64>,
}

fn points(minutes: &[MinuteActivity], step: usize) -> Vec<Point> {
    minutes
        .chunks(step)
        .map(|c| {
            let rate = |f: fn(&MinuteActivity) -> u64| c.iter().map(f).sum::<u64>() as f64 / c.len() as f64;
            Point {
                minute: c[0].minute,
                rates: [
                    rate(|m| m.pushed),
                    rate(|m| m.delivered),
                    rate(|m| m.failed),
                    rate(|m| m.dead),
                ],
                p50: c.iter().filter_map(|m| m.lateness_p50_ms).max(),
                p99: c.iter().filter_map(|m| m.lateness_p99_ms).max(),
            }
        })
        .collect()
}

/// The two charts and the window's totals (which carry their numbers in `data-total` for tests and
/// scripts).
fn charts(minutes: &[MinuteActivity]) -> Markup {
    let step = minutes.len().div_ceil(MAX_POINTS).max(1);
    let points = points(minutes, step);
    let total = |f: fn(&MinuteActivity) -> u64| minutes.iter().map(f).sum::<u64>();
    let totals = [
        ("pushed", total(|m| m.pushed)),
        ("delivered", total(|m| m.delivered)),
        ("failed", total(|m| m.failed)),
        ("dead", total(|m| m.dead)),
        ("first deliveries", total(|m| m.first_deliveries)),
    ];
    let worst_p99 = minutes.iter().filter_map(|m| m.lateness_p99_ms).max();
    let per = if step == 1 {
        "per minute".to_string()
    } else {
        format!("per minute, mean of {step}-minute steps")
    };
    html! {
        h3 { "Jobs " (per) }
        (legend(&SERIES))
        (throughput_chart(&points, step))
        h3 { "Lateness of first deliveries (reserve time − due time), worst per step" }
        (legend(&[("p50", "#9467bd"), ("p99", "#8c564b")]))
        (lateness_chart(&points, step))
        table id="activity-totals" {
            tr { @for (name, _) in &totals { th { (name) } } th { "worst p99 lateness" } }
            tr {
                @for (name, n) in &totals { td class="num" data-total=(name) { (n) } }
                td class="num" data-total="worst p99 ms" { @if let Some(ms) = worst_p99 { (duration(ms)) } }
            }
        }
    }
}

/// A legend: a coloured line and a name per series.
fn legend(items: &[(&str, &str)]) -> Markup {
    html! {
        svg width="420" height="18" role="img" aria-label="legend" {
            @for (i, (name, colour)) in items.iter().enumerate() {
                @let x = i as f64 * 100.0;
                line x1=(x) y1="9" x2=(x + 24.0) y2="9" stroke=(colour) stroke-width="3" {}
                text x=(x + 30.0) y="13" font-size="12" { (name) }
            }
        }
    }
}

/// Where step `i` of `n` lies on the x axis.
fn x_of(i: usize, n: usize) -> f64 {
    LEFT + (WIDTH - LEFT - RIGHT) * i as f64 / (n.max(2) - 1) as f64
}

/// The frame, the time axis (UTC) and the y labels (`(value in the chart's scale 0..1, label)`).
fn frame(points: &[Point], step: usize, y_labels: &[(f64, String)]) -> Markup {
    let plot_h = HEIGHT - TOP - BOTTOM;
    let span_min = points.len() * step;
    // A tick every 10 minutes over an hour, every hour over 6, every 4 hours over 24.
    let tick_min = match span_min {
        0..=60 => 10,
        61..=360 => 60,
        _ => 240,
    } as i64;
    let first = points.first().map_or(0, |p| p.minute);
    let last = points.last().map_or(0, |p| p.minute);
    let span = (last - first).max(1) as f64;
    let ticks = (first.div_euclid(tick_min) + 1..=last.div_euclid(tick_min)).map(|t| t * tick_min);
    html! {
        rect x=(LEFT) y=(TOP) width=(WIDTH - LEFT - RIGHT) height=(plot_h) fill="#fcfcfc" stroke="#ccc" {}
        @for (v, label) in y_labels {
            @let y = TOP + plot_h * (1.0 - v);
            line x1=(LEFT) y1=(y) x2=(WIDTH - RIGHT) y2=(y) stroke="#eee" {}
            text x=(LEFT - 6.0) y=(y + 4.0) font-size="11" text-anchor="end" { (label) }
        }
        @for t in ticks {
            @let x = LEFT + (WIDTH - LEFT - RIGHT) * (t - first) as f64 / span;
            line x1=(x) y1=(TOP + plot_h) x2=(x) y2=(TOP + plot_h + 4.0) stroke="#999" {}
            text x=(x) y=(HEIGHT - 8.0) font-size="11" text-anchor="middle" { (clock(t)) }
        }
        text x=(WIDTH - RIGHT) y=(HEIGHT - 8.0) font-size="11" text-anchor="end" fill="#666" { "UTC" }
    }
}

/// `HH:MM` of a Unix minute, UTC.
fn clock(minute: i64) -> String {
    let m = minute.rem_euclid(24 * 60);
    format!("{:02}:{:02}", m / 60, m % 60)
}

/// Throughput: a line per series on a linear scale from 0 to a round maximum.
fn throughput_chart(points: &[Point], step: usize) -> Markup {
    let top = points.iter().flat_map(|p| p.rates).fold(0.0_f64, f64::max);
    let max = nice_ceiling(top.max(1.0));
    let plot_h = HEIGHT - TOP - BOTTOM;
    let y = |v: f64| TOP + plot_h * (1.0 - v / max);
    let labels: Vec<(f64, String)> = (0..=4)
        .map(|k| (k as f64 / 4.0, number(max * k as f64 / 4.0)))
        .collect();
    html! {
        svg class="chart" viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } width=(WIDTH) height=(HEIGHT)
            role="img" aria-label="jobs per minute" {
            (frame(points, step, &labels))
            @for (k, (name, colour)) in SERIES.iter().enumerate() {
                @let line: Vec<String> = points.iter().enumerate()
                    .map(|(i, p)| format!("{:.1},{:.1}", x_of(i, points.len()), y(p.rates[k]))).collect();
                polyline data-series=(name) fill="none" stroke=(colour) stroke-width="1.5" points=(line.join(" ")) {}
            }
        }
    }
}

/// Lateness: p50 and p99 on a log scale (1 ms up to a power of ten above the worst), broken where a
/// step had no first delivery.
fn lateness_chart(points: &[Point], step: usize) -> Markup {
    let worst = points.iter().filter_map(|p| p.p99).max().unwrap_or(1000).max(1000);
    let decades = (worst as f64).log10().ceil().max(1.0);
    let plot_h = HEIGHT - TOP - BOTTOM;
    let y = |ms: u64| TOP + plot_h * (1.0 - (ms.max(1) as f64).log10() / decades);
    let labels: Vec<(f64, String)> = (0..=decades as u32)
        .map(|d| (d as f64 / decades, duration(10u64.pow(d))))
        .collect();
    html! {
        svg class="chart" viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } width=(WIDTH) height=(HEIGHT)
            role="img" aria-label="lateness of first deliveries" {
            (frame(points, step, &labels))
            @for (name, colour, pick) in [("p50", "#9467bd", 0), ("p99", "#8c564b", 1)] {
                @for run in runs(points, pick) {
                    @let line: Vec<String> = run.iter()
                        .map(|(i, ms)| format!("{:.1},{:.1}", x_of(*i, points.len()), y(*ms))).collect();
                    @if line.len() == 1 {
                        circle data-series=(name) cx=(x_of(run[0].0, points.len())) cy=(y(run[0].1)) r="2" fill=(colour) {}
                    } @else {
                        polyline data-series=(name) fill="none" stroke=(colour) stroke-width="1.5" points=(line.join(" ")) {}
                    }
                }
            }
        }
    }
}

/// The stretches of consecutive steps that have a percentile (`pick` 0: p50, 1: p99), with their index.
fn runs(points: &[Point], pick: usize) -> Vec<Vec<(usize, u64)>> {
    let mut out: Vec<Vec<(usize, u64)>> = Vec::new();
    let mut open = false;
    for (i, p) in points.iter().enumerate() {
        match if pick == 0 { p.p50 } else { p.p99 } {
            Some(ms) if open => out.last_mut().expect("open run").push((i, ms)),
            Some(ms) => {
                out.push(vec![(i, ms)]);
                open = true;
            }
            None => open = false,
        }
    }
    out
}

/// The primaries: up or down, round trip of `INFO memory`, memory used and its limit.
fn redis(app: &AppState, nodes: &[NodeStats]) -> Markup {
    html! {
        h2 { "Redis" }
        p { (format!("{:?}", app.queue.mode()).to_lowercase()) ", " (app.queue.partitions().count()) " partitions" }
        table id="redis-nodes" {
            tr { th { "primary" } th { "state" } th { "round trip" } th { "memory used" } th { "maxmemory" } th { "used of max" } }
            @for s in nodes {
                tr {
                    td { (s.name) }
                    @if s.up { td { "up" } } @else { td class="down" { "down" } }
                    td class="num" { @if let Some(l) = s.latency { (format!("{:.2} ms", l.as_secs_f64() * 1000.0)) } }
                    td class="num" data-used-memory=[s.used_memory] { @if let Some(b) = s.used_memory { (bytes(b)) } }
                    td class="num" {
                        @match s.maxmemory { Some(0) => { "none" } Some(b) => { (bytes(b)) } None => {} }
                    }
                    td class="num" {
                        @if let (Some(u), Some(m)) = (s.used_memory, s.maxmemory.filter(|m| *m > 0)) {
                            @let pct = u as f64 * 100.0 / m as f64;
                            @if pct >= 80.0 { span class="down" { (format!("{pct:.0} %")) } } @else { (format!("{pct:.0} %")) }
                        }
                    }
                }
            }
        }
    }
}

/// A round number at or above `v` (1, 2 or 5 times a power of ten).
fn nice_ceiling(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|k| k * p)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * p)
}

/// A rate for an axis label: whole numbers as such, else up to two decimals.
fn number(v: f64) -> String {
    // Two decimals at most, trailing zeros dropped: the quarter marks of a scale of 1 read 0.25 and
    // 0.75, not 0.2 and 0.8.
    let text = format!("{v:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A lateness in ms as people read it (the buckets' top shown as "≥ 1 d").
fn duration(ms: u64) -> String {
    match ms {
        ms if ms >= *LATENESS_BOUNDS_MS.last().expect("bounds") => "≥ 1 d".to_string(),
        ms if ms < 1000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{} s", ms as f64 / 1000.0),
        ms if ms < 3_600_000 => format!("{:.1} min", ms as f64 / 60_000.0),
        ms => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

/// Bytes as people read them.
fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_numbers_and_units_read_well() {
        assert_eq!(nice_ceiling(0.7), 1.0);
        assert_eq!(nice_ceiling(13.0), 20.0);
        assert_eq!(nice_ceiling(4500.0), 5000.0);
        assert_eq!(clock(29_000_000), "21:20");
        assert_eq!(duration(300), "300 ms");
        assert_eq!(
            (number(0.25), number(0.5), number(1.0), number(12.5), number(2000.0)),
            ("0.25".into(), "0.5".into(), "1".into(), "12.5".into(), "2000".into())
        );
        assert_eq!(duration(50_000), "50 s");
        assert_eq!(duration(86_400_000), "≥ 1 d");
        assert_eq!(bytes(1_572_864), "1.5 MiB");
    }

    #[test]
    fn lateness_lines_break_where_no_job_was_delivered() {
        let p = |minute, p50| Point {
            minute,
            rates: [0.0; 4],
            p50,
            p99: p50,
        };
        let points = [p(0, Some(5)), p(1, Some(7)), p(2, None), p(3, Some(9))];
        assert_eq!(runs(&points, 0), vec![vec![(0, 5), (1, 7)], vec![(3, 9)]]);
    }
}
