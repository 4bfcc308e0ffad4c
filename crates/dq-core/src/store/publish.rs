//! Publishing on a partition's wake channels from outside a script (the scripts publish their own).

use super::Store;
use crate::error::Result;

impl Store {
    /// Publishes `message` on `channel`, a channel of partition `p`: over sharded pub/sub on a cluster
    /// (see [`super::scripts::Waking`]). Answers how many subscribers heard it.
    pub(crate) async fn publish(&self, p: u16, channel: &str, message: &str) -> Result<i64> {
        let mut cmd = redis::cmd(if self.sharded() { "SPUBLISH" } else { "PUBLISH" });
        cmd.arg(channel).arg(message);
        self.query(p, &cmd).await
    }
}
