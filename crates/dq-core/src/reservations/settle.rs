//! Settling a reservation other than by an ack ([`super::ack`]): nack (fail: back off, or dead), touch
//! (extend) and release (hand back unfinished).

use redis::Value;

use super::Reservations;
use crate::error::{Error, Result};
use crate::job::State;
use crate::store::decode::{int, text};
use crate::store::scripts;

impl Reservations {
    /// Fails a reservation: the job backs off (by `delay_ms`, else `backoff_ms`, else the default
    /// schedule) or goes dead after its last attempt. Returns its new state and due time.
    pub async fn nack(
        &self,
        id: &str,
        receipt: &str,
        delay_ms: Option<u64>,
        error: Option<&str>,
        backoff_ms: Option<&[u64]>,
    ) -> Result<(State, i64)> {
        let p = self.partitions.of_id(id);
        let keys = self.partition_keys(p);
        let mut inv = self.script(&scripts::NACK).prepare_invoke();
        inv.key(keys.job(id))
            .key(keys.reserved())
            .key(keys.delayed())
            .key(keys.counts())
            .key(keys.events())
            .arg(keys.prefix())
            .arg(id)
            .arg(receipt)
            .arg(error.unwrap_or(""));
        match delay_ms {
            Some(d) => inv.arg(d),
            None => inv.arg(""),
        };
        inv.arg(keys.ready_channel()).arg(keys.timer_channel());
        for d in backoff_ms.unwrap_or(&self.defaults.backoff_ms) {
            inv.arg(*d);
        }
        let out: Vec<Value> = self.write(p, &inv).await?;
        match out.first().and_then(int) {
            Some(1) => {
                let state = out.get(1).and_then(text).and_then(|s| State::parse(&s));
                let run_at = out.get(2).and_then(int);
                let (Some(state), Some(run_at)) = (state, run_at) else {
                    return Err(Error::Redis {
                        partition: Some(p),
                        message: "nack returned a malformed answer".into(),
                        source: None,
                    });
                };
                // This process's next reserve must see the job it just made ready again.
                if let (State::Ready, Some(topic)) = (state, out.get(3).and_then(text)) {
                    self.ready.mark_own(&topic, p);
                }
                metrics::counter!("dq_jobs_nacked_total").increment(1);
                if state == State::Dead {
                    metrics::counter!("dq_jobs_dead_total").increment(1);
                    self.activity.dead(1);
                } else {
                    self.activity.failed();
                }
                Ok((state, run_at))
            }
            Some(0) => Err(Error::NotFound(id.to_string())),
            _ => Err(Error::StaleReceipt),
        }
    }

    /// Extends a reservation to now + `ttr_ms` (else the job's TTR); returns the new deadline.
    pub async fn touch(&self, id: &str, receipt: &str, ttr_ms: Option<u64>) -> Result<i64> {
        let p = self.partitions.of_id(id);
        let keys = self.partition_keys(p);
        let mut inv = self.script(&scripts::TOUCH).prepare_invoke();
        inv.key(keys.job(id))
            .key(keys.reserved())
            .key(keys.announced())
            .arg(id)
            .arg(receipt);
        match ttr_ms {
            Some(t) => inv.arg(t),
            None => inv.arg(""),
        };
        inv.arg(keys.timer_channel());
        match self.write::<i64>(p, &inv).await? {
            0 => Err(Error::NotFound(id.to_string())),
            -1 => Err(Error::StaleReceipt),
            deadline => Ok(deadline),
        }
    }

    /// Hands a reservation back unfinished: ready again at once, the delivery not counted.
    pub async fn release(&self, id: &str, receipt: &str) -> Result<()> {
        let p = self.partitions.of_id(id);
        let keys = self.partition_keys(p);
        let mut inv = self.script(&scripts::RELEASE).prepare_invoke();
        inv.key(keys.job(id))
            .key(keys.reserved())
            .key(keys.counts())
            .arg(keys.prefix())
            .arg(id)
            .arg(receipt)
            .arg(keys.ready_channel());
        match self.write::<i64>(p, &inv).await? {
            1 => Ok(()),
            0 => Err(Error::NotFound(id.to_string())),
            _ => Err(Error::StaleReceipt),
        }
    }
}
