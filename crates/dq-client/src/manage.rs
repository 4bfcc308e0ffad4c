//! The verbs on topics, dead letters, schedules and stats.

use dq_api::{Deleted, FlowKeys, Requeued, ScheduleList, Stats, TopicConfig, TopicList, TopicView};
use reqwest::Method;
use serde_json::Value;

use crate::admin::{DeadPage, JobPage, ScheduleConfig, ScheduleView};
use crate::client::Client;
use crate::error::Error;
use crate::retry::Idempotence;

impl Client {
    /// `GET /v1/topics`: every registered topic and every topic with jobs.
    pub async fn topics(&self) -> Result<Vec<TopicView>, Error> {
        let list: TopicList = self.read(&["v1", "topics"]).await?;
        Ok(list.topics)
    }

    /// `GET /v1/topics/{topic}`.
    pub async fn topic(&self, topic: &str) -> Result<TopicView, Error> {
        self.read(&["v1", "topics", topic]).await
    }

    /// `PUT /v1/topics/{topic}`: registers the topic, or replaces its registration whole.
    pub async fn put_topic(&self, topic: &str, config: &TopicConfig) -> Result<TopicView, Error> {
        self.put(&["v1", "topics", topic], config).await
    }

    /// `PUT /v1/topics/{topic}` with a registration as JSON, sent as it is, so that dq itself checks it
    /// (it refuses unknown fields, where [`TopicConfig`] would drop them): for tools that take a
    /// registration from their user.
    pub async fn put_topic_json(&self, topic: &str, config: &serde_json::Value) -> Result<TopicView, Error> {
        self.put(&["v1", "topics", topic], config).await
    }

    /// `DELETE /v1/topics/{topic}`: removes the registration; the jobs stay.
    pub async fn delete_topic(&self, topic: &str) -> Result<(), Error> {
        self.delete_path(&["v1", "topics", topic]).await
    }

    /// `POST /v1/topics/{topic}/pause`.
    pub async fn pause_topic(&self, topic: &str) -> Result<TopicView, Error> {
        self.post_empty(&["v1", "topics", topic, "pause"]).await
    }

    /// `POST /v1/topics/{topic}/resume`.
    pub async fn resume_topic(&self, topic: &str) -> Result<TopicView, Error> {
        self.post_empty(&["v1", "topics", topic, "resume"]).await
    }

    /// `GET /v1/topics/{topic}/jobs`: a page of the topic's jobs in `state` (`delayed`, `ready`,
    /// `reserved` or `dead`), earliest first.
    pub async fn list_jobs(&self, topic: &str, state: &str, offset: u64, limit: u64) -> Result<JobPage, Error> {
        let url = self.at_query(
            &["v1", "topics", topic, "jobs"],
            &[
                ("state", state.to_string()),
                ("offset", offset.to_string()),
                ("limit", limit.to_string()),
            ],
        );
        self.json::<(), _>(Method::GET, url, None, Idempotence::Safe).await
    }

    /// `GET /v1/topics/{topic}/flows`: how many of the topic's flow keys have ready jobs, and the
    /// `limit` busiest of them (1 ..= 100; most ready jobs first), each with its ready and reserved jobs.
    pub async fn flow_keys(&self, topic: &str, limit: u64) -> Result<FlowKeys, Error> {
        let url = self.at_query(&["v1", "topics", topic, "flows"], &[("limit", limit.to_string())]);
        self.json::<(), _>(Method::GET, url, None, Idempotence::Safe).await
    }

    /// `GET /healthz`: whether the server answers.
    pub async fn healthz(&self) -> Result<(), Error> {
        self.send::<()>(Method::GET, self.at(&["healthz"]), None, Idempotence::Safe, None)
            .await
            .result
            .map(drop)
    }

    /// `GET /v1/topics/{topic}/dead`: a page of the dead list, oldest death first.
    pub async fn dead(&self, topic: &str, offset: u64, limit: u64) -> Result<DeadPage, Error> {
        let url = self.at_query(
            &["v1", "topics", topic, "dead"],
            &[("offset", offset.to_string()), ("limit", limit.to_string())],
        );
        self.json::<(), _>(Method::GET, url, None, Idempotence::Safe).await
    }

    /// `POST /v1/topics/{topic}/dead/requeue`: the given dead jobs (`None`: all of them) are ready again
    /// with their attempts reset; answers how many moved.
    pub async fn requeue_dead(&self, topic: &str, ids: Option<&[String]>) -> Result<u64, Error> {
        let body = ids.map(|ids| dq_api::DeadIds {
            ids: Some(ids.to_vec()),
        });
        let r: Requeued = self
            .json(
                Method::POST,
                self.at(&["v1", "topics", topic, "dead", "requeue"]),
                body.as_ref(),
                Idempotence::Safe,
            )
            .await?;
        Ok(r.requeued)
    }

    /// `DELETE /v1/topics/{topic}/dead`: deletes the given dead jobs (`None`: all of them); answers how
    /// many went.
    pub async fn delete_dead(&self, topic: &str, ids: Option<&[String]>) -> Result<u64, Error> {
        let body = ids.map(|ids| dq_api::DeadIds {
            ids: Some(ids.to_vec()),
        });
        let r: Deleted = self
            .json(
                Method::DELETE,
                self.at(&["v1", "topics", topic, "dead"]),
                body.as_ref(),
                Idempotence::Safe,
            )
            .await?;
        Ok(r.deleted)
    }

    /// `GET /v1/schedules`.
    pub async fn schedules(&self) -> Result<Vec<ScheduleView>, Error> {
        let list: ScheduleList<Value> = self.read(&["v1", "schedules"]).await?;
        Ok(list.schedules)
    }

    /// `GET /v1/schedules/{name}`.
    pub async fn schedule(&self, name: &str) -> Result<ScheduleView, Error> {
        self.read(&["v1", "schedules", name]).await
    }

    /// `PUT /v1/schedules/{name}`: registers or replaces a schedule.
    pub async fn put_schedule(&self, name: &str, config: &ScheduleConfig) -> Result<ScheduleView, Error> {
        self.put(&["v1", "schedules", name], config).await
    }

    /// `PUT /v1/schedules/{name}` with a registration as JSON, sent as it is (see
    /// [`Client::put_topic_json`]).
    pub async fn put_schedule_json(&self, name: &str, config: &serde_json::Value) -> Result<ScheduleView, Error> {
        self.put(&["v1", "schedules", name], config).await
    }

    /// `DELETE /v1/schedules/{name}`.
    pub async fn delete_schedule(&self, name: &str) -> Result<(), Error> {
        self.delete_path(&["v1", "schedules", name]).await
    }

    /// `POST /v1/schedules/{name}/pause`.
    pub async fn pause_schedule(&self, name: &str) -> Result<ScheduleView, Error> {
        self.post_empty(&["v1", "schedules", name, "pause"]).await
    }

    /// `POST /v1/schedules/{name}/resume`.
    pub async fn resume_schedule(&self, name: &str) -> Result<ScheduleView, Error> {
        self.post_empty(&["v1", "schedules", name, "resume"]).await
    }

    /// `GET /v1/stats`: counts per topic and state, Redis's shape and health.
    pub async fn stats(&self) -> Result<Stats, Error> {
        self.read(&["v1", "stats"]).await
    }
}
