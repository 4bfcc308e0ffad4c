//! A topic worker's share of its topic's delivery limits, which every dq-consumer shares through Redis
//! (`limit.lua`): `callback.concurrency` slots, the `callback.rate_per_s` token bucket, and a pause the
//! callback asked for with `Retry-After`.
//!
//! A worker holds slots on a lease and keeps them while it is busy, so a steady flow of deliveries asks
//! Redis nothing per job: it asks only when it has no free slot, when the topic has a rate limit (for
//! tokens), and once a [`RENEW`] to keep its lease, give back the slots it left idle, and learn of a
//! pause another worker was asked for. A worker that dies lets its slots go when its lease ends
//! ([`LEASE_MS`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq_core::Queue;
use dq_core::reservations::{LimitAsk, LimitGrant};
use dq_core::topic::Callback;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::plan::Plan;

/// How long a worker's slots stay held without a renewal. Short, so the slots of a consumer that died
/// serve the others soon; three renewals long, so one slow answer from Redis does not lose them.
pub const LEASE_MS: u64 = 3000;

/// How often a worker renews its lease (and gives back idle slots, and learns of pauses).
pub const RENEW: Duration = Duration::from_secs(1);

/// How long a worker waits before asking again when every slot is held elsewhere.
const NO_SLOT_WAIT: Duration = Duration::from_millis(100);

/// What a worker may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Start this many deliveries (at least 1).
    Start(u32),
    /// Start none; ask again after this long.
    Wait(Duration, &'static str),
}

/// What a worker knows of its share.
#[derive(Debug, Default)]
struct Share {
    /// Slots it holds in Redis.
    held: u32,
    /// Slots in use: deliveries whose request is running.
    in_use: u32,
    /// Its last reserve found nothing: its free slots go back at the next renewal.
    idle: bool,
    /// No delivery starts before this (the callback asked for a pause).
    paused_until: Option<Instant>,
}

/// One topic worker's share of the topic's limits.
pub struct Limiter {
    /// Where the limits are kept.
    queue: Queue,
    /// The topic.
    topic: String,
    /// This worker's name in the limits (the process's id and the topic are enough: one worker per
    /// topic per process).
    holder: String,
    /// What the worker holds and uses.
    share: Mutex<Share>,
}

impl Limiter {
    /// The share of the worker of `topic` in the process `process_id`.
    pub fn new(queue: Queue, topic: String, process_id: &str) -> Self {
        Limiter {
            queue,
            topic,
            holder: process_id.to_string(),
            share: Mutex::default(),
        }
    }

    fn share(&self) -> std::sync::MutexGuard<'_, Share> {
        self.share.lock().expect("never poisoned: no code panics holding it")
    }

    /// How many of `want` deliveries the worker may start now. Asks Redis only when it holds no free
    /// slot or the topic has a rate limit.
    pub async fn admit(&self, cb: &Callback, want: u32) -> dq_core::Result<Admit> {
        let (in_use, free) = {
            let s = self.share();
            if let Some(until) = s.paused_until {
                let now = Instant::now();
                if until > now {
                    return Ok(Admit::Wait(until - now, "paused"));
                }
            }
            (s.in_use, s.held.saturating_sub(s.in_use))
        };
        if cb.rate_per_s.is_none() && free > 0 {
            return Ok(Admit::Start(want.min(free)));
        }
        let grant = self.ask(cb, in_use, in_use + want, i64::from(want), 0).await?;
        Ok(match grant {
            LimitGrant {
                start: 0,
                paused: true,
                wait_ms,
                ..
            } => Admit::Wait(Duration::from_millis(wait_ms), "paused"),
            LimitGrant { start: 0, wait_ms, .. } if wait_ms > 0 => Admit::Wait(Duration::from_millis(wait_ms), "rate"),
            LimitGrant { start: 0, .. } => Admit::Wait(NO_SLOT_WAIT, "slots"),
            LimitGrant { start, .. } => Admit::Start(start),
        })
    }

    /// Counts `started` deliveries of the `admitted` ones (a reserve may find fewer jobs), and gives back
    /// the rate tokens of those that did not start.
    pub async fn started(&self, cb: &Callback, started: u32, admitted: u32) {
        let in_use = {
            let mut s = self.share();
            s.in_use += started;
            s.idle = started == 0;
            s.in_use
        };
        let unused = admitted.saturating_sub(started);
        if cb.rate_per_s.is_some() && unused > 0 {
            let held = self.share().held;
            if let Err(e) = self.ask(cb, in_use, held, -i64::from(unused), 0).await {
                tracing::debug!(topic = %self.topic, cause = %e.chain(), "cannot give back unused rate tokens");
            }
        }
    }

    /// A delivery's request ended: its slot is free for the next.
    pub fn finished(&self) {
        let mut s = self.share();
        s.in_use = s.in_use.saturating_sub(1);
    }

    /// The callback asked for no deliveries of the topic for `wait` (429 or 503 with `Retry-After`):
    /// this worker stops at once, the others at their next renewal or ask.
    pub async fn pause(&self, cb: &Callback, wait: Duration) {
        let pause_ms = wait.as_millis().max(1) as u64;
        {
            let mut s = self.share();
            let until = Instant::now() + wait;
            s.paused_until = Some(s.paused_until.map_or(until, |u| u.max(until)));
        }
        tracing::info!(topic = %self.topic, pause_ms, "the callback asked for a pause");
        metrics::counter!("dq_consumer_pauses_total", "topic" => self.topic.clone()).increment(1);
        let (in_use, held) = {
            let s = self.share();
            (s.in_use, s.held)
        };
        if let Err(e) = self.ask(cb, in_use, held, 0, pause_ms).await {
            tracing::warn!(topic = %self.topic, cause = %e.chain(), "cannot share the pause with the other consumers");
        }
    }

    /// Renews the lease every [`RENEW`], giving back the slots left idle, until `stop` and no delivery
    /// runs; then gives every slot back.
    pub async fn keep(self: Arc<Self>, mut plan: watch::Receiver<Arc<Plan>>, stop: CancellationToken) {
        loop {
            let last_delivery_ended = async {
                stop.cancelled().await;
                while self.share().in_use > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(RENEW) => {}
                _ = last_delivery_ended => {}
            }
            let cb = plan.borrow_and_update().callback().clone();
            let (in_use, hold) = {
                let s = self.share();
                (s.in_use, if s.idle { s.in_use } else { s.held })
            };
            let done = stop.is_cancelled() && in_use == 0;
            match self.ask(&cb, in_use, if done { 0 } else { hold }, 0, 0).await {
                Ok(_) if done => return,
                Ok(_) => {}
                Err(e) if done => {
                    tracing::debug!(topic = %self.topic, cause = %e.chain(), "cannot give slots back; they go when the lease ends");
                    return;
                }
                Err(e) => tracing::debug!(topic = %self.topic, cause = %e.chain(), "cannot renew the slots' lease"),
            }
        }
    }

    /// One call to `limit.lua`; keeps what it answers.
    async fn ask(
        &self,
        cb: &Callback,
        in_use: u32,
        hold: u32,
        start: i64,
        pause_ms: u64,
    ) -> dq_core::Result<LimitGrant> {
        let ask = LimitAsk {
            in_use,
            hold,
            start,
            concurrency: cb.concurrency,
            lease_ms: LEASE_MS,
            rate_per_s: cb.rate_per_s,
            burst: cb.burst_or_default(),
            pause_ms,
        };
        let grant = self.queue.reservations().limit(&self.topic, &self.holder, ask).await?;
        let mut s = self.share();
        s.held = grant.held;
        s.paused_until = grant
            .paused
            .then(|| Instant::now() + Duration::from_millis(grant.wait_ms));
        metrics::gauge!("dq_consumer_slots_held", "topic" => self.topic.clone()).set(f64::from(grant.held));
        Ok(grant)
    }
}
