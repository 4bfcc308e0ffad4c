//! Partitions: the fixed number of parts every installation's jobs are spread over, and which one holds a
//! job.
//!
//! All keys of a partition share one Redis Cluster hash tag, so every script touches one slot and stays
//! atomic on a cluster; Redis's own tools move whole partitions between nodes, and no job ever changes
//! partition. The tags are chosen so that the partitions sit evenly spaced over the 16,384 slots: a
//! cluster whose slots are balanced (`redis-cli --cluster rebalance`) then carries an even share of
//! partitions on every primary, within one partition, however few partitions there are.
//!
//! A key of a topic (flow, coalescing or deduplication key) maps to one of the topic's key partitions:
//! `key_partitions` of them, evenly spaced from a place the topic's name picks. Fewer than all gives a
//! batch of one topic's keyed jobs fewer partitions to touch (see docs/architecture.md#key-partitions).
//!
//! A producer-given id maps to a partition by a stable hash. A server-made id is a ULID whose last three
//! characters are chosen so that the same hash lands on the partition the server picked (one that
//! answers, in turn), so an id always says where its job lives, with no lookup.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rand::Rng;
use xxhash_rust::xxh3::xxh3_64;

/// Slots in a Redis Cluster.
pub const SLOTS: u32 = 16_384;

/// Most partitions an installation may have: each needs a slot range of its own of at least four
/// slots, and more partitions than that buys nothing a cluster can use.
pub const MAX_PARTITIONS: u32 = 4096;

/// The partition count used when an installation is created without `redis.partitions`: enough for
/// 12 primaries to carry 21 or 22 each (and 128 primaries 2 each), few enough that a single Redis pays
/// nothing measurable for the ones it does not need (see docs/architecture.md#partitions).
pub const DEFAULT_PARTITIONS: u32 = 256;

/// The key partitions of a new installation without `redis.key_partitions` (at most its partitions):
/// a batch of keyed pushes to one topic then touches at most 16 partitions, and a cluster of up to 16
/// primaries still carries a share of every topic's keys.
pub const DEFAULT_KEY_PARTITIONS: u32 = 16;

/// Crockford's base 32, the alphabet of ULIDs.
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// The partitions of one installation: their hash tags, and which ones answered at last contact.
#[derive(Debug, Clone)]
pub struct Partitions {
    /// Shared between the clones every request makes.
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Hash tag of each partition (without braces), e.g. `17.403`.
    tags: Vec<String>,
    /// How many partitions one topic's keys are spread over (at most `tags.len()`).
    key_partitions: u32,
    /// Partition of each tag, to read a partition back from a key or channel name.
    by_tag: HashMap<String, u16>,
    /// Whether the last operation on each partition reached Redis.
    up: Vec<AtomicBool>,
    /// Where the next server-made id starts looking for a partition that is up.
    next: AtomicUsize,
}

impl Partitions {
    /// `count` partitions (1 to [`MAX_PARTITIONS`]; checked by the config), laid out as a new
    /// installation is: a topic's keys over [`default_key_partitions`] of them.
    pub fn new(count: u32) -> Self {
        Self::with_key_partitions(count, default_key_partitions(count))
    }

    /// `count` partitions, a topic's keys spread over `key_partitions` of them (1 to `count`; the
    /// installation's layout says how many).
    pub fn with_key_partitions(count: u32, key_partitions: u32) -> Self {
        let tags: Vec<String> = (0..count).map(|p| tag_for(p, count)).collect();
        let by_tag = tags.iter().enumerate().map(|(p, t)| (t.clone(), p as u16)).collect();
        Partitions {
            inner: Arc::new(Inner {
                up: (0..count).map(|_| AtomicBool::new(true)).collect(),
                tags,
                key_partitions: key_partitions.clamp(1, count),
                by_tag,
                next: AtomicUsize::new(rand::rng().random_range(0..count as usize)),
            }),
        }
    }

    /// How many there are.
    pub fn count(&self) -> u16 {
        self.inner.tags.len() as u16
    }

    /// Every partition number.
    pub fn all(&self) -> std::ops::Range<u16> {
        0..self.count()
    }

    /// Partition `p`'s hash tag, without braces.
    pub fn tag(&self, p: u16) -> &str {
        &self.inner.tags[p as usize]
    }

    /// The partition whose hash tag is `tag`.
    pub fn of_tag(&self, tag: &str) -> Option<u16> {
        self.inner.by_tag.get(tag).copied()
    }

    /// The partition that holds job `id`.
    pub fn of_id(&self, id: &str) -> u16 {
        partition_of(id, self.count() as u32) as u16
    }

    /// How many partitions one topic's keys are spread over.
    pub fn key_partitions(&self) -> u16 {
        self.inner.key_partitions as u16
    }

    /// The partition of a key of `topic` (a deduplication, coalescing or flow key): every job and every
    /// piece of state of the key is there, so one script sees them all. With a key partition per
    /// partition (an installation from before key partitions, or one created so), a stable hash of
    /// `<topic>:<key>` over all partitions; else one of the topic's key partitions by a hash of the same,
    /// so a call's keyed jobs of one topic meet in few partitions.
    pub fn of_key(&self, topic: &str, key: &str) -> u16 {
        let name = format!("{topic}:{key}");
        match self.spread() {
            Some(spread) => self.key_partition(topic, xxh3_64(name.as_bytes()) % spread),
            None => self.of_id(&name),
        }
    }

    /// The partitions that may hold keys of `topic` (its key partitions, in order; every partition when
    /// there is a key partition per partition), so what reads a topic's keys asks only those.
    pub fn of_topic_keys(&self, topic: &str) -> Vec<u16> {
        let Some(spread) = self.spread() else {
            return self.all().collect();
        };
        let mut ps: Vec<u16> = (0..spread).map(|k| self.key_partition(topic, k)).collect();
        ps.sort_unstable();
        ps
    }

    /// The key partitions per topic, when fewer than the partitions (`None`: a key partition per
    /// partition, the placement of before).
    fn spread(&self) -> Option<u64> {
        let spread = self.inner.key_partitions as u64;
        (spread < self.count() as u64).then_some(spread)
    }

    /// `topic`'s `k`-th key partition: `k` evenly spaced steps from where the topic's name starts it.
    fn key_partition(&self, topic: &str, k: u64) -> u16 {
        let (count, spread) = (self.count() as u64, self.inner.key_partitions as u64);
        ((xxh3_64(topic.as_bytes()) % count + k * count / spread) % count) as u16
    }

    /// A fresh server-made id and its partition: the next partition, in turn, that answered at last
    /// contact (any, when none did), so pushes without an id spread evenly and avoid a partition that is
    /// down. `avoid` is skipped too (it just failed).
    pub fn fresh_id(&self, avoid: Option<u16>) -> (String, u16) {
        let p = self.next_up(avoid);
        (self.fresh_in(p), p)
    }

    /// The next partition, in turn, that answered at last contact (any, when none did), other than `avoid`.
    pub fn next_up(&self, avoid: Option<u16>) -> u16 {
        let n = self.count() as usize;
        let start = self.inner.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| ((start + k) % n) as u16)
            .find(|&p| Some(p) != avoid && self.is_up(p))
            .unwrap_or((start % n) as u16)
    }

    /// A fresh server-made id (a ULID) in partition `p`.
    pub fn fresh_in(&self, p: u16) -> String {
        id_in(&ulid::Ulid::new().to_string(), p as u32, self.count() as u32)
    }

    /// Whether the last operation on partition `p` reached Redis.
    pub fn is_up(&self, p: u16) -> bool {
        self.inner.up[p as usize].load(Ordering::Relaxed)
    }

    /// Records whether an operation on partition `p` reached Redis.
    pub fn set_up(&self, p: u16, up: bool) {
        self.inner.up[p as usize].store(up, Ordering::Relaxed);
    }
}

/// The key partitions of a new installation of `count` partitions without `redis.key_partitions`.
pub fn default_key_partitions(count: u32) -> u32 {
    DEFAULT_KEY_PARTITIONS.min(count)
}

/// The Redis Cluster slot of a key or hash tag (CRC16/XMODEM of the tag, mod 16,384).
pub fn slot_of(tag: &str) -> u16 {
    (crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) as u32 % SLOTS) as u16
}

/// Partition `p`'s tag: `<p>.<k>` with the smallest `k` whose slot falls in the `p`-th of `count` equal
/// ranges of slots. Deterministic, so every process computes the same tags.
fn tag_for(p: u32, count: u32) -> String {
    let (lo, hi) = (p * SLOTS / count, (p + 1) * SLOTS / count);
    (0u32..)
        .map(|k| format!("{p}.{k}"))
        .find(|t| (lo..hi).contains(&(slot_of(t) as u32)))
        .expect("some tag falls in every range")
}

/// The value of a Crockford digit.
fn digit(c: u8) -> u32 {
    CROCKFORD.iter().position(|&d| d == c).unwrap_or(0) as u32
}

/// Partition of an id among `count`. A ULID (26 characters of Crockford's base 32, what the server
/// makes): a hash of its first 23 characters plus its last three read as base-32 digits, which lets a
/// server-made id pick its partition, and is even for any ULIDs (their last characters are random).
/// Any other id: a hash of the whole id, even for sequential ids such as order numbers. A derived id
/// (`<parent>~<suffix>`, [`crate::job::CHILD_SEPARATOR`]) is in its root's partition: the part before its
/// first `~`, so a job and every job it starts live in one partition (no id a producer gives holds `~`).
pub fn partition_of(id: &str, count: u32) -> u32 {
    let root = id.split(crate::job::CHILD_SEPARATOR).next().unwrap_or(id);
    let b = root.as_bytes();
    if b.len() != 26 || !b.iter().all(|c| CROCKFORD.contains(c)) {
        return (xxh3_64(b) % count as u64) as u32;
    }
    let (head, tail) = b.split_at(b.len() - 3);
    let v = digit(tail[0]) * 1024 + digit(tail[1]) * 32 + digit(tail[2]);
    ((xxh3_64(head) % count as u64) as u32 + v) % count
}

/// `head` (23 characters of Crockford's base 32) and the three characters that put the id in partition `p`
/// of `count`, the same every time (the beanstalkd protocol's ids are made from their numbers so, see
/// [`crate::beanstalkd`]).
pub(crate) fn fixed_id_in(head: &str, p: u32, count: u32) -> String {
    let h = (xxh3_64(head.as_bytes()) % count as u64) as u32;
    let v = (p + count - h) % count;
    let mut id = head.to_string();
    for shift in [10, 5, 0] {
        id.push(CROCKFORD[((v >> shift) & 31) as usize] as char);
    }
    id
}

/// `ulid` with its last three characters set so that it falls in partition `p` of `count` (their other
/// values stay random).
fn id_in(ulid: &str, p: u32, count: u32) -> String {
    let head = &ulid[..ulid.len() - 3];
    let h = (xxh3_64(head.as_bytes()) % count as u64) as u32;
    let base = (p + count - h) % count;
    // Any base + k·count below 32,768 does; pick k at random to keep the ids' randomness.
    let k = rand::rng().random_range(0..=(32_767 - base) / count);
    let v = base + k * count;
    let mut id = head.to_string();
    for shift in [10, 5, 0] {
        id.push(CROCKFORD[((v >> shift) & 31) as usize] as char);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_ids_spread_evenly_and_stay_put() {
        let ids: Vec<String> = (0..64_000).map(|i| format!("order-{i}")).collect();
        let mut per = vec![0usize; 64];
        for id in &ids {
            let p = partition_of(id, 64);
            assert_eq!(p, partition_of(id, 64));
            per[p as usize] += 1;
        }
        for n in &per {
            assert!((800..1200).contains(n), "{per:?}");
        }
        assert!(ids.iter().all(|id| partition_of(id, 1) == 0));
        assert!(partition_of("a", 7) < 7 && partition_of("", 7) < 7);
        // Producer-given ULIDs spread evenly too.
        let mut per = vec![0usize; 64];
        for _ in 0..64_000 {
            per[partition_of(&ulid::Ulid::new().to_string(), 64) as usize] += 1;
        }
        assert!(per.iter().all(|n| (800..1200).contains(n)), "{per:?}");
    }

    #[test]
    fn a_derived_id_is_in_its_roots_partition() {
        let parts = Partitions::new(256);
        for root in ["order-7".to_string(), parts.fresh_in(17)] {
            let p = parts.of_id(&root);
            for child in ["0", "mail", "0~3", "sms~12~0"] {
                assert_eq!(parts.of_id(&format!("{root}~{child}")), p, "{root}~{child}");
            }
        }
        assert_eq!(parts.of_id(&parts.fresh_in(17)), 17);
    }

    #[test]
    fn server_ids_land_where_they_were_sent_and_stay_ulids() {
        for count in [1, 2, 7, 256, 1024, MAX_PARTITIONS] {
            let parts = Partitions::new(count);
            for _ in 0..200 {
                let (id, p) = parts.fresh_id(None);
                assert_eq!(parts.of_id(&id), p, "{id} in {count}");
                assert!(id.parse::<ulid::Ulid>().is_ok(), "{id}");
            }
        }
    }

    #[test]
    fn fresh_ids_take_partitions_in_turn_and_avoid_those_down() {
        let parts = Partitions::new(8);
        let mut seen = [0; 8];
        for _ in 0..80 {
            seen[parts.fresh_id(None).1 as usize] += 1;
        }
        assert_eq!(seen, [10; 8]);
        parts.set_up(3, false);
        assert!((0..100).all(|_| parts.fresh_id(Some(5)).1 != 3));
        assert!((0..100).all(|_| parts.fresh_id(Some(5)).1 != 5));
        for p in parts.all() {
            parts.set_up(p, false);
        }
        assert!(parts.fresh_id(None).1 < 8, "with none up, any will do");
    }

    #[test]
    fn tags_sit_evenly_over_the_slots() {
        for count in [1, 3, 12, 256, 1000, MAX_PARTITIONS] {
            let parts = Partitions::new(count);
            let mut last = None;
            for p in parts.all() {
                let slot = slot_of(parts.tag(p)) as u32;
                assert!((p as u32 * SLOTS / count..(p as u32 + 1) * SLOTS / count).contains(&slot));
                assert!(last < Some(slot));
                last = Some(slot);
                assert_eq!(parts.of_tag(parts.tag(p)), Some(p));
            }
        }
        // A 12-primary cluster with balanced slots (1365 or 1366 each) holds 21 or 22 of 256.
        let parts = Partitions::new(256);
        for node in 0..12u32 {
            let (lo, hi) = (node * SLOTS / 12, (node + 1) * SLOTS / 12);
            let n = parts
                .all()
                .filter(|&p| (lo..hi).contains(&(slot_of(parts.tag(p)) as u32)))
                .count();
            assert!((21..=22).contains(&n), "node {node}: {n}");
        }
    }

    #[test]
    fn a_topics_keys_spread_evenly_over_its_key_partitions() {
        let parts = Partitions::new(256);
        assert_eq!(parts.key_partitions(), 16);
        for topic in ["mail", "hooks", "t"] {
            let mut per = HashMap::new();
            for k in 0..16_000 {
                *per.entry(parts.of_key(topic, &format!("customer-{k}"))).or_insert(0) += 1;
            }
            assert_eq!(per.len(), 16, "{topic}: {per:?}");
            assert!(per.values().all(|n| (800..1200).contains(n)), "{topic}: {per:?}");
            // Evenly spaced: 16 apart, so a cluster's primaries each carry a share.
            let mut ps: Vec<u16> = per.keys().copied().collect();
            ps.sort();
            let gaps: Vec<u16> = ps.windows(2).map(|w| w[1] - w[0]).collect();
            assert!(gaps.iter().all(|&g| g == 16), "{topic}: {ps:?}");
        }
        // The same key of another topic may land elsewhere; the same one always lands in one place.
        assert_eq!(parts.of_key("mail", "k"), Partitions::new(256).of_key("mail", "k"));
        // The topic's key partitions are exactly those its keys land in.
        for topic in ["mail", "hooks"] {
            let of_topic = parts.of_topic_keys(topic);
            assert_eq!(of_topic.len(), 16);
            let mut landed: Vec<u16> = (0..2000).map(|k| parts.of_key(topic, &k.to_string())).collect();
            landed.sort();
            landed.dedup();
            assert_eq!(landed, of_topic, "{topic}");
        }
        assert_eq!(
            Partitions::with_key_partitions(8, 8).of_topic_keys("t"),
            (0..8).collect::<Vec<u16>>()
        );
    }

    #[test]
    fn a_key_partition_per_partition_keeps_the_placement_of_before() {
        for count in [1, 7, 256] {
            let parts = Partitions::with_key_partitions(count, count);
            for k in 0..100 {
                let key = format!("k{k}");
                assert_eq!(parts.of_key("t", &key) as u32, partition_of(&format!("t:{key}"), count));
            }
        }
        // Fewer partitions than the default key partitions: every partition takes keys.
        assert_eq!(Partitions::new(8).key_partitions(), 8);
        assert_eq!(Partitions::with_key_partitions(8, 100).key_partitions(), 8);
        // Uneven spacing still puts every key in range.
        let parts = Partitions::with_key_partitions(10, 3);
        let mut seen: Vec<u16> = (0..300).map(|k| parts.of_key("t", &k.to_string())).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(seen.iter().all(|&p| p < 10));
    }

    #[test]
    fn slots_match_redis() {
        // Values from Redis's CLUSTER KEYSLOT.
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("123456789"), 12739);
    }
}
