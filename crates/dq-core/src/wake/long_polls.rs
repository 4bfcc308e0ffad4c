//! Hand-offs to the long polls of a dq-server (see `crate::queue::ready::handed`): tells the timers how
//! many jobs the process's long polls wait for, per topic, listens on the process's hand-off channels,
//! and hands back to the ready queue what no long poll took in time, and everything when it stops.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::listen_handoffs;
use crate::job::Reservation;
use crate::queue::Queue;
use crate::reservations::handoff::Waiting;

/// How often the waiting long polls are compared with what the timers were told, and handed jobs
/// nobody took are looked for.
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// After telling the timers no long poll waits any more, how long the process still listens (and hands
/// back) before it unsubscribes, for the promotions that were under way.
const LAST_HANDOFFS: Duration = Duration::from_millis(100);

/// Serves hand-offs to this process's long polls until `shutdown`, then tells the timers that none
/// waits and hands back the jobs no long poll took. The task ends when that is done.
pub fn serve_long_polls(queue: &Queue, shutdown: CancellationToken) -> JoinHandle<()> {
    let process_id = ulid::Ulid::new().to_string();
    metrics::counter!("dq_long_polls_handed_total").increment(0);
    metrics::counter!("dq_long_polls_handed_back_total").increment(0);
    let index = queue.ready_index().clone();
    let listening = CancellationToken::new();
    let to = index.clone();
    let listener = listen_handoffs(queue, &process_id, listening.clone(), move |jobs| to.handed(jobs));
    let queue = queue.clone();
    tokio::spawn(async move {
        let mut look = tokio::time::interval(LOOK_EVERY);
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = look.tick() => {}
                _ = shutdown.cancelled() => break,
            }
            for (topic, slots) in index.to_tell() {
                tell(&queue, &process_id, topic, slots).await;
            }
            release_stale(&queue, index.stale_handed(false)).await;
        }
        for topic in index.untell_all() {
            tell(&queue, &process_id, topic, 0).await;
        }
        tokio::time::sleep(LAST_HANDOFFS).await;
        listening.cancel();
        let _ = listener.await;
        release_stale(&queue, index.stale_handed(true)).await;
    })
}

/// Tells the timers that this process's long polls wait for `slots` jobs of `topic`.
async fn tell(queue: &Queue, process_id: &str, topic: String, slots: u32) {
    let w = Waiting {
        topic,
        consumer: process_id.to_string(),
        slots,
        least_ttr_ms: 0,
    };
    if let Err(e) = queue.reservations().announce_waiting(&w).await {
        tracing::debug!(topic = %w.topic, cause = %e.chain(), "cannot tell the timers that long polls wait");
    }
}

/// Hands jobs back to the ready queue, for another reserve.
async fn release_stale(queue: &Queue, jobs: Vec<Reservation>) {
    metrics::counter!("dq_long_polls_handed_back_total").increment(jobs.len() as u64);
    queue.reservations().release_all(jobs).await;
}
