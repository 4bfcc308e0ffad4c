//! Quarantined records (see `dq_core::admin::quarantine`): each round, their number as a metric and an
//! alert when it grows; on demand, `dq-checker quarantine ls|drop|restore`.

use anyhow::Context as _;
use dq_core::{Queue, Settings};

use crate::alert::{Alert, Notifier};

/// Publishes `dq_quarantined_jobs` and raises a `quarantined` alert when more records are quarantined
/// than when the last one was sent.
pub(crate) async fn check(queue: &Queue, notifier: &Notifier, memory: &mut crate::Memory) {
    let n = queue.admin().quarantined_count().await;
    metrics::gauge!("dq_quarantined_jobs").set(n as f64);
    let sent: u64 = memory.sent.get(FIELD).and_then(|v| v.parse().ok()).unwrap_or(0);
    if n < sent {
        // Fewer now (dropped or restored): the next growth is measured from here.
        memory.sent.insert(FIELD.into(), n.to_string());
        if memory.leader {
            let _ = queue.checker().set_alert_sent(FIELD, &n.to_string()).await;
        }
    }
    if n > sent {
        let sample: Vec<serde_json::Value> = match queue.admin().quarantined().await {
            Ok(all) => all
                .iter()
                .take(20)
                .map(|q| serde_json::json!({"id": q.id, "partition": q.partition, "source": q.source, "at": q.at}))
                .collect(),
            Err(_) => Vec::new(),
        };
        let mut alert = Alert::new(
            "quarantined",
            "warning",
            format!(
                "{n} job record(s) could not be decoded and are quarantined; list them with `dq-checker quarantine ls`"
            ),
        );
        alert.details = serde_json::json!({ "count": n, "records": sample });
        crate::raise(queue, notifier, memory, FIELD, &n.to_string(), alert).await;
    }
}

/// The alert state: the quarantine's size when the last alert went out.
const FIELD: &str = "quarantined";

/// What `dq-checker quarantine` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// List every quarantined record as JSON lines: partition, id, when, where it was found, its raw
    /// bytes in hex.
    Ls,
    /// Delete quarantined records for good.
    Drop {
        /// The jobs' ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Put quarantined records back as job records, and their ids in the structure they were found in
    /// (one that still cannot be decoded is quarantined again at its next read).
    Restore {
        /// The jobs' ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

/// Runs `dq-checker quarantine …`; prints JSON lines.
pub async fn run(settings: &Settings, command: Command) -> anyhow::Result<()> {
    let queue = Queue::connect(settings)
        .await
        .context("cannot open the queue in Redis")?;
    match command {
        Command::Ls => {
            for q in queue.admin().quarantined().await? {
                println!("{}", serde_json::to_string(&q)?);
            }
        }
        Command::Drop { ids } => {
            for id in ids {
                let dropped = queue.admin().drop_quarantined(&id).await?;
                println!("{}", serde_json::json!({"id": id, "dropped": dropped}));
            }
        }
        Command::Restore { ids } => {
            for id in ids {
                let restored = queue.admin().restore_quarantined(&id).await;
                let line = match &restored {
                    Ok(()) => serde_json::json!({"id": id, "restored": true}),
                    Err(e) => serde_json::json!({"id": id, "restored": false, "error": e.to_string()}),
                };
                println!("{line}");
            }
        }
    }
    Ok(())
}
