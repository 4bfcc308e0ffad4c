//! Hooks: the per-partition sets of hooks waiting to be sent, one per kind ([`HookKind`]), and the
//! verbs of the checker that sends them: take the due ones (claimed while they are sent), count a failed
//! try, forget a hook once it is sent or given up.
//!
//! A dead-job hook (`callback.on_dead_url`) is queued by `events_take.lua` when dq-checker takes a
//! death's event (see [`Checker::take_events`]); a success hook (`callback.on_success_url`) by the
//! `ack.lua` call that acks a delivered job, which stores the callback's answer beside it
//! ([`crate::store::keys::PartitionKeys::answer`]) for the hook to carry.

use super::Checker;
use crate::error::Result;
use crate::store::alerts;
use crate::store::keys::PartitionKeys;
use crate::store::scripts::hooks_retry::{self, RetryReply};
use crate::store::scripts::hooks_take;

/// What a hook tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookKind {
    /// A job went dead: POSTed to `callback.on_dead_url`.
    Dead,
    /// A job was delivered: POSTed to `callback.on_success_url`, with the callback's answer.
    Success,
}

impl HookKind {
    /// Both kinds.
    pub const ALL: [HookKind; 2] = [HookKind::Dead, HookKind::Success];

    /// The partition's set of hooks of this kind.
    pub(crate) fn key(self, keys: &PartitionKeys) -> String {
        match self {
            HookKind::Dead => keys.dead_hooks(),
            HookKind::Success => keys.success_hooks(),
        }
    }

    /// Its name in metrics, logs and the `X-DQ-Event` header: `dead` or `success`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookKind::Dead => "dead",
            HookKind::Success => "success",
        }
    }
}

/// One hook as its set holds it: `<failed tries> <at ms> <topic> <id>` (topics and ids hold no space).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// The entry as stored: what the verbs below name it by.
    entry: String,
    /// Tries that failed so far.
    pub tries: u32,
    /// When the job went dead or was acked, Unix ms (Redis's clock): with the id, what names the event.
    pub at: i64,
    /// The job's topic, whose registration says where the hook goes.
    pub topic: String,
    /// The job's id.
    pub id: String,
}

impl Hook {
    /// Reads a stored entry; `None` when it is not one.
    pub fn parse(entry: &str) -> Option<Hook> {
        let mut parts = entry.splitn(4, ' ');
        let tries = parts.next()?.parse().ok()?;
        let at = parts.next()?.parse().ok()?;
        let topic = parts.next()?.to_string();
        let id = parts.next()?.to_string();
        (!topic.is_empty() && !id.is_empty() && !id.contains(' ')).then(|| Hook {
            entry: entry.to_string(),
            tries,
            at,
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
        format!("{} {} {} {}", self.tries + 1, self.at, self.topic, self.id)
    }
}

impl Checker {
    /// Up to `max` of partition `p`'s hooks of `kind` whose next try is due, earliest first, each claimed
    /// for `claim_ms` (it is due again then, unless [`Checker::hook_failed`] or [`Checker::hook_done`]
    /// came first), and how many hooks of the kind the partition holds (due or not). An entry that
    /// cannot be read is dropped with a warning.
    pub async fn take_hooks(&self, kind: HookKind, p: u16, max: usize, claim_ms: u64) -> Result<(Vec<Hook>, u64)> {
        let taken = hooks_take::call(&self.store, p, kind, max, claim_ms).await?;
        let mut hooks = Vec::with_capacity(taken.due.len());
        for entry in taken.due {
            match Hook::parse(&entry) {
                Some(hook) => hooks.push(hook),
                None => {
                    tracing::warn!(partition = p, %entry, kind = kind.as_str(), "dropping a hook entry that cannot be read");
                    alerts::forget_hook(&self.store, p, kind.key(self.store.partition_keys(p)), &entry).await?;
                }
            }
        }
        Ok((hooks, taken.held))
    }

    /// A try of `hook` failed: it is tried again in `wait_ms`, one more failed try counted. False when
    /// the hook was no longer there (another checker sent or gave it up meanwhile).
    pub async fn hook_failed(&self, kind: HookKind, p: u16, hook: &Hook, wait_ms: u64) -> Result<bool> {
        let reply = hooks_retry::call(&self.store, p, kind, hook.entry(), &hook.failed_once(), wait_ms).await?;
        Ok(reply == RetryReply::Scheduled)
    }

    /// `hook` was sent, given up or is not to be sent: it goes (a success hook with the answer it kept).
    /// The answer goes first, so none outlives its hook: a checker that dies between the two leaves a
    /// hook without its answer, which the next try drops.
    pub async fn hook_done(&self, kind: HookKind, p: u16, hook: &Hook) -> Result<()> {
        let keys = self.store.partition_keys(p);
        if kind == HookKind::Success {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(keys.answer(&hook.id));
            self.store.query::<i64>(p, &cmd).await?;
        }
        alerts::forget_hook(&self.store, p, kind.key(keys), hook.entry()).await
    }

    /// The callback's answer a success hook carries (JSON `{status, headers, body}`), as the ack stored
    /// it; `None` once it is gone.
    pub async fn success_answer(&self, p: u16, id: &str) -> Result<Option<String>> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(self.store.partition_keys(p).answer(id));
        self.store.query(p, &cmd).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_and_count_failed_tries() {
        let hook = Hook::parse("2 1700000000123 orders.close 01J:a-b~0").unwrap();
        assert_eq!(
            (hook.tries, hook.at, hook.topic.as_str(), hook.id.as_str()),
            (2, 1_700_000_000_123, "orders.close", "01J:a-b~0")
        );
        assert_eq!(hook.failed_once(), "3 1700000000123 orders.close 01J:a-b~0");
        for bad in ["", "x 1 t i", "0 1.7e+12 t i", "0 1 t", "0 1 t a b"] {
            assert_eq!(Hook::parse(bad), None, "{bad}");
        }
    }
}
