//! `dq tail`: follows the topics live. Every `--every` it reads the counts (`GET /v1/stats`) and prints a
//! line for each topic whose counts moved, with the change since the last line; when a topic's dead
//! count grew, it reads the newest deaths (`GET /v1/topics/{topic}/dead`) and prints each with its last
//! error. The API has no event stream: what happens between two looks shows as its net effect on the
//! counts (a job pushed and delivered in between moves nothing).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use anyhow::Result;
use dq_api::unix_ms;
use dq_client::{Client, Counts};

use crate::cli::TailArgs;
use crate::output::{Output, time};

/// Most deaths read per topic per look.
const DEATHS_PER_LOOK: u64 = 1000;

/// Runs until interrupted (Ctrl-C).
pub async fn run(client: &Client, out: &Output, args: TailArgs) -> Result<()> {
    let wanted: HashSet<String> = args.topics.into_iter().collect();
    let mut last: BTreeMap<String, Counts> = BTreeMap::new();
    let mut first = true;
    let mut ticks = tokio::time::interval(Duration::from_millis(args.every.max(100)));
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = &mut interrupted => return Ok(()),
        }
        let stats = match client.stats().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{} cannot read stats: {e}", time(unix_ms()));
                continue;
            }
        };
        let at = unix_ms();
        for (topic, counts) in stats.topics {
            if !wanted.is_empty() && !wanted.contains(&topic) {
                continue;
            }
            let before = last.get(&topic).copied();
            if before == Some(counts) {
                continue;
            }
            print_counts(out, at, &topic, &counts, before.filter(|_| !first));
            let grew = before.map_or(0, |b| counts.dead.saturating_sub(b.dead));
            if grew > 0 && !first {
                print_deaths(client, out, at, &topic, counts.dead, grew).await;
            }
            last.insert(topic, counts);
        }
        first = false;
    }
}

fn print_counts(out: &Output, at: i64, topic: &str, now: &Counts, before: Option<Counts>) {
    if out.json {
        let line = serde_json::json!({"at": at, "topic": topic, "counts": now, "before": before});
        println!("{line}");
        return;
    }
    let cell = |name: &str, n: i64, b: Option<i64>| match b {
        Some(b) if b != n => format!("{name} {n} ({:+})", n - b),
        _ => format!("{name} {n}"),
    };
    println!(
        "{} {topic}: {} · {} · {} · {}",
        time(at),
        cell("delayed", now.delayed, before.map(|b| b.delayed)),
        cell("ready", now.ready, before.map(|b| b.ready)),
        cell("reserved", now.reserved, before.map(|b| b.reserved)),
        cell("dead", now.dead, before.map(|b| b.dead)),
    );
}

/// Prints the `grew` newest deaths of `topic` (the dead list is oldest first).
async fn print_deaths(client: &Client, out: &Output, at: i64, topic: &str, total: i64, grew: i64) {
    let take = (grew as u64).min(DEATHS_PER_LOOK);
    match client
        .dead(topic, (total.max(0) as u64).saturating_sub(take), take)
        .await
    {
        Ok(page) => {
            for job in page.jobs {
                if out.json {
                    println!("{}", serde_json::json!({"at": at, "event": "dead", "job": job}));
                } else {
                    println!(
                        "{} {topic}: DEAD {} after {} attempts: {}",
                        time(at),
                        job.id,
                        job.attempts,
                        job.last_error.as_deref().unwrap_or("-")
                    );
                }
            }
        }
        Err(e) => eprintln!("{} cannot read {topic}'s dead list: {e}", time(at)),
    }
}
