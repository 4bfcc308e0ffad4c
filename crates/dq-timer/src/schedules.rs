//! Firing schedules: each occurrence becomes one job, whose `run_at` is the occurrence.
//!
//! One timer fires at a time: the one holding partition 0's lease ([`crate::partition_timer`]), so a
//! timer that dies is replaced as its partitions are, once its heartbeat lapses (`timer.lease_ms`, 1.5 s
//! by default, plus one heartbeat), and one that drains hands over at once. Two timers may still fire
//! for a moment (a timer cut off from Redis believes it leads until its heartbeats fail for
//! `lease_ms`); that costs nothing, because an occurrence's job id carries the occurrence
//! ([`dq_core::schedule::job_id`]) and a second push of a live id is a conflict.
//!
//! The firing timer reads the schedules every second, and at once when their version (raised by every
//! change) moved, which it checks every 100 ms; otherwise it sleeps until the next occurrence on
//! Redis's clock ([`RedisClock`]). After each push it raises the schedule's last-fired mark in Redis;
//! before each push it reads the mark, so a timer that takes over late does not push again what the
//! other already fired, and a schedule deleted or paused since the last read fires nothing. Missed
//! occurrences (no timer ran, or all lagged) fire once, the latest of them, due at once: see
//! [`Cadence::next_fire`].

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use dq_core::admin::schedules::StoredSchedule;
use dq_core::admin::topics::TopicCache;
use dq_core::schedule::{Cadence, ScheduleRules};
use dq_core::{Error, Queue};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::RedisClock;

/// How often the firing timer reads the schedules again.
const REFRESH: Duration = Duration::from_secs(1);

/// How often the firing timer reads the schedules' version, to read them again at once after a change.
const CHECK: Duration = Duration::from_millis(100);

/// How long after a failed push (Redis did not answer) the occurrence is tried again, in ms.
const RETRY_MS: i64 = 100;

/// One schedule as the firing timer follows it.
struct Entry {
    /// The schedule as last read (its last-fired mark kept up to date here).
    stored: StoredSchedule,
    /// Its pattern and zone.
    cadence: Cadence,
    /// The occurrence to fire next (Unix ms); none while paused, or when it has no more.
    next: Option<i64>,
    /// Not before this (Redis ms): set after a failure.
    retry_at: i64,
}

/// What became of one occurrence.
enum Fired {
    /// Its job was pushed now.
    Pushed,
    /// Its job was there already (another timer, or an earlier try whose answer was lost), or the
    /// last-fired mark says it fired.
    Existing,
    /// Its job is refused by today's limits or its topic's registration: skipped, with a warning.
    Refused,
    /// Redis failed: try again soon.
    Failed,
    /// The schedule changed since it was read (deleted, paused, restarted past the occurrence): nothing
    /// fired; read the schedules again.
    Changed,
}

/// Fires the schedules while this timer leads.
pub struct ScheduleFirer {
    /// The queue (registry and pushes).
    queue: Queue,
    /// The topic registry, for the defaults of each job (as a push gets them).
    topics: Arc<TopicCache>,
    /// Whether this timer holds partition 0, and fires.
    lead: watch::Receiver<bool>,
    /// Redis's clock.
    clock: RedisClock,
    /// The schedules as last read.
    entries: Vec<Entry>,
    /// When the schedules were last read (none: read them now).
    refreshed_at: Option<Instant>,
    /// The schedules' version when they were last read.
    version: Option<i64>,
    /// When the version was last read.
    checked_at: Instant,
    /// Schedules whose next-fire gauge this process set, to zero it when they go.
    gauged: HashSet<String>,
}

impl ScheduleFirer {
    /// A firer that fires while `lead` says so.
    pub fn new(queue: Queue, topics: Arc<TopicCache>, lead: watch::Receiver<bool>) -> Self {
        ScheduleFirer {
            queue,
            topics,
            lead,
            clock: RedisClock::default(),
            entries: Vec::new(),
            refreshed_at: None,
            version: None,
            checked_at: Instant::now(),
            gauged: HashSet::new(),
        }
    }

    /// Runs until `shutdown` (or until the partition timer is gone).
    pub async fn run(mut self, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            if !*self.lead.borrow_and_update() {
                self.entries.clear();
                self.refreshed_at = None;
                self.gauge(&HashSet::new());
                tokio::select! {
                    changed = self.lead.changed() => if changed.is_err() { return },
                    _ = shutdown.cancelled() => return,
                }
                continue;
            }
            if self.checked_at.elapsed() >= CHECK {
                self.check_version().await;
            }
            if self.refreshed_at.is_none_or(|t| t.elapsed() >= REFRESH) {
                self.refresh().await;
            }
            self.fire_due().await;
            let mut wake_at = self
                .refreshed_at
                .map_or_else(Instant::now, |t| t + REFRESH)
                .min(self.checked_at + CHECK);
            for e in &self.entries {
                if let Some(next) = e.next {
                    wake_at = wake_at.min(self.clock.instant_of(next.max(e.retry_at)));
                }
            }
            tokio::select! {
                _ = tokio::time::sleep_until(wake_at) => {}
                changed = self.lead.changed() => if changed.is_err() { return },
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// Reads the schedules' version; a change since the last read makes the next step read them again.
    async fn check_version(&mut self) {
        self.checked_at = Instant::now();
        match self.queue.timer().schedules_version().await {
            Ok(v) if Some(v) != self.version => self.refreshed_at = None,
            Ok(_) => {}
            Err(e) => tracing::debug!(cause = %e.chain(), "cannot read the schedules' version"),
        }
    }

    /// Reads the schedules and Redis's clock; keeps what it had when Redis does not answer.
    async fn refresh(&mut self) {
        self.refreshed_at = Some(Instant::now());
        // Read first: a change made while the schedules are read is seen at the next check.
        self.version = self.queue.timer().schedules_version().await.ok();
        let read = async { Ok::<_, Error>((self.queue.redis_now_ms().await?, self.queue.timer().schedules().await?)) };
        let (now, all) = match read.await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(cause = %e.chain(), "cannot read the schedules; retrying");
                return;
            }
        };
        self.clock.observe(now);
        let mut entries = Vec::with_capacity(all.len());
        for stored in all {
            let cadence = match Cadence::parse(&stored.config.cron, &stored.config.timezone) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(schedule = %stored.name, cause = %e.chain(), "schedule skipped");
                    continue;
                }
            };
            let next = (!stored.config.paused)
                .then(|| cadence.next_fire(stored.fired_through(), now))
                .flatten();
            // A failure's back-off survives the read.
            let retry_at = self
                .entries
                .iter()
                .find(|e| e.stored.name == stored.name && e.next == next)
                .map_or(0, |e| e.retry_at);
            entries.push(Entry {
                stored,
                cadence,
                next,
                retry_at,
            });
        }
        self.entries = entries;
        let names = self.entries.iter().map(|e| e.stored.name.clone()).collect();
        self.gauge(&names);
    }

    /// Sets the next-fire gauge of every schedule followed, and zeroes those of schedules that went.
    fn gauge(&mut self, names: &HashSet<String>) {
        for gone in self.gauged.difference(names) {
            metrics::gauge!("dq_schedule_next_fire_timestamp_seconds", "schedule" => gone.clone()).set(0.0);
        }
        for e in &self.entries {
            let at = e.next.map_or(0.0, |n| n as f64 / 1000.0);
            metrics::gauge!("dq_schedule_next_fire_timestamp_seconds", "schedule" => e.stored.name.clone()).set(at);
        }
        self.gauged = names.clone();
    }

    /// Fires every occurrence that is due, side by side.
    async fn fire_due(&mut self) {
        let now = self.clock.now();
        let due: Vec<(usize, i64)> = self
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.next.filter(|n| *n <= now && e.retry_at <= now).map(|n| (i, n)))
            .collect();
        if due.is_empty() {
            return;
        }
        let (queue, topics, clock) = (&self.queue, &self.topics, &self.clock);
        let results = futures_util::future::join_all(
            due.iter()
                .map(|&(i, at)| fire(queue, topics, clock, &self.entries[i].stored, at)),
        )
        .await;
        let now = self.clock.now();
        for (&(i, at), fired) in due.iter().zip(results) {
            let e = &mut self.entries[i];
            match fired {
                Fired::Failed => {
                    e.retry_at = now + RETRY_MS;
                    continue;
                }
                Fired::Changed => {
                    e.next = None;
                    self.refreshed_at = None;
                    continue;
                }
                _ => {}
            }
            let outcome = match fired {
                Fired::Pushed => "pushed",
                Fired::Existing => "existing",
                _ => "refused",
            };
            metrics::counter!("dq_schedule_occurrences_fired_total", "schedule" => e.stored.name.clone(), "outcome" => outcome)
                .increment(1);
            e.stored.last_fired = Some(at);
            e.retry_at = 0;
            e.next = e.cadence.next_fire(at.max(e.stored.since), now);
            let next = e.next.map_or(0.0, |n| n as f64 / 1000.0);
            metrics::gauge!("dq_schedule_next_fire_timestamp_seconds", "schedule" => e.stored.name.clone()).set(next);
        }
    }
}

/// Fires `schedule`'s occurrence at `at`: pushes its job (id and due time from the occurrence), then
/// raises the last-fired mark.
async fn fire(queue: &Queue, topics: &TopicCache, clock: &RedisClock, schedule: &StoredSchedule, at: i64) -> Fired {
    let name = schedule.name.as_str();
    // As Redis holds it now: the schedule may have changed since the last read, or another timer may
    // have fired the occurrence (a takeover).
    match queue.timer().schedule(name).await {
        Ok(None) => return Fired::Changed,
        Ok(Some(now)) if now.config.paused || now.since >= at => return Fired::Changed,
        Ok(Some(now)) if now.last_fired.is_some_and(|last| last >= at) => return Fired::Existing,
        Ok(Some(_)) => {}
        Err(e) => {
            tracing::warn!(schedule = name, cause = %e.chain(), "cannot read the schedule's last occurrence; retrying");
            return Fired::Failed;
        }
    }
    let request = schedule.config.push_request(name, at);
    let fired = match queue
        .producer()
        .validate_for(request, topics.get(&schedule.config.topic).as_ref())
    {
        Err(e) => {
            tracing::warn!(schedule = name, occurrence = at, cause = %e.chain(), "occurrence skipped: its job is refused");
            Fired::Refused
        }
        Ok(job) => match queue.producer().push(job).await {
            Ok(_) => {
                metrics::histogram!("dq_schedule_fire_lateness_seconds").record((clock.now() - at) as f64 / 1000.0);
                Fired::Pushed
            }
            Err(Error::Conflict(_)) => Fired::Existing,
            Err(e) => {
                tracing::warn!(schedule = name, occurrence = at, cause = %e.chain(), "cannot push the occurrence's job; retrying");
                return Fired::Failed;
            }
        },
    };
    if let Err(e) = queue.timer().schedule_fired(name, at).await {
        // The next read finds the occurrence unmarked and pushes it again: a conflict, then marked.
        tracing::warn!(schedule = name, cause = %e.chain(), "cannot mark the occurrence fired");
    }
    fired
}
