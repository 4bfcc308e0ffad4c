//! The job verbs: push, get (with the job's attempts), cancel, reschedule, reserve, ack, nack, touch.

use std::io::Read;

use anyhow::{Context, Result, bail};
use dq_client::{Client, Coalesce, CoalesceMode, Job, Nack, PushRequest, RescheduleRequest, ReserveRequest, When};
use serde_json::Value;

use crate::attempts::attempts_table;
use crate::cli::{Command, ModeArg};
use crate::output::{Output, fields, maybe_time, short, table, time};

/// Runs a job verb.
pub async fn run(client: &Client, out: &Output, command: Command) -> Result<()> {
    match command {
        Command::Push(a) => {
            let a = *a;
            let mut job = PushRequest::new(a.topic, read_json(&a.body, "the body")?);
            job.id = a.id;
            if let Some(ms) = a.when.delay {
                job = job.delay_ms(ms);
            }
            if let Some(at) = a.when.at {
                job = job.run_at(at);
            }
            if let Some(ms) = a.ttr {
                job = job.ttr_ms(ms);
            }
            if let Some(n) = a.max_attempts {
                job = job.max_attempts(n);
            }
            if let Some(p) = a.priority {
                job = job.priority(p);
            }
            if let Some(key) = a.flow_key {
                job = job.flow_key(key);
            }
            if let Some(traceparent) = a.traceparent {
                job = job.trace(traceparent, a.tracestate);
            }
            if let (Some(key), Some(window)) = (a.dedup_key, a.dedup_window) {
                job = job.dedup(key, window);
            }
            if let (Some(key), Some(mode), Some(window)) = (a.coalesce_key, a.coalesce, a.window) {
                let wide = |ms: u64| i64::try_from(ms).unwrap_or(i64::MAX);
                let mode = match mode {
                    ModeArg::First => CoalesceMode::First,
                    ModeArg::Last => CoalesceMode::Last,
                    ModeArg::Merge => CoalesceMode::Merge,
                };
                job = job.coalesce(
                    key,
                    Coalesce {
                        mode,
                        window_ms: wide(window),
                        max_wait_ms: a.max_wait.map(wide),
                        max_items: a.max_items.map(i64::from),
                    },
                );
            }
            let pushed = client.push(&job).await?;
            out.either(&pushed, || {
                let dup = if pushed.duplicate {
                    " (a duplicate: the job pushed first)"
                } else if pushed.coalesced {
                    " (coalesced: into the key's pending job)"
                } else {
                    ""
                };
                println!("{} {} due {}{dup}", pushed.id, pushed.state, time(pushed.run_at));
            });
        }
        Command::Get { id, attempts } => get(client, out, &id, attempts).await?,
        Command::Cancel { id } => {
            client.cancel(&id).await?;
            if !out.json {
                println!("{id} deleted");
            }
        }
        Command::Reschedule { id, when, priority } => {
            let mut request = match (when.delay, when.at) {
                (Some(ms), _) => RescheduleRequest::from(When::DelayMs(ms)),
                (_, Some(at)) => RescheduleRequest::from(When::RunAt(at)),
                _ => RescheduleRequest::default(),
            };
            request.priority = priority.map(i64::from);
            if request == RescheduleRequest::default() {
                bail!("give --delay, --at or --priority");
            }
            let job = client.patch(&id, &request).await?;
            out.either(&job, || {
                println!(
                    "{} {} due {} priority {}",
                    job.id,
                    job.state,
                    time(job.run_at),
                    job.priority
                )
            });
        }
        Command::Reserve { topics, count, wait } => {
            let jobs = client
                .reserve(&ReserveRequest::new(topics).count(count).wait_ms(wait))
                .await?;
            out.either(&serde_json::json!({ "jobs": jobs }), || {
                if jobs.is_empty() {
                    println!("no job");
                    return;
                }
                // A flow key column only when a job has one.
                let keyed = jobs.iter().any(|j| j.flow_key.is_some());
                let rows = jobs
                    .iter()
                    .map(|j| {
                        let mut row = vec![j.id.clone(), j.topic.clone()];
                        if keyed {
                            row.push(j.flow_key.clone().unwrap_or_default());
                        }
                        row.extend([
                            j.attempt.to_string(),
                            j.receipt.clone(),
                            time(j.deadline),
                            short(&j.body, 60),
                        ]);
                        row
                    })
                    .collect();
                let mut headers = vec!["id", "topic"];
                if keyed {
                    headers.push("flow key");
                }
                headers.extend(["attempt", "receipt", "deadline", "body"]);
                println!("{}", table(&headers, &["attempt"], rows));
            });
        }
        Command::Ack {
            id,
            receipt,
            push: None,
            ..
        } => {
            client.ack(&id, &receipt).await?;
            if !out.json {
                println!("{id} done");
            }
        }
        Command::Ack {
            id,
            receipt,
            push: Some(push),
            ..
        } => {
            let jobs: Vec<PushRequest> = serde_json::from_value(read_json(&push, "--push")?)
                .map_err(|e| anyhow::anyhow!("--push: a JSON array of push requests is needed: {e}"))?;
            let pushed = client.ack_pushing(&id, &receipt, &jobs).await?;
            out.either(&pushed, || {
                println!("{id} done");
                for j in &pushed {
                    println!("pushed {} ({})", j.id, j.topic);
                }
            });
        }
        Command::Nack {
            id,
            receipt,
            delay,
            error,
            ..
        } => {
            client.nack(&id, &receipt, &Nack { delay_ms: delay, error }).await?;
            if !out.json {
                println!("{id} failed (see `dq get {id}` for what comes next)");
            }
        }
        Command::Touch { id, receipt, ttr } => {
            let deadline = client.touch(&id, &receipt, ttr).await?;
            out.either(&serde_json::json!({ "deadline": deadline }), || {
                println!("{id} reserved until {}", time(deadline))
            });
        }
        other => unreachable!("not a job verb: {other:?}"),
    }
    Ok(())
}

/// `dq get`: the job, and with `--attempts` its attempts below it. With `--json` and `--attempts`, the
/// attempts' JSON alone: one document, which `jq` can read (the job's is `dq get --json`).
async fn get(client: &Client, out: &Output, id: &str, attempts: bool) -> Result<()> {
    if !attempts {
        let job = client.get(id).await?;
        out.either(&job, || println!("{}", job_fields(&job)));
    } else if out.json {
        out.json(&client.attempts(id).await?);
    } else {
        let (job, attempts) = tokio::try_join!(client.get(id), client.attempts(id))?;
        println!("{}\n\n{}", job_fields(&job), attempts_table(&attempts));
    }
    Ok(())
}

/// A job as `name value` lines.
pub fn job_fields(job: &Job) -> String {
    let mut pairs = vec![
        ("id", job.id.clone()),
        ("topic", job.topic.clone()),
        ("state", job.state.to_string()),
        ("run_at", time(job.run_at)),
        ("priority", job.priority.to_string()),
    ];
    if let Some(key) = &job.flow_key {
        pairs.push(("flow_key", key.clone()));
    }
    pairs.extend([
        (
            "attempts",
            format!("{} of {}", job.attempts, attempts_cap(job.max_attempts)),
        ),
        ("ttr_ms", job.ttr_ms.to_string()),
        ("created_at", time(job.created_at)),
    ]);
    if job.deadline.is_some() {
        pairs.push(("deadline", maybe_time(job.deadline)));
    }
    if job.retry_until.is_some() {
        pairs.push(("retry_until", maybe_time(job.retry_until)));
    }
    if let Some(e) = &job.last_error {
        pairs.push(("last_error", e.clone()));
    }
    if let Some(parent) = &job.parent {
        pairs.push(("parent", parent.clone()));
    }
    for child in &job.children {
        let state = child.state.map_or("gone".to_string(), |s| s.to_string());
        pairs.push(("child", format!("{} ({}, {state})", child.id, child.topic)));
    }
    if let Some(t) = &job.traceparent {
        pairs.push(("traceparent", t.clone()));
    }
    if let Some(t) = &job.tracestate {
        pairs.push(("tracestate", t.clone()));
    }
    pairs.push(("body", job.body.to_string()));
    fields(&pairs)
}

/// `max_attempts` for people: 0 is unlimited.
pub fn attempts_cap(max: u32) -> String {
    if max == 0 { "unlimited".into() } else { max.to_string() }
}

/// JSON from an argument: the text itself, `@file` for a file's, `-` for standard input's.
pub fn read_json(arg: &str, what: &str) -> Result<Value> {
    let text = if arg == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read standard input")?;
        s
    } else if let Some(path) = arg.strip_prefix('@') {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?
    } else {
        arg.to_string()
    };
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{what} is not JSON (a string must be quoted, e.g. '\"hello\"'; `@file` reads a file, `-` standard input)"
        )
    })
}
