//! Which partitions may hold ready jobs of which topics, as this process knows it, so that a reserve goes
//! straight to partitions with work instead of asking every partition.
//!
//! Fed by the ready wake-ups (a script publishes on its partition's channel when a topic's queue there
//! stops being empty), and emptied by reserves that found a partition's queues empty. A topic this
//! process has not followed yet, or every topic after the subscription was lost (wake-ups may have been
//! missed), is read once from the partitions' counts; after that a reserve costs calls only to the
//! partitions that have ready jobs, whatever the partition count.
//!
//! The index only errs on the safe side: a stale entry costs one empty reserve call, and an entry is
//! dropped only when no wake-up for it arrived since the reserve that found the queue empty was sent.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use rand::seq::SliceRandom;
use tokio::sync::watch;

/// The index. One per process (shared by every clone of the queue).
#[derive(Debug, Default)]
pub struct ReadyIndex {
    /// Per topic: the partitions that may have ready jobs, and the waiters' signal.
    topics: Mutex<Topics>,
    /// Whether a listener feeds the index wake-ups; without one every reserve reads the counts first.
    listening: AtomicBool,
}

#[derive(Debug, Default)]
struct Topics {
    /// Topic → its entry.
    by_topic: HashMap<String, Entry>,
    /// Bumped by every mark, so a clear can tell whether a mark came after the reserve it follows.
    epoch: u64,
}

#[derive(Debug)]
struct Entry {
    /// Partition → epoch of the mark that put it here.
    partitions: HashMap<u16, u64>,
    /// Whether `partitions` is complete (read from the counts since the last subscription).
    synced: bool,
    /// Bumped when the topic may have become ready, to wake long polls.
    signal: watch::Sender<u64>,
}

impl Default for Entry {
    fn default() -> Self {
        Entry {
            partitions: HashMap::new(),
            synced: false,
            signal: watch::channel(0).0,
        }
    }
}

impl ReadyIndex {
    /// A receiver that changes whenever `topic` may have become ready.
    pub fn subscribe(&self, topic: &str) -> watch::Receiver<u64> {
        let mut t = self.topics.lock().expect("ready index lock");
        t.by_topic.entry(topic.to_string()).or_default().signal.subscribe()
    }

    /// Partition `p` may have ready jobs of `topic` (a wake-up, or a read of the counts).
    pub fn mark(&self, topic: &str, p: u16) {
        let mut t = self.topics.lock().expect("ready index lock");
        t.epoch += 1;
        let epoch = t.epoch;
        let entry = t.by_topic.entry(topic.to_string()).or_default();
        entry.partitions.insert(p, epoch);
        entry.signal.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Wake-ups may have been lost (the subscription was (re)made): every topic is read again from the
    /// counts before its next reserve, and every waiter looks again.
    pub fn resync(&self) {
        let mut t = self.topics.lock().expect("ready index lock");
        for entry in t.by_topic.values_mut() {
            entry.synced = false;
            entry.signal.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// A listener now feeds wake-ups (or stopped: `false`).
    pub fn set_listening(&self, on: bool) {
        self.listening.store(on, Ordering::Relaxed);
        self.resync();
    }

    /// The topics among `topics` whose partitions must be read from the counts before a reserve.
    pub fn unsynced(&self, topics: &[String]) -> Vec<String> {
        let listening = self.listening.load(Ordering::Relaxed);
        let t = self.topics.lock().expect("ready index lock");
        topics
            .iter()
            .filter(|topic| !listening || t.by_topic.get(*topic).is_none_or(|e| !e.synced))
            .cloned()
            .collect()
    }

    /// Records a read of the counts of `topic` begun at `epoch`: `ready` are its partitions with ready
    /// jobs. Partitions marked since stay.
    pub fn synced(&self, topic: &str, epoch: u64, ready: &[u16]) {
        let mut t = self.topics.lock().expect("ready index lock");
        let entry = t.by_topic.entry(topic.to_string()).or_default();
        entry.partitions.retain(|_, e| *e > epoch);
        for &p in ready {
            entry.partitions.insert(p, epoch);
        }
        entry.synced = true;
    }

    /// The current epoch, taken before a reserve or a read of the counts.
    pub fn epoch(&self) -> u64 {
        self.topics.lock().expect("ready index lock").epoch
    }

    /// The partitions to try for `topics`, highest priority first: those of the first topic in random
    /// order (so reservers spread), then those of the next topic not listed yet, and so on.
    pub fn candidates(&self, topics: &[String]) -> Vec<u16> {
        let t = self.topics.lock().expect("ready index lock");
        let mut out: Vec<u16> = Vec::new();
        let mut rng = rand::rng();
        for topic in topics {
            if let Some(entry) = t.by_topic.get(topic) {
                let mut ps: Vec<u16> = entry.partitions.keys().copied().filter(|p| !out.contains(p)).collect();
                ps.shuffle(&mut rng);
                out.extend(ps);
            }
        }
        out
    }

    /// A reserve sent at `epoch` found every queue of `topics` in partition `p` empty: drop `p` for them,
    /// unless a wake-up marked it since.
    pub fn clear(&self, topics: &[String], p: u16, epoch: u64) {
        let mut t = self.topics.lock().expect("ready index lock");
        for topic in topics {
            if let Some(entry) = t.by_topic.get_mut(topic)
                && entry.partitions.get(&p).is_some_and(|e| *e <= epoch)
            {
                entry.partitions.remove(&p);
            }
        }
    }
}

/// Waits until any of `receivers` changes.
pub async fn changed_any(receivers: &mut [watch::Receiver<u64>]) {
    if receivers.is_empty() {
        return std::future::pending().await;
    }
    let futs = receivers.iter_mut().map(|r| Box::pin(r.changed()));
    // An error means the sender is gone, which only happens at shutdown: treat it as a wake-up.
    let _ = futures_util::future::select_all(futs).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn priority_order_then_clear_unless_marked_since() {
        let ix = ReadyIndex::default();
        ix.set_listening(true);
        assert_eq!(ix.unsynced(&t(&["a", "b"])), t(&["a", "b"]));
        let e = ix.epoch();
        ix.synced("a", e, &[3]);
        ix.synced("b", e, &[5, 3]);
        assert!(ix.unsynced(&t(&["a", "b"])).is_empty());
        let c = ix.candidates(&t(&["a", "b"]));
        assert_eq!(c, [3, 5], "a's partitions first, then b's not yet listed");
        // A reserve begins; a wake-up for b in 5 arrives before its empty answer: 5 stays for b.
        let before = ix.epoch();
        ix.mark("b", 5);
        ix.clear(&t(&["a", "b"]), 5, before);
        ix.clear(&t(&["a", "b"]), 3, before);
        assert_eq!(ix.candidates(&t(&["a", "b"])), [5]);
        ix.resync();
        assert_eq!(ix.unsynced(&t(&["a", "b"])), t(&["a", "b"]));
    }

    #[test]
    fn without_a_listener_every_reserve_reads_the_counts() {
        let ix = ReadyIndex::default();
        ix.synced("a", 0, &[1]);
        assert_eq!(ix.unsynced(&t(&["a"])), t(&["a"]));
    }
}
