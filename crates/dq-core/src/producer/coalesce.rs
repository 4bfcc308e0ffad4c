//! Pushes of a `last` or `merge` coalescing key (see [`crate::coalesce`]): one `coalesce.lua` call each,
//! in the partition the topic and key hash to, so that every push of the key meets its pending job
//! there, atomically.
//!
//! A call whose outcome is unknown is sent again the same way (invariant 8): the same push id and the
//! same id for a new job, to the same partition; `coalesce.lua` recognises the push by its id, so it goes
//! in once however the attempts interleave.

use std::time::Duration;

use super::Producer;
use crate::coalesce::Coalescing;
use crate::error::{Error, Result};
use crate::job::{NewJob, Pushed, State};
use crate::store::scripts::coalesce::{self, Outcome};

/// Waits before sending a push again after an unknown outcome.
const RETRY_WAITS_MS: [u64; 3] = [100, 200, 400];

impl Producer {
    /// Pushes `job`, which has a `last` or `merge` coalescing `c`.
    pub(crate) async fn push_coalesced(&self, job: &NewJob, c: &Coalescing) -> Result<Pushed> {
        // A job of a flow key lives where the key does: its coalescing key is then one within the flow key.
        let p = self
            .partitions
            .of_key(&job.topic, job.flow_key.as_ref().unwrap_or(&c.key));
        let push_id = c.push_id.clone().unwrap_or_else(|| self.partitions.fresh_in(p));
        let new_id = self.partitions.fresh_in(p);
        let limit = self.limits().max_body_bytes;
        let mut tries = 0;
        let reply = loop {
            match coalesce::call(&self.store, p, job, c, &push_id, &new_id, limit).await {
                Ok(reply) => break reply,
                Err(e)
                    if (e.did_not_run() || matches!(e, Error::Indeterminate { .. }))
                        && tries < RETRY_WAITS_MS.len() =>
                {
                    tokio::time::sleep(Duration::from_millis(RETRY_WAITS_MS[tries])).await;
                    tries += 1;
                }
                Err(Error::Indeterminate { partition, source, .. }) => {
                    // The answer names the push's id, as a push's names its job's: to push again with.
                    return Err(Error::Indeterminate {
                        partition,
                        id: Some(push_id.clone()),
                        reason: format!(
                            "the push's outcome is unknown; push again with \"id\": \"{push_id}\" (the push's id within \
                             its coalesce_key: it then goes in once)"
                        ),
                        source,
                    });
                }
                Err(e) => return Err(e),
            }
        };
        let state = reply.state.unwrap_or(State::Done);
        if state == State::Ready {
            self.ready.mark_own(&job.topic, p);
        }
        let coalesced = reply.outcome != Outcome::New;
        let mode = c.mode.as_str();
        if coalesced {
            metrics::counter!("dq_jobs_coalesced_total", "topic" => job.topic.clone(), "mode" => mode).increment(1);
        } else {
            metrics::counter!("dq_jobs_pushed_total", "topic" => job.topic.clone()).increment(1);
            self.activity.pushed(1);
        }
        Ok(Pushed {
            id: reply.id,
            state,
            run_at: reply.run_at,
            duplicate: false,
            coalesced,
            children: Vec::new(),
        })
    }
}
