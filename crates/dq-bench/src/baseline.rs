//! `dq-bench baseline`: the bare push path, as a yardstick for dq-server on the same machine.
//!
//! Foundation's speed target compares dq-server with "a bare axum + redis-rs prototype of the push path".
//! This is that prototype, so the comparison can be run rather than remembered: `POST /v1/jobs` parses
//! `{topic, body, delay_ms?}`, makes a ULID and runs one EVALSHA (TIME, SET of topic, body and due time
//! packed with cmsgpack, as dq packs its records; ZADD) on one multiplexed connection, and answers 201 `{id, topic, state, run_at}` like dq-server. No
//! validation, no topic registry, no partitions, no counters, no wake-ups, no metrics. `push` can load it
//! exactly as it loads dq-server; `scripts/bench.sh` runs both in one run and prints the ratio.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use clap::Args;
use dq_api::{PushAnswer, PushRequest, State as JobState};

use crate::report::{Errors, Report, new_hist};
use crate::sink::StopSignal;

/// The whole push, in one script: due time from Redis's clock, the record, the delay set.
const PUSH: &str = r"
local t = redis.call('TIME')
local run_at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
redis.call('SET', KEYS[1], cmsgpack.pack({ARGV[1], ARGV[2], run_at}))
redis.call('ZADD', KEYS[2], run_at, ARGV[4])
return run_at
";

/// Flags of `dq-bench baseline`.
#[derive(Debug, Args)]
pub struct BaselineArgs {
    /// Redis to store the jobs in (keys under `baseline:`).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Address to serve `POST /v1/jobs` on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
}

#[derive(Clone)]
struct App {
    conn: redis::aio::MultiplexedConnection,
    script: Arc<redis::Script>,
}

async fn push(
    State(app): State<App>,
    Json(p): Json<PushRequest>,
) -> Result<(StatusCode, Json<PushAnswer>), StatusCode> {
    let id = ulid::Ulid::new().to_string();
    let mut conn = app.conn.clone();
    let run_at: i64 = app
        .script
        .key(format!("baseline:job:{id}"))
        .key("baseline:delayed")
        .arg(&p.topic)
        .arg(p.body.get())
        .arg(p.delay_ms.unwrap_or(0).max(0))
        .arg(&id)
        .invoke_async(&mut conn)
        .await
        .map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
    let answer = PushAnswer {
        id,
        topic: p.topic,
        state: JobState::Delayed,
        run_at,
        duplicate: false,
        coalesced: false,
        children: Vec::new(),
    };
    Ok((StatusCode::CREATED, Json(answer)))
}

/// Serves the prototype until SIGINT or SIGTERM.
pub async fn run(args: &BaselineArgs) -> Result<Report> {
    let mut signal = StopSignal::new()?;
    let client = redis::Client::open(args.redis.as_str()).with_context(|| format!("bad Redis URL {}", args.redis))?;
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("cannot reach Redis at {}", args.redis))?;
    let app = Router::new().route("/v1/jobs", post(push)).with_state(App {
        conn,
        script: Arc::new(redis::Script::new(PUSH)),
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    println!("baseline listening on http://{addr}");
    let started = Instant::now();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let name = signal.recv().await;
            eprintln!("baseline: {name}, stopping");
        })
        .await
        .context("serving")?;
    Ok(Report::new(
        "baseline",
        0,
        started.elapsed(),
        "none",
        &new_hist(),
        &Errors::default(),
    )
    .with("listen", addr.to_string())
    .with("redis", args.redis.clone()))
}
