//! The timers' verbs: promote due jobs, end expired reservations, and the heartbeat that shares the
//! partitions among live timers.

use rand::Rng;

use super::Timer;
use crate::error::{Error, Result};
use crate::reservations::Waiting;
use crate::store::scripts;

/// What a promotion call did in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promoted {
    /// Jobs moved, to ready or handed to a waiting worker.
    pub moved: usize,
    /// Earliest due time left in the delay set, Unix ms (Redis's clock).
    pub next_due: Option<i64>,
    /// Redis's clock when the script ran, Unix ms.
    pub now: i64,
    /// Jobs handed to each waiting worker, in the order they were given.
    pub handed: Vec<u32>,
    /// For each moved job, how late it was moved (now − due), ms.
    pub lateness_ms: Vec<i64>,
}

/// What an expiry call did in one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    /// Jobs whose reservation expired and that went back to ready.
    pub to_ready: usize,
    /// Jobs whose reservation expired on their last attempt.
    pub to_dead: usize,
    /// Earliest deadline left, Unix ms.
    pub next_deadline: Option<i64>,
    /// Redis's clock when the script ran, Unix ms.
    pub now: i64,
}

/// A timer's share of the partitions after a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Balance {
    /// Redis's clock, Unix ms.
    pub now: i64,
    /// Live timers, this one included.
    pub timers: usize,
    /// Partitions this timer holds.
    pub partitions: Vec<u16>,
}

impl Timer {
    /// Moves up to `limit` due jobs of partition `p` to ready.
    pub async fn promote(&self, p: u16, limit: u32) -> Result<Promoted> {
        self.promote_for(p, limit, &[]).await
    }

    /// Moves up to `limit` due jobs of partition `p` to ready, or hands them, reserved, to the `waiting`
    /// workers of their topics (see [`super::handoff`]).
    pub async fn promote_for(&self, p: u16, limit: u32, waiting: &[Waiting]) -> Result<Promoted> {
        let keys = self.partition_keys(p);
        let mut inv = self.script(&scripts::PROMOTE).prepare_invoke();
        let nonce: u64 = rand::rng().random();
        inv.key(keys.delayed())
            .key(keys.counts())
            .key(keys.reserved())
            .key(keys.announced())
            .arg(keys.prefix())
            .arg(limit)
            .arg(keys.ready_channel())
            .arg(keys.timer_channel())
            .arg(format!("{nonce:016x}"));
        for w in waiting {
            inv.arg(&w.topic)
                .arg(keys.handoff_channel(&w.consumer))
                .arg(w.slots)
                .arg(w.least_ttr_ms);
        }
        let out: Vec<i64> = self.run(p, &inv).await?;
        let bad = || malformed(p, "promote");
        let (head, rest) = out.split_at_checked(4).ok_or_else(bad)?;
        let (handed, lateness) = rest.split_at_checked(head[3] as usize).ok_or_else(bad)?;
        if handed.len() != waiting.len() {
            return Err(bad());
        }
        Ok(Promoted {
            moved: head[0] as usize,
            next_due: (head[1] >= 0).then_some(head[1]),
            now: head[2],
            handed: handed.iter().map(|n| *n as u32).collect(),
            lateness_ms: lateness.to_vec(),
        })
    }

    /// Ends up to `limit` expired reservations of partition `p`.
    pub async fn expire(&self, p: u16, limit: u32) -> Result<Expired> {
        let keys = self.partition_keys(p);
        let mut inv = self.script(&scripts::EXPIRE).prepare_invoke();
        inv.key(keys.reserved())
            .key(keys.counts())
            .key(keys.events())
            .key(keys.announced())
            .arg(keys.prefix())
            .arg(limit)
            .arg(keys.ready_channel());
        let out: Vec<i64> = self.run(p, &inv).await?;
        if out.len() != 4 {
            return Err(malformed(p, "expire"));
        }
        if out[1] > 0 {
            self.activity.dead(out[1] as u64);
        }
        Ok(Expired {
            to_ready: out[0] as usize,
            to_dead: out[1] as usize,
            next_deadline: (out[2] >= 0).then_some(out[2]),
            now: out[3],
        })
    }

    /// A timer's heartbeat: returns Redis's clock, the number of live timers, and the partitions this
    /// timer holds now. `release` gives all of them up (drain).
    pub async fn balance(&self, timer_id: &str, lease_ms: u64, release: bool) -> Result<Balance> {
        let mut inv = scripts::BALANCE.prepare_invoke();
        inv.key(self.keys.timers())
            .key(self.keys.leases())
            .arg(timer_id)
            .arg(lease_ms)
            .arg(self.partitions.count())
            .arg(if release { "1" } else { "0" });
        let out: Vec<i64> = self.redis.invoke(&inv).await.map_err(|e| Error::from_redis(None, e))?;
        if out.len() < 2 {
            return Err(Error::Redis {
                partition: None,
                message: "balance returned too little".into(),
                source: None,
            });
        }
        Ok(Balance {
            now: out[0],
            timers: out[1] as usize,
            partitions: out[2..].iter().map(|b| *b as u16).collect(),
        })
    }
}

fn malformed(p: u16, what: &str) -> Error {
    Error::Redis {
        partition: Some(p),
        message: format!("{what} returned a malformed answer"),
        source: None,
    }
}
