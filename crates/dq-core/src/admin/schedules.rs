//! The schedules' registry: `{<prefix>}:schedules` (name → `<since ms> <config JSON>`) and the last
//! occurrence each fired, `{<prefix>}:schedules:fired` (see `docs/redis-keys.md`). Both carry the
//! installation's tag, so one script writes both atomically, in one slot on a cluster.

use super::Admin;
use crate::error::{Error, Result};
use crate::schedule::ScheduleConfig;
use crate::shared::Core;
use crate::store::registry;
use crate::store::scripts::schedule_set;

/// A schedule as the registry holds it.
#[derive(Debug, Clone)]
pub struct StoredSchedule {
    /// Its name.
    pub name: String,
    /// Its registration.
    pub config: ScheduleConfig,
    /// When it started counting occurrences (Redis's clock, Unix ms): its creation, or the last change of
    /// cron or zone, or the last resume. No occurrence at or before it fires.
    pub since: i64,
    /// The last occurrence it fired, Unix ms.
    pub last_fired: Option<i64>,
}

impl StoredSchedule {
    /// Every occurrence up to this (Unix ms) has fired or does not count: the later of `since` and the
    /// last occurrence fired.
    pub fn fired_through(&self) -> i64 {
        self.last_fired.map_or(self.since, |f| f.max(self.since))
    }
}

impl Admin {
    /// Registers (or replaces) schedule `name`. With `restart`, or for a new schedule, it counts
    /// occurrences from now (Redis's clock): a replaced schedule with a new cron or zone, and a resumed
    /// one, fire from their next occurrence. Returns that start.
    pub async fn put_schedule(&self, name: &str, config: &ScheduleConfig, restart: bool) -> Result<i64> {
        let json = serde_json::to_string(config).map_err(|e| Error::Invalid(e.to_string()))?;
        Ok(schedule_set::call(&self.store, name, Some(&json), restart).await?.since)
    }

    /// Deletes schedule `name` and its last occurrence fired (jobs it pushed stay). `ScheduleNotFound`
    /// when there is none.
    pub async fn delete_schedule(&self, name: &str) -> Result<()> {
        if schedule_set::call(&self.store, name, None, false).await?.existed {
            Ok(())
        } else {
            Err(Error::ScheduleNotFound(name.to_string()))
        }
    }

    /// Every schedule, by name. A registration that does not parse is skipped, with a warning.
    pub async fn schedules(&self) -> Result<Vec<StoredSchedule>> {
        self.0.schedules().await
    }

    /// Schedule `name`, if registered.
    pub async fn schedule(&self, name: &str) -> Result<Option<StoredSchedule>> {
        self.0.schedule(name).await
    }
}

/// The registry's reads, which admins and timers share.
impl Core {
    /// Every schedule, by name. A registration that does not parse is skipped, with a warning.
    pub(crate) async fn schedules(&self) -> Result<Vec<StoredSchedule>> {
        let (raw, fired) = registry::schedules(&self.store).await?;
        let mut all: Vec<StoredSchedule> = raw
            .into_iter()
            .filter_map(|(name, value)| {
                let last_fired = fired.get(&name).copied();
                decode(name, &value, last_fired)
            })
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    /// Schedule `name`, if registered.
    pub(crate) async fn schedule(&self, name: &str) -> Result<Option<StoredSchedule>> {
        let (raw, fired) = registry::schedule(&self.store, name).await?;
        Ok(raw.and_then(|v| decode(name.to_string(), &v, fired)))
    }
}

/// A registry entry, `<since ms> <config JSON>`; `None` (with a warning) when it does not parse.
fn decode(name: String, value: &str, last_fired: Option<i64>) -> Option<StoredSchedule> {
    let parsed = value
        .split_once(' ')
        .and_then(|(since, json)| Some((since.parse().ok()?, serde_json::from_str(json).ok()?)));
    match parsed {
        Some((since, config)) => Some(StoredSchedule {
            name,
            config,
            since,
            last_fired,
        }),
        None => {
            tracing::warn!(schedule = %name, "unreadable schedule skipped");
            None
        }
    }
}
