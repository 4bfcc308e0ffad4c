//! What every task of the chaos test records: pushes, deliveries, acks and faults.

use super::*;

/// How a job reached the test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    /// dq-consumer POSTed it to the sink.
    Callback,
    /// A pull worker reserved it.
    Pull,
    /// An item of a merged job that dq-consumer POSTed to the sink's merge route.
    Merge,
}

#[derive(Default)]
pub(crate) struct PushStats {
    pub(crate) created: u64,
    /// Merge items that went into a pending job (200, `"coalesced": true`).
    pub(crate) coalesced: u64,
    /// 409 on a retry of an id whose earlier attempt had no certain outcome: it was stored.
    pub(crate) conflict_on_retry: u64,
    /// 409 on an id's first attempt: the id had a record before the test pushed it.
    pub(crate) conflict_first: Vec<String>,
    pub(crate) unavailable: u64,
    /// 503s that said the outcome is unknown (and named the id to push again with).
    pub(crate) unknown_outcome: u64,
    /// 503s whose `id` was not the id pushed.
    pub(crate) wrong_id: Vec<String>,
    pub(crate) connection_errors: u64,
    pub(crate) internal: u64,
}

#[derive(Default)]
pub(crate) struct AckStats {
    pub(crate) acked: u64,
    pub(crate) retried: u64,
    pub(crate) stale: u64,
    pub(crate) not_found: Vec<String>,
    pub(crate) gave_up: u64,
}

/// What every task of the test records.
pub(crate) struct Shared {
    pub(crate) start: Instant,
    /// Ids whose push was acknowledged (201, or 409 on a retry).
    pub(crate) pushed: Mutex<HashSet<String>>,
    pub(crate) push_stats: Mutex<PushStats>,
    /// (sent, answered) of every acknowledged push attempt: dq-server's recovery signal.
    pub(crate) push_ok: Mutex<Vec<(Instant, Instant)>>,
    /// Ids that needed more than one attempt: (ms, status) of each.
    pub(crate) retried_pushes: Mutex<HashMap<String, Vec<(u64, u16)>>>,
    /// Every delivery: id → (ms, how).
    pub(crate) deliveries: Mutex<HashMap<String, Vec<(u64, Via)>>>,
    pub(crate) acks: Mutex<AckStats>,
    /// (ms, what) of every fault, in order.
    pub(crate) faults: Mutex<Vec<(u64, String)>>,
    pub(crate) pushes_done: AtomicBool,
    pub(crate) stop_pulling: AtomicBool,
    /// Every merge item delivered: item id → the ids of the jobs it came in (one per delivery).
    pub(crate) merged: Mutex<HashMap<String, Vec<String>>>,
    /// Merge items that came twice in one job's body: "item in job".
    pub(crate) twice_in_one_job: Mutex<Vec<String>>,
}

impl Shared {
    pub(crate) fn ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    pub(crate) fn delivered(&self, id: &str, via: Via) {
        let ms = self.ms();
        self.deliveries
            .lock()
            .unwrap()
            .entry(id.to_string())
            .or_default()
            .push((ms, via));
    }

    /// A delivery of merged job `job` holding `items`.
    pub(crate) fn merged(&self, job: &str, items: &[String]) {
        let mut seen = HashSet::new();
        for item in items {
            if !seen.insert(item) {
                self.twice_in_one_job.lock().unwrap().push(format!("{item} in {job}"));
            }
            self.delivered(item, Via::Merge);
            self.merged
                .lock()
                .unwrap()
                .entry(item.clone())
                .or_default()
                .push(job.to_string());
        }
    }

    pub(crate) fn fault(&self, what: String, verbose: bool) {
        let ms = self.ms();
        if verbose {
            println!("chaos: fault at {:>7.1} s: {what}", ms as f64 / 1000.0);
        }
        self.faults.lock().unwrap().push((ms, what));
    }

    /// When the first push sent after `cut` was acknowledged. The list is in the order of the answers,
    /// so only its tail, answered after `cut`, can hold such pushes.
    pub(crate) fn first_push_ok_after(&self, cut: Instant) -> Option<Instant> {
        self.push_ok
            .lock()
            .unwrap()
            .iter()
            .rev()
            .take_while(|(_, answered)| *answered >= cut)
            .filter(|(sent, _)| *sent >= cut)
            .map(|(_, answered)| *answered)
            .min()
    }
}
