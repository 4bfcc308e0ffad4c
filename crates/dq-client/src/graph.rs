//! Jobs that start jobs: an ack that pushes the next steps with the job's success (docs/api.md,
//! "Jobs that start jobs").

use dq_api::{AckPushed, AckRequest, JobRef};
use reqwest::Method;

use crate::client::{Client, decode};
use crate::error::Error;
use crate::jobs::PushRequest;
use crate::retry::Idempotence;

impl Client {
    /// `POST /v1/jobs/{id}/ack` with `push`: the job is done and `jobs` are stored with it (each a push
    /// without an `id`: theirs are `<id>~<index>`), or neither. Answers their ids, each fan-out's
    /// children after it. Sent again after an unknown outcome, an ack that finds its receipt stale and
    /// the job done answers with the jobs the job started (they were stored by the try whose answer was
    /// lost); nothing is ever pushed twice.
    pub async fn ack_pushing(&self, id: &str, receipt: &str, jobs: &[PushRequest]) -> Result<Vec<JobRef>, Error> {
        let push = jobs
            .iter()
            .map(|j| serde_json::value::to_raw_value(j).map_err(|e| Error::Usage(format!("a job to push: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let request = AckRequest {
            receipt: receipt.to_string(),
            consumer: self.consumer.clone(),
            push: Some(push),
        };
        let tried = self
            .send(
                Method::POST,
                self.at(&["v1", "jobs", id, "ack"]),
                Some(&request),
                Idempotence::Safe,
                None,
            )
            .await;
        match tried.result {
            Ok(sent) => Ok(decode::<AckPushed>(sent)?.pushed),
            Err(e) if tried.after_unknown && e.is_code("stale_receipt") => match self.get(id).await {
                Ok(job) if job.state == dq_api::State::Done => Ok(job.children),
                _ => Err(e),
            },
            Err(e) => Err(e),
        }
    }
}
