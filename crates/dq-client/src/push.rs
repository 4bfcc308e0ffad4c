//! The push verbs: a job, or many in one request, pushed so that a try again cannot store it twice.

use dq_api::{BatchAnswer, BatchPushed, BatchRequest, ErrorBody, PushAnswer, PushResult};
use reqwest::Method;

use crate::client::{Client, decode};
use crate::error::{ApiError, Error};
use crate::jobs::{Job, PushRequest};
use crate::retry::Idempotence;

impl Client {
    /// `POST /v1/jobs`. A job without an id (and without a `dedup_key` or a `first` coalescing key, which
    /// exclude one) gets a ULID here, so that trying again after a time-out cannot make a second job: a
    /// try that finds the id stored answers with the stored job (for a `last` or `merge` push the id is
    /// the push's own, and a try again goes into its job once).
    ///
    /// A job with a `flow_key` (and neither a `dedup_key` nor a coalescing key) gets no id: dq makes it,
    /// in the key's place. Such a push is sent again only when its try surely did nothing, or when dq
    /// answers that it could not learn the outcome and names the id it made (`error.id`): the push is
    /// then sent again with that id, which finds the job if it was stored. A lost answer stays
    /// [`Error::Unknown`] (give a `dedup_key` to make such a push safe to send again).
    pub async fn push(&self, job: &PushRequest) -> Result<PushAnswer, Error> {
        let mut job = with_id(job);
        let idempotence = match id_made_by_dq(&job) {
            true => Idempotence::Unsafe,
            false => Idempotence::Safe,
        };
        match self.push_as(&job, idempotence, false).await {
            Err(Error::Api(e)) if id_made_by_dq(&job) && e.id.is_some() => {
                job.id = e.id;
                self.push_as(&job, Idempotence::Safe, true).await
            }
            answer => answer,
        }
    }

    /// Pushes `job` as it is; a conflict after an unknown outcome (this call's or, with `after_unknown`,
    /// an earlier call's) is looked up and answered with the stored job, when it is this push's.
    async fn push_as(
        &self,
        job: &PushRequest,
        idempotence: Idempotence,
        after_unknown: bool,
    ) -> Result<PushAnswer, Error> {
        let tried = self
            .send(Method::POST, self.at(&["v1", "jobs"]), Some(job), idempotence, None)
            .await;
        match tried.result {
            Ok(sent) => decode(sent),
            Err(e) if (after_unknown || tried.after_unknown) && e.is_code("conflict") => {
                match self.stored_as(job).await {
                    Some(stored) => Ok(PushAnswer {
                        id: stored.id,
                        topic: stored.topic,
                        state: stored.state,
                        run_at: stored.run_at,
                        duplicate: false,
                        coalesced: false,
                        children: stored.children,
                    }),
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The job that a push tried again found stored, if it is this push's.
    async fn stored_as(&self, job: &PushRequest) -> Option<Job> {
        let stored = self.get(job.id.as_deref()?).await.ok()?;
        (stored.topic == job.topic && stored.body == job.body).then_some(stored)
    }

    /// `POST /v1/jobs/batch`: one result per job, in order. Jobs without an id get one, as for
    /// [`Client::push`]. A batch with a job whose id dq makes (a `flow_key` without a `dedup_key` or a
    /// coalescing key) is sent again only when its try surely did nothing; an entry of such a job whose
    /// outcome dq could not learn is pushed again alone with the id dq named, as [`Client::push`] does.
    pub async fn push_many(&self, jobs: &[PushRequest]) -> Result<Vec<Result<BatchPushed, ApiError>>, Error> {
        let jobs: Vec<PushRequest> = jobs.iter().map(with_id).collect();
        let batch = BatchRequest {
            jobs: jobs.iter().collect(),
        };
        let idempotence = match jobs.iter().any(id_made_by_dq) {
            true => Idempotence::Unsafe,
            false => Idempotence::Safe,
        };
        let tried = self
            .send(
                Method::POST,
                self.at(&["v1", "jobs", "batch"]),
                Some(&batch),
                idempotence,
                None,
            )
            .await;
        let results = decode::<BatchAnswer>(tried.result?)?.results;
        let mut out = Vec::with_capacity(results.len());
        for (entry, job) in results.into_iter().zip(&jobs) {
            out.push(match entry {
                PushResult::Pushed(pushed) => Ok(pushed),
                PushResult::Failed(ErrorBody { error }) if id_made_by_dq(job) && error.id.is_some() => {
                    let again = PushRequest {
                        id: error.id.clone(),
                        ..job.clone()
                    };
                    match self.push_as(&again, Idempotence::Safe, true).await {
                        Ok(p) => Ok(BatchPushed {
                            id: p.id,
                            state: p.state,
                            run_at: p.run_at,
                            duplicate: p.duplicate,
                            coalesced: p.coalesced,
                            children: p.children,
                        }),
                        Err(Error::Api(e)) => Err(e),
                        // Not dq's answer this time: the entry's own error, with the id to push again with.
                        Err(_) => Err(ApiError::from_detail(error, 200)),
                    }
                }
                PushResult::Failed(ErrorBody { error }) => {
                    let e = ApiError::from_detail(error, 200);
                    let stored = match tried.after_unknown && e.code == "conflict" {
                        true => self.stored_as(job).await,
                        false => None,
                    };
                    match stored {
                        Some(stored) => Ok(BatchPushed {
                            id: stored.id,
                            state: stored.state,
                            run_at: stored.run_at,
                            duplicate: false,
                            coalesced: false,
                            children: stored.children,
                        }),
                        None => Err(e),
                    }
                }
            });
        }
        Ok(out)
    }
}

/// The job with an id: its own, or a fresh ULID (unless it deduplicates by key, which excludes an id,
/// or dq makes its id: [`id_made_by_dq`]).
fn with_id(job: &PushRequest) -> PushRequest {
    let mut job = job.clone();
    // A `first` coalescing key, like a `dedup_key`, excludes an id; with `last` and `merge` the id names
    // the push within its key, so that a try again goes in once.
    let first = job.coalesce.is_some_and(|c| c.mode == dq_api::CoalesceMode::First);
    if job.id.is_none() && job.dedup_key.is_none() && !first && !id_made_by_dq(&job) {
        job.id = Some(ulid::Ulid::new().to_string());
    }
    job
}

/// Whether dq makes the job's id, and the client may not: a job with a flow key lives in its key's
/// partition, so its id must be one dq made there (a ULID of the client's would be refused). A
/// deduplication or coalescing key has rules of its own.
fn id_made_by_dq(job: &PushRequest) -> bool {
    job.id.is_none() && job.flow_key.is_some() && job.dedup_key.is_none() && job.coalesce.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dq_api::{Coalesce, CoalesceMode};
    use serde_json::json;

    #[test]
    fn a_job_gets_a_ulid_unless_a_key_or_dq_gives_its_id() {
        let job = || PushRequest::new("t", json!(1));
        assert_eq!(with_id(&job()).id.map(|id| id.len()), Some(26));
        assert_eq!(with_id(&job().id("mine")).id.as_deref(), Some("mine"));
        assert_eq!(with_id(&job().dedup("k", 1000)).id, None);
        // A flow key: dq makes the id in the key's place.
        let keyed = job().flow_key("acme");
        assert!(id_made_by_dq(&keyed));
        assert_eq!(with_id(&keyed).id, None);
        // With a deduplication key the key's rules hold (no id, and a try again finds the first job).
        let deduped = job().flow_key("acme").dedup("k", 1000);
        assert!(!id_made_by_dq(&deduped));
        assert_eq!(with_id(&deduped).id, None);
        // A `merge` push names itself within its coalescing key, flow key or not.
        let merge = Coalesce {
            mode: CoalesceMode::Merge,
            window_ms: 1000,
            max_wait_ms: None,
            max_items: None,
        };
        let merged = job().flow_key("acme").coalesce("k", merge);
        assert!(!id_made_by_dq(&merged));
        assert!(with_id(&merged).id.is_some());
        // The id an earlier answer named for the key is sent as it is.
        assert!(!id_made_by_dq(&job().flow_key("acme").id("named")));
    }
}
