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
    pub async fn push(&self, job: &PushRequest) -> Result<PushAnswer, Error> {
        let job = with_id(job);
        let tried = self
            .send(
                Method::POST,
                self.at(&["v1", "jobs"]),
                Some(&job),
                Idempotence::Safe,
                None,
            )
            .await;
        match tried.result {
            Ok(sent) => decode(sent),
            Err(e) if tried.after_unknown && e.is_code("conflict") => match self.stored_as(&job).await {
                Some(stored) => Ok(PushAnswer {
                    id: stored.id,
                    topic: stored.topic,
                    state: stored.state,
                    run_at: stored.run_at,
                    duplicate: false,
                    coalesced: false,
                }),
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// The job that a push tried again found stored, if it is this push's.
    async fn stored_as(&self, job: &PushRequest) -> Option<Job> {
        let stored = self.get(job.id.as_deref()?).await.ok()?;
        (stored.topic == job.topic && stored.body == job.body).then_some(stored)
    }

    /// `POST /v1/jobs/batch`: one result per job, in order. Jobs without an id get one, as for
    /// [`Client::push`].
    pub async fn push_many(&self, jobs: &[PushRequest]) -> Result<Vec<Result<BatchPushed, ApiError>>, Error> {
        let jobs: Vec<PushRequest> = jobs.iter().map(with_id).collect();
        let batch = BatchRequest {
            jobs: jobs.iter().collect(),
        };
        let tried = self
            .send(
                Method::POST,
                self.at(&["v1", "jobs", "batch"]),
                Some(&batch),
                Idempotence::Safe,
                None,
            )
            .await;
        let results = decode::<BatchAnswer>(tried.result?)?.results;
        let mut out = Vec::with_capacity(results.len());
        for (entry, job) in results.into_iter().zip(&jobs) {
            out.push(match entry {
                PushResult::Pushed(pushed) => Ok(pushed),
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
                        }),
                        None => Err(e),
                    }
                }
            });
        }
        Ok(out)
    }
}

/// The job with an id: its own, or a fresh ULID (unless it deduplicates by key, which excludes an id).
fn with_id(job: &PushRequest) -> PushRequest {
    let mut job = job.clone();
    // A `first` coalescing key, like a `dedup_key`, excludes an id; with `last` and `merge` the id names
    // the push within its key, so that a try again goes in once.
    let first = job.coalesce.is_some_and(|c| c.mode == dq_api::CoalesceMode::First);
    if job.id.is_none() && job.dedup_key.is_none() && !first {
        job.id = Some(ulid::Ulid::new().to_string());
    }
    job
}
