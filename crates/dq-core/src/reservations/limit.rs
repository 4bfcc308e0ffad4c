//! A topic's delivery limits across every dq-consumer (`limit.lua`): delivery slots held on a lease,
//! the rate's token bucket, and a pause the callback asked for.

use super::Reservations;
use crate::error::Result;
use crate::store::scripts::limit;
pub use crate::store::scripts::limit::{LimitAsk, LimitGrant};

impl Reservations {
    /// Asks `topic`'s limits for slots and deliveries on behalf of `holder` (one dq-consumer worker).
    pub async fn limit(&self, topic: &str, holder: &str, ask: LimitAsk) -> Result<LimitGrant> {
        limit::call(&self.store, topic, holder, ask).await
    }
}
