//! Waiting reserves, served together: the connections of a server that wait for jobs of the same tubes
//! stand in one line, and one task reserves for the whole line, as many jobs per call as there are
//! waiters (up to 100), handing them out in the order the connections came.
//!
//! A beanstalkd tube's jobs live in one partition (its home partition, see `dq_core::beanstalkd`), and the
//! ready index lets one reserve of a process ask a partition at a time. A reserve per connection would
//! therefore reserve one job per round trip for the whole server; a line reserves for all its waiters in
//! each round trip (as a push's group commit stores many jobs in one call).
//!
//! A waiter holds a [`oneshot::Receiver`]. A connection that stops waiting (timeout, deadline soon,
//! client gone) closes it and takes what was sent meanwhile ([`Waiting::leave`]); a job sent to a
//! closed waiter goes to the next one, or back to ready at once when nobody waits any more.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq_core::reservations::ReserveOptions;
use dq_core::{Queue, Reservation};
use tokio::sync::{Notify, oneshot};

/// Most jobs one call reserves for a line.
const MOST_PER_CALL: usize = 100;

/// The lines of one server, by their sorted topics.
#[derive(Debug, Default)]
pub struct Dispatcher {
    lines: Mutex<HashMap<Vec<String>, Arc<Line>>>,
}

/// The connections waiting for jobs of the same topics.
#[derive(Debug, Default)]
struct Line {
    waiters: Mutex<VecDeque<oneshot::Sender<Reservation>>>,
    /// Told when a waiter joins.
    joined: Notify,
}

/// A connection's place in a line.
pub struct Waiting(oneshot::Receiver<Reservation>);

impl Waiting {
    /// The job reserved for this waiter.
    pub async fn job(&mut self) -> Option<Reservation> {
        (&mut self.0).await.ok()
    }

    /// Leaves the line: a job already sent is returned (to be given to the client, or handed back).
    pub fn leave(mut self) -> Option<Reservation> {
        self.0.close();
        self.0.try_recv().ok()
    }
}

impl Dispatcher {
    /// Stands in the line of `topics` (not empty), starting its task when it has none.
    pub fn enter(self: &Arc<Self>, queue: &Arc<Queue>, topics: &[String]) -> Waiting {
        let key = topics_key(topics);
        let (tx, rx) = oneshot::channel();
        let mut lines = self.lines.lock().expect("not poisoned");
        let line = lines
            .entry(key.clone())
            .or_insert_with(|| {
                let line = Arc::new(Line::default());
                let (this, queue, served) = (self.clone(), queue.clone(), line.clone());
                tokio::spawn(async move { this.serve(queue, key, served).await });
                line
            })
            .clone();
        line.waiters.lock().expect("not poisoned").push_back(tx);
        line.joined.notify_one();
        Waiting(rx)
    }

    /// Reserves for `line` while it has waiters; then removes it.
    async fn serve(&self, queue: Arc<Queue>, topics: Vec<String>, line: Arc<Line>) {
        loop {
            let waiting = {
                let mut waiters = line.waiters.lock().expect("not poisoned");
                waiters.retain(|w| !w.is_closed());
                waiters.len()
            };
            if waiting == 0 {
                let mut lines = self.lines.lock().expect("not poisoned");
                // A waiter that joined since is served by this task still.
                if line.waiters.lock().expect("not poisoned").is_empty() {
                    lines.remove(&topics);
                    return;
                }
                continue;
            }
            // In line for wake-ups before looking, so one sent while the call runs is not missed.
            let mut wake = queue
                .reservations()
                .ready_index()
                .waiter(&topics, waiting.min(MOST_PER_CALL) as u32);
            let options = ReserveOptions {
                least_ttr_ms: None,
                waits: true,
                best_first: true,
            };
            let ordered = match super::reserve::best_first(&queue, topics.clone()).await {
                Ok(ordered) => ordered,
                Err(e) => {
                    tracing::warn!(error = %e.chain(), "beanstalkd reserve failed; trying again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            match queue
                .reservations()
                .reserve_with(&ordered, waiting.min(MOST_PER_CALL), options)
                .await
            {
                Ok(jobs) if !jobs.is_empty() => {
                    for job in jobs {
                        self.hand_out(&queue, &line, job).await;
                    }
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e.chain(), "beanstalkd reserve failed; trying again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
            // Nothing ready: wait for a wake-up, a new waiter, or a while (waiters that left are dropped).
            tokio::select! {
                _ = wake.wait() => {}
                _ = line.joined.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// Gives `job` to the first waiter still there, or hands it back when none is.
    async fn hand_out(&self, queue: &Queue, line: &Line, mut job: Reservation) {
        loop {
            let next = line.waiters.lock().expect("not poisoned").pop_front();
            let Some(waiter) = next else { break };
            match waiter.send(job) {
                Ok(()) => return,
                Err(back) => job = back,
            }
        }
        if let Err(e) = queue.reservations().release(&job.id, &job.receipt).await {
            tracing::warn!(error = %e, id = %job.id, "could not release a job nobody waited for; dq-timer will at its TTR");
        }
    }
}

/// A line's key: its topics, sorted (a line takes the best job of all of them, whatever their order).
fn topics_key(topics: &[String]) -> Vec<String> {
    let mut key = topics.to_vec();
    key.sort();
    key
}
