//! Dead-job hooks (`callback.on_dead_url`): the per-partition set of hooks waiting to be sent, which
//! `events_take.lua` fills when dq-checker takes a death's event (see [`Queue::take_events`]), and the
//! verbs of the checker that sends them: take the due ones (claimed while they are sent), count a failed
//! try, forget a hook once it is sent or given up.

use super::Checker;
use crate::error::Result;
use crate::store::alerts;
use crate::store::scripts::dead_hooks_retry::{self, RetryReply};
use crate::store::scripts::dead_hooks_take;

/// One dead-job hook as the set holds it: `<failed tries> <died at ms> <topic> <id>` (topics and ids
/// hold no space).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadHook {
    /// The entry as stored: what the verbs below name it by.
    entry: String,
    /// Tries that failed so far.
    pub tries: u32,
    /// When the job went dead, Unix ms (Redis's clock): with the id, what names this death.
    pub died_at: i64,
    /// The job's topic, whose registration says where the hook goes.
    pub topic: String,
    /// The job's id.
    pub id: String,
}

impl DeadHook {
    /// Reads a stored entry; `None` when it is not one.
    pub fn parse(entry: &str) -> Option<DeadHook> {
        let mut parts = entry.splitn(4, ' ');
        let tries = parts.next()?.parse().ok()?;
        let died_at = parts.next()?.parse().ok()?;
        let topic = parts.next()?.to_string();
        let id = parts.next()?.to_string();
        (!topic.is_empty() && !id.is_empty() && !id.contains(' ')).then(|| DeadHook {
            entry: entry.to_string(),
            tries,
            died_at,
            topic,
            id,
        })
    }

    /// The entry as stored.
    pub fn entry(&self) -> &str {
        &self.entry
    }

    /// The entry once one more try failed.
    fn failed_once(&self) -> String {
        format!("{} {} {} {}", self.tries + 1, self.died_at, self.topic, self.id)
    }
}

impl Checker {
    /// Up to `max` of partition `p`'s hooks whose next try is due, earliest first, each claimed for
    /// `claim_ms` (it is due again then, unless [`Queue::dead_hook_failed`] or [`Queue::dead_hook_done`]
    /// came first), and how many hooks the partition holds (due or not). An entry that cannot be read is
    /// dropped with a warning.
    pub async fn take_dead_hooks(&self, p: u16, max: usize, claim_ms: u64) -> Result<(Vec<DeadHook>, u64)> {
        let taken = dead_hooks_take::call(&self.store, p, max, claim_ms).await?;
        let mut hooks = Vec::with_capacity(taken.due.len());
        for entry in taken.due {
            match DeadHook::parse(&entry) {
                Some(hook) => hooks.push(hook),
                None => {
                    tracing::warn!(partition = p, %entry, "dropping a dead-job hook entry that cannot be read");
                    alerts::forget_dead_hook(&self.store, p, &entry).await?;
                }
            }
        }
        Ok((hooks, taken.held))
    }

    /// A try of `hook` failed: it is tried again in `wait_ms`, one more failed try counted. False when
    /// the hook was no longer there (another checker sent or gave it up meanwhile).
    pub async fn dead_hook_failed(&self, p: u16, hook: &DeadHook, wait_ms: u64) -> Result<bool> {
        let reply = dead_hooks_retry::call(&self.store, p, hook.entry(), &hook.failed_once(), wait_ms).await?;
        Ok(reply == RetryReply::Scheduled)
    }

    /// `hook` was sent, given up or is not to be sent: it goes.
    pub async fn dead_hook_done(&self, p: u16, hook: &DeadHook) -> Result<()> {
        alerts::forget_dead_hook(&self.store, p, hook.entry()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_and_count_failed_tries() {
        let hook = DeadHook::parse("2 1700000000123 orders.close 01J:a-b").unwrap();
        assert_eq!(
            (hook.tries, hook.died_at, hook.topic.as_str(), hook.id.as_str()),
            (2, 1_700_000_000_123, "orders.close", "01J:a-b")
        );
        assert_eq!(hook.failed_once(), "3 1700000000123 orders.close 01J:a-b");
        for bad in ["", "x 1 t i", "0 1.7e+12 t i", "0 1 t", "0 1 t a b"] {
            assert_eq!(DeadHook::parse(bad), None, "{bad}");
        }
    }
}
