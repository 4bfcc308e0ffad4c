//! Checking a push before anything touches Redis: the job's fields against the limits, and the defaults
//! filled in (the topic's registration first, then the installation's).

use super::Producer;
use crate::clock::unix_ms;
use crate::error::Result;
use crate::job::{NewJob, PushRequest};
use crate::topic::TopicConfig;

impl Producer {
    /// Checks a push and fills in defaults; nothing touches Redis.
    pub fn validate(&self, req: PushRequest) -> Result<NewJob> {
        NewJob::from_request(req, &self.limits(), &self.defaults, None, unix_ms())
    }

    /// Checks a push and fills in defaults from its topic's registration, then the global ones.
    pub fn validate_for(&self, req: PushRequest, topic: Option<&TopicConfig>) -> Result<NewJob> {
        let mut defaults = self.defaults().clone();
        let mut req = req;
        if let Some(t) = topic {
            if let Some(ttr) = t.defaults.ttr_ms {
                defaults.ttr_ms = ttr;
            }
            if let Some(m) = t.retry.max_attempts {
                defaults.max_attempts = m;
            }
            if let (Some(d), None, None) = (t.defaults.delay_ms, req.delay_ms, req.run_at) {
                req.delay_ms = Some(d as i64);
            }
        }
        let max_age_ms = topic.and_then(|t| t.retry.max_age_ms);
        NewJob::from_request(req, &self.limits(), &defaults, max_age_ms, unix_ms())
    }
}
