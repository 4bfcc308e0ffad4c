//! `dq-bench sink`: a callback server for push delivery that counts and
//! times what it receives.
//!
//! dq-consumer POSTs each ready job of a registered topic to the topic's
//! callback URL, with the body `{"id","topic","body","attempt","run_at"}` and
//! the headers `X-DQ-Job-Id` and `X-DQ-Attempt`. The sink answers every POST
//! the same way (`--status` and `--reply`, after `--delay-ms`) and records for
//! each one the job id (the header, else the body's `id`), its lateness — this
//! machine's wall clock when the request arrived (µs) minus `run_at` (ms) —
//! and whether the id was seen before. `GET /stats` answers the counts so far.
//!
//! [`Sink`] runs in-process on the caller's runtime: `dq-bench sink` runs one
//! until SIGINT/SIGTERM and then prints what it saw; `dq-bench deliver` starts
//! one as its topic's callback. The pure parts — reading a delivery
//! ([`Delivery::parse`]) and the accounting ([`Ledger`]) — are unit tested.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use bytes::Bytes;
use clap::Args;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::due;
use crate::report::{self, Errors, Hist, Percentiles, Report};

/// The header carrying the job id.
pub const JOB_ID_HEADER: &str = "x-dq-job-id";
/// The header carrying the delivery attempt (1 for the first).
pub const ATTEMPT_HEADER: &str = "x-dq-attempt";
/// How long [`Sink::shutdown`] lets requests in flight finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How many ids the reports list as examples.
const SAMPLE: usize = 5;

/// Options of `dq-bench sink`.
#[derive(Debug, Args)]
pub struct SinkArgs {
    /// Address to listen on (port 0: any free port); the bound address is printed.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// HTTP status of every answer (2xx with a non-empty body is a successful delivery).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u16).range(200..=599))]
    pub status: u16,
    /// Body of every answer (sent as application/json; empty counts as a failed delivery).
    #[arg(long, default_value = r#"{"ok":true}"#)]
    pub reply: String,
    /// Wait this long before answering each request, in ms (0: answer at once).
    #[arg(long, default_value_t = 0)]
    pub delay_ms: u64,
}

impl SinkArgs {
    /// How the sink answers.
    fn answer(&self) -> Answer {
        Answer {
            status: StatusCode::from_u16(self.status).expect("clap keeps the status in 200..=599"),
            body: Bytes::from(self.reply.clone()),
            delay: Duration::from_millis(self.delay_ms),
        }
    }
}

/// How the sink answers every delivery.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The body (with `Content-Type: application/json`).
    pub body: Bytes,
    /// How long to wait before answering.
    pub delay: Duration,
}

impl Default for Answer {
    /// 200 `{"ok":true}`, at once.
    fn default() -> Self {
        Self {
            status: StatusCode::OK,
            body: Bytes::from_static(br#"{"ok":true}"#),
            delay: Duration::ZERO,
        }
    }
}

/// Runs `dq-bench sink` until SIGINT or SIGTERM.
pub async fn run(args: &SinkArgs) -> Result<Report> {
    // Listen for signals before announcing the address, so a script that
    // reads it and then stops the sink does not kill it instead.
    let mut signal = StopSignal::new()?;
    let sink = Sink::start(args.listen, args.answer(), None).await?;
    let addr = sink.addr();
    println!("sink listening on http://{addr}");
    let ledger = Arc::clone(sink.ledger());
    let name = signal.recv().await;
    eprintln!("sink: {name}, stopping");
    sink.shutdown().await?;

    let l = ledger.lock();
    let received_for = Duration::from_micros(l.last_us.saturating_sub(l.first_us.unwrap_or(l.last_us)) as u64);
    let report = Report::new(
        "sink",
        l.unique,
        received_for,
        "lateness",
        &l.lateness,
        &Errors::default(),
    )
    .with_latency("first", &l.first_lateness)
    .with("received", l.deliveries)
    .with("unique", l.unique)
    .with("duplicates", l.duplicates());
    let report = l
        .with_details(report)
        .with("listen", addr.to_string())
        .with("status", args.status)
        .with("delay_ms", args.delay_ms);
    if let Some(e) = &l.first_invalid {
        eprintln!("note: {} requests without a job id; first: {e}", l.invalid);
    }
    let dups = l.duplicate_sample();
    if !dups.is_empty() {
        eprintln!("note: ids received more than once, e.g. {}", dups.join(", "));
    }
    Ok(report)
}

/// Waits for SIGINT (Ctrl-C) or SIGTERM.
pub struct StopSignal {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl StopSignal {
    /// Installs the handlers now (from here on the signals no longer kill the process).
    pub fn new() -> Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
                term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Waits for the next signal; returns its name.
    pub async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.int.recv() => "SIGINT",
                _ = self.term.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

/// One callback request, as far as the sink cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The job id.
    pub id: String,
    /// The job's due time, Unix ms, if the body had it.
    pub run_at_ms: Option<i64>,
    /// The delivery attempt (1 for the first), if given.
    pub attempt: Option<u64>,
}

/// The fields of a callback body the sink reads; others are skipped.
#[derive(Deserialize)]
struct CallbackJson<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(default)]
    run_at: Option<i64>,
    #[serde(default)]
    attempt: Option<u64>,
}

impl Delivery {
    /// Reads a callback request: the id from `X-DQ-Job-Id` or else the body's
    /// `id`, the attempt from `X-DQ-Attempt` or else the body's `attempt`, and
    /// `run_at` from the body. Fails only when there is no id at all.
    pub fn parse(headers: &HeaderMap, body: &[u8]) -> Result<Self, String> {
        let text = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|s| !s.is_empty())
        };
        let json = serde_json::from_slice::<CallbackJson>(body);
        let (body_id, run_at_ms, body_attempt) = match &json {
            Ok(j) => (j.id.as_deref().filter(|s| !s.is_empty()), j.run_at, j.attempt),
            Err(_) => (None, None, None),
        };
        let Some(id) = text(JOB_ID_HEADER).or(body_id) else {
            return Err(match json {
                Ok(_) => "no job id: neither an X-DQ-Job-Id header nor an `id` in the body".to_string(),
                Err(e) => format!("no X-DQ-Job-Id header, and the body is not a job ({e})"),
            });
        };
        Ok(Self {
            id: id.to_string(),
            run_at_ms,
            attempt: text(ATTEMPT_HEADER).and_then(|a| a.parse().ok()).or(body_attempt),
        })
    }
}

/// The jobs a run expects: `<topic>-0` … `<topic>-<jobs-1>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    /// Their topic.
    pub topic: String,
    /// How many.
    pub jobs: u64,
}

impl Expect {
    /// Whether `id` is one of the expected jobs.
    pub fn contains(&self, id: &str) -> bool {
        due::index_of(&self.topic, id).is_some_and(|i| i < self.jobs)
    }
}

/// Everything the sink counted.
#[derive(Debug)]
pub struct Ledger {
    /// The jobs expected, if the sink was told (by `deliver`).
    pub expect: Option<Expect>,
    /// Deliveries per id.
    counts: HashMap<String, u32>,
    /// Requests with a job id (every delivery, first or not).
    pub deliveries: u64,
    /// Distinct ids.
    pub unique: u64,
    /// Ids delivered more than once.
    pub duplicate_ids: u64,
    /// Distinct expected ids (0 without an expectation).
    pub expected_unique: u64,
    /// Deliveries of ids that are not expected (0 without an expectation).
    pub unexpected: u64,
    /// Deliveries with an attempt above 1.
    pub retries: u64,
    /// Deliveries that arrived before their `run_at`.
    pub early: u64,
    /// Deliveries without a `run_at` (no lateness recorded).
    pub no_run_at: u64,
    /// Requests without a job id (answered 400, not counted as deliveries).
    pub invalid: u64,
    /// Why the first invalid request was refused.
    pub first_invalid: Option<String>,
    /// Lateness of every delivery, µs.
    pub lateness: Hist,
    /// Lateness of the first delivery of each id, µs.
    pub first_lateness: Hist,
    /// When the first delivery arrived, Unix µs.
    pub first_us: Option<i64>,
    /// When the latest delivery arrived, Unix µs (0 before any).
    pub last_us: i64,
    /// When the latest first delivery of an expected id (of any id without
    /// an expectation) arrived, Unix µs (0 before any).
    pub last_new_us: i64,
}

impl Ledger {
    /// An empty ledger, expecting `expect` if given.
    pub fn new(expect: Option<Expect>) -> Self {
        Self {
            expect,
            counts: HashMap::new(),
            deliveries: 0,
            unique: 0,
            duplicate_ids: 0,
            expected_unique: 0,
            unexpected: 0,
            retries: 0,
            early: 0,
            no_run_at: 0,
            invalid: 0,
            first_invalid: None,
            lateness: report::new_hist(),
            first_lateness: report::new_hist(),
            first_us: None,
            last_us: 0,
            last_new_us: 0,
        }
    }

    /// Counts one delivery that arrived at `now_us` (Unix µs); true if it is
    /// the first of its id.
    pub fn record(&mut self, d: Delivery, now_us: i64) -> bool {
        self.deliveries += 1;
        self.first_us.get_or_insert(now_us);
        self.last_us = self.last_us.max(now_us);
        if d.attempt.is_some_and(|a| a > 1) {
            self.retries += 1;
        }
        let late_us = d.run_at_ms.map(|r| now_us - r.saturating_mul(1000));
        match late_us {
            Some(l) => {
                if l < 0 {
                    self.early += 1;
                }
                report::record(&mut self.lateness, Duration::from_micros(l.max(0) as u64));
            }
            None => self.no_run_at += 1,
        }
        let expected = match &self.expect {
            Some(e) if e.contains(&d.id) => true,
            Some(_) => {
                self.unexpected += 1;
                false
            }
            None => true,
        };
        let first = match self.counts.entry(d.id) {
            Entry::Vacant(v) => {
                v.insert(1);
                true
            }
            Entry::Occupied(mut o) => {
                *o.get_mut() += 1;
                if *o.get() == 2 {
                    self.duplicate_ids += 1;
                }
                false
            }
        };
        if first {
            self.unique += 1;
            if let Some(l) = late_us {
                report::record(&mut self.first_lateness, Duration::from_micros(l.max(0) as u64));
            }
            if expected {
                self.last_new_us = self.last_new_us.max(now_us);
                if self.expect.is_some() {
                    self.expected_unique += 1;
                }
            }
        }
        first
    }

    /// Counts a request that was not a delivery (no job id).
    pub fn reject(&mut self, why: String) {
        self.invalid += 1;
        self.first_invalid.get_or_insert(why);
    }

    /// Deliveries of ids seen before (all deliveries minus the first of each id).
    pub fn duplicates(&self) -> u64 {
        self.deliveries - self.unique
    }

    /// Expected jobs never delivered: how many, and the first few ids.
    pub fn missing(&self) -> (u64, Vec<String>) {
        let Some(e) = &self.expect else {
            return (0, Vec::new());
        };
        let mut sample = Vec::new();
        let mut missing = 0;
        for i in 0..e.jobs {
            let id = due::job_id(&e.topic, i);
            if !self.counts.contains_key(&id) {
                missing += 1;
                if sample.len() < SAMPLE {
                    sample.push(id);
                }
            }
        }
        (missing, sample)
    }

    /// A few ids delivered more than once, as `id×count`, in id order
    /// (shorter first, so `t-9` comes before `t-10`).
    pub fn duplicate_sample(&self) -> Vec<String> {
        let mut dups: Vec<(&String, u32)> = self
            .counts
            .iter()
            .filter(|(_, c)| **c > 1)
            .map(|(id, c)| (id, *c))
            .collect();
        dups.sort_unstable_by(|a, b| (a.0.len(), a.0).cmp(&(b.0.len(), b.0)));
        dups.iter().take(SAMPLE).map(|(id, c)| format!("{id}×{c}")).collect()
    }

    /// Adds the counters both `sink` and `deliver` report to `report`.
    pub fn with_details(&self, report: Report) -> Report {
        report
            .with("duplicate_ids", self.duplicate_ids)
            .with("retries", self.retries)
            .with("early", self.early)
            .with("no_run_at", self.no_run_at)
            .with("invalid", self.invalid)
    }

    /// The counts so far, for `GET /stats`.
    pub fn stats_json(&self) -> Value {
        let pct = |h: &Hist| {
            let p = Percentiles::of(h);
            json!({"count": p.count, "p50_ms": p.p50_ms, "p90_ms": p.p90_ms, "p99_ms": p.p99_ms,
                "p999_ms": p.p999_ms, "max_ms": p.max_ms})
        };
        let mut v = json!({
            "received": self.deliveries,
            "unique": self.unique,
            "duplicates": self.duplicates(),
            "duplicate_ids": self.duplicate_ids,
            "retries": self.retries,
            "early": self.early,
            "no_run_at": self.no_run_at,
            "invalid": self.invalid,
            "lateness": pct(&self.lateness),
            "first_lateness": pct(&self.first_lateness),
        });
        if let Some(e) = &self.expect {
            v["expected"] = e.jobs.into();
            v["expected_unique"] = self.expected_unique.into();
            v["unexpected"] = self.unexpected.into();
        }
        v
    }
}

/// The [`Ledger`] shared by the request handlers and the sink's owner.
#[derive(Debug)]
pub struct Shared(Mutex<Ledger>);

impl Shared {
    /// Locks the ledger (hold it briefly: every request waits for it).
    pub fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the request handlers share.
struct App {
    ledger: Arc<Shared>,
    answer: Answer,
}

/// A running sink server.
pub struct Sink {
    addr: SocketAddr,
    ledger: Arc<Shared>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Sink {
    /// Binds `listen` and serves on the current runtime: any POST is a
    /// delivery, `GET /stats` answers the counts so far.
    pub async fn start(listen: SocketAddr, answer: Answer, expect: Option<Expect>) -> Result<Self> {
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("the sink cannot listen on {listen}"))?;
        let addr = listener.local_addr().context("the sink's address")?;
        let ledger = Arc::new(Shared(Mutex::new(Ledger::new(expect))));
        let app = Arc::new(App {
            ledger: Arc::clone(&ledger),
            answer,
        });
        let router = Router::new().route("/stats", get(stats)).fallback(hook).with_state(app);
        let listener = listener.tap_io(|tcp| {
            // Answers are small: send them at once.
            let _ = tcp.set_nodelay(true);
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        Ok(Self {
            addr,
            ledger,
            stop,
            task,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr><path>`, with a wildcard address (0.0.0.0, ::) replaced
    /// by loopback so that a local client can use it.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", reachable(self.addr))
    }

    /// The counters, shared with the request handlers.
    pub fn ledger(&self) -> &Arc<Shared> {
        &self.ledger
    }

    /// Stops accepting, lets requests in flight finish for a moment, then stops.
    pub async fn shutdown(self) -> Result<()> {
        let _ = self.stop.send(());
        let mut task = self.task;
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut task).await {
            Ok(joined) => joined
                .context("the sink server panicked")?
                .context("the sink server failed"),
            Err(_) => {
                // Slow answers (--delay-ms) or lingering connections: cut them.
                task.abort();
                Ok(())
            }
        }
    }
}

/// `addr` with a wildcard IP replaced by the loopback address of its family.
pub fn reachable(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// Any request but `GET /stats`: a POST is a delivery.
async fn hook(State(app): State<Arc<App>>, method: Method, headers: HeaderMap, body: Bytes) -> Response {
    let now_us = due::unix_us();
    if method != Method::POST {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, HeaderValue::from_static("POST"))],
            "POST jobs here; GET /stats for the counts\n",
        )
            .into_response();
    }
    match Delivery::parse(&headers, &body) {
        Ok(d) => {
            app.ledger.lock().record(d, now_us);
        }
        Err(why) => {
            let answer = json!({ "error": why }).to_string();
            app.ledger.lock().reject(why);
            return (StatusCode::BAD_REQUEST, json_type(), answer).into_response();
        }
    }
    if !app.answer.delay.is_zero() {
        tokio::time::sleep(app.answer.delay).await;
    }
    (app.answer.status, json_type(), app.answer.body.clone()).into_response()
}

/// `GET /stats`: the counts so far.
async fn stats(State(app): State<Arc<App>>) -> Response {
    let body = app.ledger.lock().stats_json().to_string();
    (StatusCode::OK, json_type(), body).into_response()
}

/// The `Content-Type: application/json` header.
fn json_type() -> [(header::HeaderName, HeaderValue); 1] {
    [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{Conn, Target};

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const BODY: &[u8] = br#"{"id":"t-7","topic":"t","body":{"id":"nested"},"attempt":2,"run_at":1700000000000}"#;

    #[test]
    fn ids_come_from_the_header_or_the_body() {
        let d = Delivery::parse(&headers(&[("X-DQ-Job-Id", "t-1"), ("X-DQ-Attempt", "3")]), BODY).unwrap();
        assert_eq!(
            d,
            Delivery {
                id: "t-1".into(),
                run_at_ms: Some(1_700_000_000_000),
                attempt: Some(3)
            }
        );
        // No header: the body's top-level id and attempt.
        let d = Delivery::parse(&HeaderMap::new(), BODY).unwrap();
        assert_eq!((d.id.as_str(), d.attempt), ("t-7", Some(2)));
        // Empty or unreadable headers are ignored.
        let d = Delivery::parse(&headers(&[("x-dq-job-id", " "), ("x-dq-attempt", "x")]), BODY).unwrap();
        assert_eq!((d.id.as_str(), d.attempt), ("t-7", Some(2)));
        // Escapes in the body's id are decoded.
        let d = Delivery::parse(&HeaderMap::new(), br#"{"id":"a\"b","run_at":5}"#).unwrap();
        assert_eq!((d.id.as_str(), d.run_at_ms, d.attempt), ("a\"b", Some(5), None));
        // A header id is enough, even when the body is not JSON.
        let d = Delivery::parse(&headers(&[("x-dq-job-id", "t-2")]), b"").unwrap();
        assert_eq!((d.id.as_str(), d.run_at_ms), ("t-2", None));

        for body in [&b""[..], b"[]", br#"{"run_at":1}"#, br#"{"id":""}"#, br#"{"id":7}"#] {
            assert!(Delivery::parse(&HeaderMap::new(), body).is_err(), "{body:?}");
        }
    }

    fn delivery(id: &str, run_at_ms: Option<i64>, attempt: u64) -> Delivery {
        Delivery {
            id: id.into(),
            run_at_ms,
            attempt: Some(attempt),
        }
    }

    #[test]
    fn ledger_counts_duplicates_and_lateness() {
        let mut l = Ledger::new(None);
        assert!(l.record(delivery("a", Some(1000), 1), 1_002_000)); // 1 s late
        assert!(!l.record(delivery("a", Some(1000), 2), 3_000_000)); // retried: 2 s late
        assert!(!l.record(delivery("a", Some(1000), 3), 4_000_000));
        assert!(l.record(delivery("b", Some(5000), 1), 4_500_000)); // early
        assert!(l.record(delivery("c", None, 1), 4_600_000));
        l.reject("no id".into());
        l.reject("later".into());
        assert_eq!((l.deliveries, l.unique, l.duplicates(), l.duplicate_ids), (5, 3, 2, 1));
        assert_eq!((l.retries, l.early, l.no_run_at), (2, 1, 1));
        assert_eq!((l.invalid, l.first_invalid.as_deref()), (2, Some("no id")));
        assert_eq!(
            (l.first_us, l.last_us, l.last_new_us),
            (Some(1_002_000), 4_600_000, 4_600_000)
        );
        assert_eq!((l.lateness.len(), l.first_lateness.len()), (4, 2));
        assert_eq!(l.lateness.max(), l.lateness.highest_equivalent(3_000_000));
        assert_eq!(l.first_lateness.min(), 1); // the early one, clamped
        assert_eq!((l.counts.get("a"), l.counts.get("z")), (Some(&3), None));
        assert_eq!(l.duplicate_sample(), ["a×3"]);
        // Without an expectation nothing is missing or unexpected.
        assert_eq!((l.missing(), l.unexpected, l.expected_unique), ((0, vec![]), 0, 0));
        let v = l.stats_json();
        assert_eq!((v["received"].as_u64(), v["duplicates"].as_u64()), (Some(5), Some(2)));
        assert_eq!(v["lateness"]["count"], 4);
        assert!(v.get("expected").is_none());
    }

    #[test]
    fn ledger_checks_expected_ids() {
        let mut l = Ledger::new(Some(Expect {
            topic: "t".into(),
            jobs: 4,
        }));
        for (id, at) in [
            ("t-0", 10),
            ("t-2", 20),
            ("t-2", 30),
            ("t-9", 40),
            ("u-1", 50),
            ("t-10", 60),
            ("t-10", 70),
        ] {
            l.record(delivery(id, Some(0), 1), at);
        }
        assert_eq!((l.unique, l.expected_unique, l.unexpected), (5, 2, 4));
        assert_eq!((l.duplicates(), l.duplicate_ids), (2, 2));
        // Only expected ids move the time of the last new job.
        assert_eq!(l.last_new_us, 20);
        assert_eq!(l.missing(), (2, vec!["t-1".to_string(), "t-3".to_string()]));
        assert_eq!(l.duplicate_sample(), ["t-2×2", "t-10×2"]);
        l.record(delivery("t-1", Some(0), 1), 80);
        l.record(delivery("t-3", Some(0), 1), 90);
        assert_eq!((l.expected_unique, l.missing(), l.last_new_us), (4, (0, vec![]), 90));
        assert_eq!(l.stats_json()["expected_unique"], 4);
    }

    #[test]
    fn wildcard_addresses_become_loopback() {
        let r = |s: &str| reachable(s.parse().unwrap()).to_string();
        assert_eq!(r("0.0.0.0:80"), "127.0.0.1:80");
        assert_eq!(r("[::]:80"), "[::1]:80");
        assert_eq!(r("10.1.2.3:80"), "10.1.2.3:80");
    }

    /// POSTs to a real sink with the bench's own client.
    #[tokio::test]
    async fn sink_serves_and_counts() {
        let answer = Answer {
            status: StatusCode::ACCEPTED,
            body: Bytes::from_static(b"{\"yes\":1}"),
            delay: Duration::from_millis(20),
        };
        let expect = Expect {
            topic: "t".into(),
            jobs: 3,
        };
        let sink = Sink::start("127.0.0.1:0".parse().unwrap(), answer, Some(expect))
            .await
            .unwrap();
        assert!(sink.url("/hook").starts_with("http://127.0.0.1:"));
        let target = Target::parse(&sink.url("")).unwrap();
        let mut conn = Conn::connect(Arc::clone(&target)).await.unwrap();
        let run_at = due::unix_ms() - 1000;
        for id in ["t-0", "t-1", "t-1"] {
            let body = format!(r#"{{"id":"{id}","topic":"t","body":{{}},"attempt":1,"run_at":{run_at}}}"#);
            let t0 = std::time::Instant::now();
            let reply = conn.post_json(target.uri("/hook").unwrap(), body.into()).await.unwrap();
            assert!(t0.elapsed() >= Duration::from_millis(20));
            assert_eq!(
                (reply.status, &reply.body[..]),
                (StatusCode::ACCEPTED, &b"{\"yes\":1}"[..])
            );
        }
        let reply = conn.post_json(target.uri("/x").unwrap(), "{}".into()).await.unwrap();
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        let reply = conn.get(target.uri("/hook").unwrap()).await.unwrap();
        assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
        let reply = conn.get(target.uri("/stats").unwrap()).await.unwrap();
        let v: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!((v["received"].as_u64(), v["unique"].as_u64()), (Some(3), Some(2)));
        assert_eq!((v["duplicates"].as_u64(), v["invalid"].as_u64()), (Some(1), Some(1)));

        let ledger = Arc::clone(sink.ledger());
        sink.shutdown().await.unwrap();
        let l = ledger.lock();
        assert_eq!(l.missing(), (1, vec!["t-2".to_string()]));
        // About a second late (the wall clock moved on a little since).
        let p = Percentiles::of(&l.lateness);
        assert!((1000.0..2000.0).contains(&p.p50_ms), "{p:?}");
    }
}
