//! Topics (and their flow keys), dead letters, schedules and stats.

use anyhow::Result;
use dq_client::{Client, Counts, DEFAULT_PRIORITY, ScheduleView, TopicView};

use crate::cli::{DeadCommand, DeadSelection, SchedulesCommand, TopicsCommand};
use crate::jobs::{attempts_cap, read_json};
use crate::output::{Output, fields, maybe_time, short, table, time};

/// `dq topics …`.
pub async fn topics(client: &Client, out: &Output, command: TopicsCommand) -> Result<()> {
    let topic = match command {
        TopicsCommand::Ls => {
            let topics = client.topics().await?;
            out.either(&serde_json::json!({ "topics": topics }), || {
                let rows = topics
                    .iter()
                    .map(|t| {
                        let mut row = vec![t.topic.clone(), kind(t).into()];
                        row.extend(count_cells(&t.counts));
                        row
                    })
                    .collect();
                println!("{}", table(&TOPIC_HEADERS, &COUNT_HEADERS, rows));
            });
            return Ok(());
        }
        TopicsCommand::Get { topic } => client.topic(&topic).await?,
        TopicsCommand::Put { topic, config } => {
            // Sent as given: dq checks it, unknown fields included.
            client
                .put_topic_json(&topic, &read_json(&config, "the registration")?)
                .await?
        }
        TopicsCommand::Rm { topic } => {
            client.delete_topic(&topic).await?;
            if !out.json {
                println!("{topic}: registration deleted (its jobs stay)");
            }
            return Ok(());
        }
        TopicsCommand::Flows { topic, limit } => return flows(client, out, &topic, limit).await,
        TopicsCommand::Pause { topic } => client.pause_topic(&topic).await?,
        TopicsCommand::Resume { topic } => client.resume_topic(&topic).await?,
    };
    out.either(&topic, || print_topic(&topic));
    Ok(())
}

const TOPIC_HEADERS: [&str; 6] = ["topic", "kind", "delayed", "ready", "reserved", "dead"];
const COUNT_HEADERS: [&str; 4] = ["delayed", "ready", "reserved", "dead"];

/// How a topic's jobs are consumed, in a word.
fn kind(t: &TopicView) -> &'static str {
    match &t.config {
        None => "unregistered",
        Some(c) if c.paused => "paused",
        Some(c) if c.callback.is_some() => "push",
        Some(_) => "pull",
    }
}

fn count_cells(c: &Counts) -> Vec<String> {
    [c.delayed, c.ready, c.reserved, c.dead]
        .iter()
        .map(i64::to_string)
        .collect()
}

fn print_topic(t: &TopicView) {
    let c = &t.counts;
    let mut pairs = vec![
        ("topic", t.topic.clone()),
        ("kind", kind(t).into()),
        (
            "counts",
            format!(
                "delayed {} · ready {} · reserved {} · dead {}",
                c.delayed, c.ready, c.reserved, c.dead
            ),
        ),
    ];
    if let Some(config) = &t.config {
        pairs.push(("config", serde_json::to_string_pretty(config).expect("JSON")));
    }
    println!("{}", fields(&pairs));
}

/// `dq topics flows TOPIC`: the busiest flow keys, and how many keys have ready jobs.
async fn flows(client: &Client, out: &Output, topic: &str, limit: u64) -> Result<()> {
    let flows = client.flow_keys(topic, limit).await?;
    out.either(&flows, || {
        if flows.keys == 0 {
            println!("no flow key of {topic} has ready jobs");
            return;
        }
        let rows = flows
            .busiest
            .iter()
            .map(|k| vec![k.key.clone(), k.ready.to_string(), k.reserved.to_string()])
            .collect();
        println!("{}", table(&["key", "ready", "reserved"], &["ready", "reserved"], rows));
        let plural = if flows.keys == 1 { "" } else { "s" };
        let shown = match flows.busiest.len() as u64 == flows.keys {
            true => String::new(),
            false => format!("; the {} busiest shown", flows.busiest.len()),
        };
        println!("{} flow key{plural} with ready jobs{shown}", flows.keys);
    });
    Ok(())
}

/// `dq jobs TOPIC --state S`.
pub async fn jobs(client: &Client, out: &Output, topic: &str, state: &str, offset: u64, limit: u64) -> Result<()> {
    let page = client.list_jobs(topic, state, offset, limit).await?;
    out.either(&page, || {
        let when = if state == "reserved" { "deadline" } else { "due" };
        // A priority column when a job has one other than the default, a flow key column when a job
        // has a key.
        let prioritized = page.jobs.iter().any(|j| j.priority != DEFAULT_PRIORITY);
        let keyed = page.jobs.iter().any(|j| j.flow_key.is_some());
        let rows = page
            .jobs
            .iter()
            .map(|j| {
                let at = if state == "reserved" {
                    j.deadline.unwrap_or(j.run_at)
                } else {
                    j.run_at
                };
                let mut row = vec![j.id.clone(), time(at)];
                if prioritized {
                    row.push(j.priority.to_string());
                }
                if keyed {
                    row.push(j.flow_key.clone().unwrap_or_default());
                }
                row.extend([
                    format!("{}/{}", j.attempts, attempts_cap(j.max_attempts)),
                    j.last_error.clone().unwrap_or_default(),
                    short(&j.body, 40),
                ]);
                row
            })
            .collect();
        let mut headers = vec!["id", when];
        if prioritized {
            headers.push("priority");
        }
        if keyed {
            headers.push("flow key");
        }
        headers.extend(["attempts", "last error", "body"]);
        println!("{}", table(&headers, &["priority"], rows));
        let partial = if page.complete {
            ""
        } else {
            " (may miss some: see docs/api.md)"
        };
        println!(
            "{} of {} {state} jobs from {offset}{partial}",
            page.jobs.len(),
            page.total
        );
    });
    Ok(())
}

/// `dq dead …`.
pub async fn dead(client: &Client, out: &Output, command: DeadCommand) -> Result<()> {
    match command {
        DeadCommand::Ls { topic, offset, limit } => {
            let page = client.dead(&topic, offset, limit).await?;
            out.either(&page, || {
                let rows = page
                    .jobs
                    .iter()
                    .map(|j| {
                        vec![
                            j.id.clone(),
                            format!("{}/{}", j.attempts, attempts_cap(j.max_attempts)),
                            j.last_error.clone().unwrap_or_default(),
                            short(&j.body, 40),
                        ]
                    })
                    .collect();
                println!("{}", table(&["id", "attempts", "last error", "body"], &[], rows));
                println!("{} of {} dead jobs from {offset}", page.jobs.len(), page.total);
            });
        }
        DeadCommand::Requeue(s) => {
            let n = client.requeue_dead(&s.topic, selection(&s)).await?;
            out.either(&serde_json::json!({ "requeued": n }), || println!("{n} requeued"));
        }
        DeadCommand::Rm(s) => {
            let n = client.delete_dead(&s.topic, selection(&s)).await?;
            out.either(&serde_json::json!({ "deleted": n }), || println!("{n} deleted"));
        }
    }
    Ok(())
}

fn selection(s: &DeadSelection) -> Option<&[String]> {
    (!s.all).then_some(s.ids.as_slice())
}

/// `dq schedules …`.
pub async fn schedules(client: &Client, out: &Output, command: SchedulesCommand) -> Result<()> {
    let schedule = match command {
        SchedulesCommand::Ls => {
            let list = client.schedules().await?;
            out.either(&serde_json::json!({ "schedules": list }), || {
                let rows = list
                    .iter()
                    .map(|s| {
                        vec![
                            s.name.clone(),
                            s.config.cron.clone(),
                            s.config.timezone.clone(),
                            s.config.topic.clone(),
                            maybe_time(s.next_fire_at),
                            maybe_time(s.last_fired_at),
                            paused(s).into(),
                        ]
                    })
                    .collect();
                println!(
                    "{}",
                    table(
                        &["name", "cron", "zone", "topic", "next fire", "last fired", "paused"],
                        &[],
                        rows
                    )
                );
            });
            return Ok(());
        }
        SchedulesCommand::Get { name } => client.schedule(&name).await?,
        SchedulesCommand::Put { name, config } => {
            client
                .put_schedule_json(&name, &read_json(&config, "the schedule")?)
                .await?
        }
        SchedulesCommand::Rm { name } => {
            client.delete_schedule(&name).await?;
            if !out.json {
                println!("{name} deleted");
            }
            return Ok(());
        }
        SchedulesCommand::Pause { name } => client.pause_schedule(&name).await?,
        SchedulesCommand::Resume { name } => client.resume_schedule(&name).await?,
    };
    out.either(&schedule, || {
        println!(
            "{}",
            fields(&[
                ("name", schedule.name.clone()),
                ("cron", schedule.config.cron.clone()),
                ("zone", schedule.config.timezone.clone()),
                ("topic", schedule.config.topic.clone()),
                ("next fire", maybe_time(schedule.next_fire_at)),
                ("last fired", maybe_time(schedule.last_fired_at)),
                ("paused", paused(&schedule).into()),
                ("body", schedule.config.body.to_string()),
            ])
        )
    });
    Ok(())
}

fn paused(s: &ScheduleView) -> &'static str {
    if s.config.paused { "yes" } else { "no" }
}

/// `dq stats`.
pub async fn stats(client: &Client, out: &Output) -> Result<()> {
    let stats = client.stats().await?;
    out.either(&stats, || {
        let r = &stats.redis;
        let nodes = r
            .nodes
            .iter()
            .map(|n| match (n.up, n.latency_ms) {
                (true, Some(ms)) => format!("{} up ({ms:.2} ms)", n.name),
                _ => format!("{} DOWN", n.name),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let down = if r.partitions_down.is_empty() {
            String::new()
        } else {
            format!(", {} down", r.partitions_down.len())
        };
        println!("redis: {} · {} partitions{down} · {nodes}", r.mode, r.partitions);
        let rows = stats
            .topics
            .iter()
            .map(|(name, c)| {
                let mut row = vec![name.clone()];
                row.extend(count_cells(c));
                row
            })
            .collect();
        println!(
            "{}",
            table(&["topic", "delayed", "ready", "reserved", "dead"], &COUNT_HEADERS, rows)
        );
        println!("at {}", time(dq_api::unix_ms()));
    });
    Ok(())
}
