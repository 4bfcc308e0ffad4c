//! Group commit: operations that concurrent callers send to one partition at the same moment travel together
//! in one script call.
//!
//! Under load most of Redis's work per operation is the call itself (parsing EVALSHA, setting up the Lua
//! call, `TIME`, the counters, the reply), not the writes. So while a call is on the wire, the operations that
//! arrive queue up, and the next call carries all of them: a lone operation goes out at once (no timer, no
//! added latency), a crowd shares round trips. Each caller still gets its own answer, and a script applies
//! each operation exactly as if it had come alone, in arrival order.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// One kind of operation on one partition: what is waiting, and how many calls are out.
#[derive(Debug)]
pub struct GroupCommit<T, R> {
    /// Waiting operations and the number of flushing tasks.
    state: Mutex<Pending<T, R>>,
    /// The most weight (jobs) one call carries; an operation heavier than this still goes, alone.
    max_weight: usize,
    /// Calls out at once. Above one, a call's round trip overlaps the next call's gathering.
    max_in_flight: usize,
}

#[derive(Debug)]
struct Pending<T, R> {
    /// In arrival order: the operation, its weight, where its answer goes.
    queue: VecDeque<(T, usize, oneshot::Sender<R>)>,
    /// Tasks draining `queue`, each with at most one call out.
    flushing: usize,
}

/// Gives back a flushing task's slot however the task ends (a panic included), so the group commit never
/// stalls with operations waiting and no task to send them.
struct Slot<'a, T, R>(&'a GroupCommit<T, R>);

impl<T, R> Drop for Slot<'_, T, R> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        state.flushing -= 1;
    }
}

impl<T: Send + 'static, R: Send + 'static> GroupCommit<T, R> {
    /// A group commit sending at most `max_weight` per call, with at most `max_in_flight` calls out.
    pub fn new(max_weight: usize, max_in_flight: usize) -> Self {
        GroupCommit {
            state: Mutex::new(Pending {
                queue: VecDeque::new(),
                flushing: 0,
            }),
            max_weight: max_weight.max(1),
            max_in_flight: max_in_flight.max(1),
        }
    }

    /// Queues `item` and waits for its answer. `flush` sends a gathered group in one call and answers each
    /// of its operations, in order, one answer per operation. Every caller passes an equivalent `flush`; the
    /// caller that finds no free task starts one with its own.
    ///
    /// The operation runs on a spawned task, so it completes even when the caller stops waiting; `None`
    /// means the task ended without answering (it panicked).
    pub async fn submit<F, Fut>(self: &Arc<Self>, item: T, weight: usize, flush: F) -> Option<R>
    where
        F: Fn(Vec<T>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<R>> + Send,
    {
        self.submit_or_return(item, weight, flush, |_| {}).await
    }

    /// [`GroupCommit::submit`], with `unclaimed` given each answer whose caller stopped waiting before it
    /// came: what the operation took (reserved jobs) can be handed back instead of lost.
    pub async fn submit_or_return<F, Fut, U>(
        self: &Arc<Self>,
        item: T,
        weight: usize,
        flush: F,
        unclaimed: U,
    ) -> Option<R>
    where
        F: Fn(Vec<T>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<R>> + Send,
        U: Fn(R) + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.queue.push_back((item, weight, tx));
            let start = state.flushing < self.max_in_flight;
            if start {
                state.flushing += 1;
            }
            start
        };
        if start {
            let me = Arc::clone(self);
            tokio::spawn(async move { me.drain(flush, unclaimed).await });
        }
        rx.await.ok()
    }

    /// Sends groups until nothing waits.
    async fn drain<F, Fut, U>(&self, flush: F, unclaimed: U)
    where
        F: Fn(Vec<T>) -> Fut,
        Fut: Future<Output = Vec<R>>,
        U: Fn(R),
    {
        let _slot = Slot(self);
        loop {
            let (items, replies): (Vec<T>, Vec<oneshot::Sender<R>>) = {
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                let mut weight = 0;
                let mut group = Vec::new();
                while let Some((_, w, _)) = state.queue.front() {
                    if !group.is_empty() && weight + w > self.max_weight {
                        break;
                    }
                    weight += w;
                    let (item, _, reply) = state.queue.pop_front().expect("front exists");
                    group.push((item, reply));
                }
                if group.is_empty() {
                    return;
                }
                group.into_iter().unzip()
            };
            let answers = flush(items).await;
            debug_assert_eq!(answers.len(), replies.len(), "one answer per operation");
            for (reply, answer) in replies.into_iter().zip(answers) {
                // A caller that stopped waiting has dropped its receiver; its operation still happened.
                if let Err(answer) = reply.send(answer) {
                    unclaimed(answer);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Each caller gets its own answer, and operations that arrive while a call is out share the next call.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_each_caller_and_groups_waiting_operations() {
        let c = Arc::new(GroupCommit::<u32, u32>::new(1000, 1));
        let calls = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..200u32)
            .map(|i| {
                let (c, calls) = (c.clone(), calls.clone());
                tokio::spawn(async move {
                    c.submit(i, 1, move |items: Vec<u32>| {
                        let calls = calls.clone();
                        async move {
                            calls.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            items.into_iter().map(|x| x * 2).collect()
                        }
                    })
                    .await
                })
            })
            .collect();
        for (i, t) in tasks.into_iter().enumerate() {
            assert_eq!(t.await.unwrap(), Some(i as u32 * 2));
        }
        let calls = calls.load(Ordering::SeqCst);
        assert!(
            calls < 200,
            "200 concurrent operations took {calls} calls: none were grouped"
        );
    }

    /// A group never exceeds the weight limit, except an operation heavier than the limit, which goes alone.
    #[tokio::test]
    async fn respects_the_weight_limit() {
        let c = Arc::new(GroupCommit::<usize, usize>::new(10, 1));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let flush = {
            let seen = seen.clone();
            move |items: Vec<usize>| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(items.iter().sum::<usize>());
                    tokio::task::yield_now().await;
                    items
                }
            }
        };
        let weights = [4usize, 4, 4, 25, 3, 3, 3, 3];
        let futs = weights.iter().map(|&w| c.submit(w, w, flush.clone()));
        let answers = futures_util::future::join_all(futs).await;
        assert_eq!(answers, weights.iter().map(|&w| Some(w)).collect::<Vec<_>>());
        for &sum in seen.lock().unwrap().iter() {
            assert!(sum <= 10 || sum == 25, "a call carried weight {sum}");
        }
    }

    /// A flush that panics answers `None` to its callers and frees its slot, so later operations still go.
    #[tokio::test]
    async fn survives_a_panicking_flush() {
        let c = Arc::new(GroupCommit::<u32, u32>::new(10, 1));
        let bad = c.submit(1, 1, |_: Vec<u32>| async { panic!("flush failed") }).await;
        assert_eq!(bad, None);
        let good = c.submit(2, 1, |items: Vec<u32>| async move { items }).await;
        assert_eq!(good, Some(2));
    }
}
