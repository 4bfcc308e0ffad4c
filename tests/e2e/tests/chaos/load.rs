//! The load: the callback sink, the pushers and the pull workers.

use super::*;

/// How long the work on a job takes, 0 to `max_ms` - 1 ms by its id: deliveries and pull jobs are in
/// flight for a while, so that kills and Redis faults land between a delivery and its ack.
pub(crate) fn work_time(id: &str, max_ms: u64) -> Duration {
    // FNV-1a.
    let h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    Duration::from_millis(h % max_ms)
}

/// The callback: records each job's id (at `/hook`), or each item of a merged job with the job's id (at
/// `/merge`), takes up to 50 ms, answers 200 with a body (a delivery that succeeds). Its base URL.
pub(crate) async fn start_sink(shared: Arc<Shared>) -> String {
    let merging = shared.clone();
    let chaining = shared.clone();
    let app = axum::Router::new()
        .route(
            "/hook",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let shared = shared.clone();
                async move {
                    let id = body["id"].as_str().unwrap_or("<no id>");
                    shared.delivered(id, Via::Callback);
                    tokio::time::sleep(work_time(id, 50)).await;
                    r#"{"ok":true}"#
                }
            }),
        )
        .route(
            "/chain",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let shared = chaining.clone();
                async move {
                    let id = body["id"].as_str().unwrap_or("<no id>").to_string();
                    shared.delivered(&id, Via::Callback);
                    tokio::time::sleep(work_time(&id, 50)).await;
                    // The next steps, pushed with this delivery's success (docs/api.md).
                    let push: Vec<Value> = (0..KIDS)
                        .map(|k| {
                            json!({"topic": KID, "body": {"of": id, "k": k},
                                                                     "ttr_ms": TTR_MS, "max_attempts": 0})
                        })
                        .collect();
                    json!({"ok": true, "dq": {"push": push}}).to_string()
                }
            }),
        )
        .route(
            "/merge",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let shared = merging.clone();
                async move {
                    let id = body["id"].as_str().unwrap_or("<no id>");
                    let items: Vec<String> = body["body"]["items"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|i| i.as_str().unwrap_or("<not a string>").to_string())
                                .collect()
                        })
                        .unwrap_or_default();
                    shared.merged(id, &items);
                    tokio::time::sleep(work_time(id, 50)).await;
                    r#"{"ok":true}"#
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// One job the test pushes (for the merge topic, one item: its id is the push's, its key the job's).
pub(crate) struct Job {
    pub(crate) id: String,
    pub(crate) topic: &'static str,
    pub(crate) delay_ms: u64,
    /// The merge topic's coalescing key.
    pub(crate) merge_key: Option<String>,
    /// A push-topic job's flow key (in the job's own partition).
    pub(crate) flow_key: Option<String>,
}

/// Pushes jobs off the shared list, job `i` no earlier than `i / rate` s after the start, each until it is
/// acknowledged: a 503 or a broken connection is pushed again with the same id, and a 409 then means the
/// earlier attempt stored it (docs/api.md, Push).
pub(crate) async fn pusher(shared: Arc<Shared>, jobs: Arc<Vec<Job>>, next: Arc<AtomicUsize>, rate: f64, port: u16) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let began = Instant::now();
    loop {
        let i = next.fetch_add(1, Ordering::SeqCst);
        let Some(job) = jobs.get(i) else { return };
        tokio::time::sleep_until((began + Duration::from_secs_f64(i as f64 / rate)).into()).await;
        let body = match &job.merge_key {
            None => {
                let mut b = json!({
                    "id": job.id, "topic": job.topic, "body": {"n": i}, "delay_ms": job.delay_ms,
                    "ttr_ms": TTR_MS, "max_attempts": 0,
                });
                if let Some(k) = &job.flow_key {
                    b["flow_key"] = k.as_str().into();
                }
                b
            }
            // The item is its own push id; pushed again, it goes in once (docs/api.md, Coalescing).
            Some(key) => json!({
                "id": job.id, "topic": job.topic, "body": job.id, "coalesce_key": key,
                "coalesce": {"mode": "merge", "window_ms": MERGE_WINDOW_MS}, "ttr_ms": TTR_MS, "max_attempts": 0,
            }),
        };
        let mut history: Vec<(u64, u16)> = Vec::new();
        loop {
            let sent = Instant::now();
            let (status, out) = common::call(&http, port, "POST", "/v1/jobs", Some(body.clone())).await;
            history.push((shared.ms(), status));
            let stored = {
                let mut s = shared.push_stats.lock().unwrap();
                match status {
                    201 => {
                        s.created += 1;
                        true
                    }
                    // A merge item that went into its key's pending job.
                    200 if job.merge_key.is_some() && out["coalesced"] == true => {
                        s.coalesced += 1;
                        true
                    }
                    409 if history.len() > 1 => {
                        s.conflict_on_retry += 1;
                        true
                    }
                    409 => {
                        s.conflict_first.push(job.id.clone());
                        true
                    }
                    503 => {
                        s.unavailable += 1;
                        if let Some(id) = out["error"]["id"].as_str() {
                            s.unknown_outcome += 1;
                            if id != job.id {
                                s.wrong_id.push(format!("{} answered with id {id}", job.id));
                            }
                        }
                        false
                    }
                    0 => {
                        s.connection_errors += 1;
                        false
                    }
                    500 => {
                        s.internal += 1;
                        false
                    }
                    _ => panic!("push {}: unexpected answer {status} {out}", job.id),
                }
            };
            if stored {
                shared.push_ok.lock().unwrap().push((sent, Instant::now()));
                shared.pushed.lock().unwrap().insert(job.id.clone());
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if history.len() > 1 {
            shared.retried_pushes.lock().unwrap().insert(job.id.clone(), history);
        }
    }
}

/// A pull consumer over HTTP: long-poll reserves of the pull topic, each job recorded, worked on (up to
/// 20 ms) and acked. An ack
/// that gets no answer (or a 503) is sent again with the same receipt for 10 s; a 409 means the
/// reservation is over (the job comes back, or was acked by an earlier attempt).
pub(crate) async fn puller(shared: Arc<Shared>, port: u16) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    while !shared.stop_pulling.load(Ordering::SeqCst) {
        let (status, out) = common::call(
            &http,
            port,
            "POST",
            "/v1/reserve",
            Some(json!({"topics": [PULL, FAN_PULLED[0], FAN_PULLED[1]], "count": 10, "timeout_ms": 1000})),
        )
        .await;
        if status != 200 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        for job in out["jobs"].as_array().cloned().unwrap_or_default() {
            let id = job["id"].as_str().expect("a reserved job has an id").to_string();
            shared.delivered(&id, Via::Pull);
            tokio::time::sleep(work_time(&id, 20)).await;
            let receipt = job["receipt"].as_str().expect("a receipt");
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut tries = 0;
            loop {
                tries += 1;
                let (status, _) = common::call(
                    &http,
                    port,
                    "POST",
                    &format!("/v1/jobs/{id}/ack"),
                    Some(json!({"receipt": receipt})),
                )
                .await;
                let late = Instant::now() > deadline;
                let done = {
                    let mut a = shared.acks.lock().unwrap();
                    if tries > 1 {
                        a.retried += 1;
                    }
                    match status {
                        204 => a.acked += 1,
                        409 => a.stale += 1,
                        404 => a.not_found.push(id.clone()),
                        _ if late => a.gave_up += 1,
                        _ => {}
                    }
                    matches!(status, 204 | 409 | 404) || late
                };
                if done {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
