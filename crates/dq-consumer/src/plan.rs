//! A topic's registration prepared for delivery, which its worker and its limiter both follow.

use dq_core::TopicConfig;
use dq_core::condition::Condition;
use dq_core::topic::Callback;

/// A topic's registration, prepared for delivery: the condition parsed once.
pub struct Plan {
    /// The registration as read.
    pub config: TopicConfig,
    /// Its callback.
    pub(crate) callback: Callback,
    /// Its callback's URL, parsed.
    pub(crate) url: reqwest::Url,
    /// Its retry condition.
    pub(crate) condition: Option<Condition>,
}

impl Plan {
    /// Prepares a registration that has a callback.
    pub fn new(config: &TopicConfig) -> Result<Plan, String> {
        let callback = config.callback.clone().ok_or("no callback")?;
        let url = reqwest::Url::parse(&callback.url).map_err(|e| format!("callback.url: {e}"))?;
        let condition = match &config.retry.condition {
            Some(c) => Some(Condition::parse(c).map_err(|e| format!("retry.condition: {e}"))?),
            None => None,
        };
        Ok(Plan {
            config: config.clone(),
            callback,
            url,
            condition,
        })
    }

    /// The callback.
    pub fn callback(&self) -> &Callback {
        &self.callback
    }
}
