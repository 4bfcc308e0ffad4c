//! Job numbers for ids, tube names for topics (see the module above for the rules).

use xxhash_rust::xxh3::xxh3_64;

use crate::store::partition::fixed_id_in;

/// Longest tube name, in bytes (beanstalkd's).
pub const MAX_TUBE_NAME: usize = 200;

/// Prefix of the topics made for tube names that are not topic names.
const MADE_PREFIX: &str = "bs-";

/// Crockford's base 32.
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Characters of the id made from a number before its partition's three.
const HEAD: usize = 23;

/// The number of the k-th (from 1) of partition `p`'s sequence among `partitions`.
pub fn number(k: u64, p: u16, partitions: u16) -> u64 {
    (k - 1) * partitions as u64 + p as u64 + 1
}

/// The partition number `n` (from 1) names.
pub fn partition_of_number(n: u64, partitions: u16) -> u16 {
    ((n - 1) % partitions as u64) as u16
}

/// The id of the job put over the protocol with number `n` (from 1).
pub fn id_of_number(n: u64, partitions: u16) -> String {
    let mut head = [b'0'; HEAD];
    let mut v = n;
    for slot in head.iter_mut().rev() {
        *slot = CROCKFORD[(v & 31) as usize];
        v >>= 5;
        if v == 0 {
            break;
        }
    }
    let head = std::str::from_utf8(&head).expect("base 32 is ASCII");
    fixed_id_in(head, partition_of_number(n, partitions) as u32, partitions as u32)
}

/// The number `id` was made from, when it is such an id.
pub fn number_of_id(id: &str, partitions: u16) -> Option<u64> {
    let b = id.as_bytes();
    if b.len() != HEAD + 3 {
        return None;
    }
    let mut n: u64 = 0;
    for &c in &b[..HEAD] {
        let d = CROCKFORD.iter().position(|&x| x == c)? as u64;
        n = n.checked_mul(32)?.checked_add(d)?;
    }
    (n > 0 && id_of_number(n, partitions) == id).then_some(n)
}

/// Whether `name` is a tube name beanstalkd accepts: 1 to 200 bytes of `A-Z a-z 0-9 - + / ; . $ _ ( )`,
/// not starting with `-`.
pub fn is_tube_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TUBE_NAME
        && name[0] != b'-'
        && name
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || b"-+/;.$_()".contains(&c))
}

/// The topic that holds tube `tube`'s jobs (a valid tube name), and whether it was made (then the
/// mapping back must be stored).
pub fn topic_of_tube(tube: &str) -> (String, bool) {
    if crate::job::validate_topic(tube).is_ok() && !tube.starts_with(MADE_PREFIX) {
        return (tube.to_string(), false);
    }
    let readable: String = tube
        .chars()
        .take(96)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    (
        format!("{MADE_PREFIX}{readable}-{:016x}", xxh3_64(tube.as_bytes())),
        true,
    )
}

/// Whether `topic` was made by [`topic_of_tube`] (its tube name is stored), rather than being its own
/// tube.
pub fn is_made_topic(topic: &str) -> bool {
    topic.starts_with(MADE_PREFIX)
}

/// The partition jobs put over the protocol into `topic` go to: one per topic, so that a tube's
/// priority and number order hold exactly among them (one ready queue).
pub fn home_partition(topic: &str, partitions: u16) -> u16 {
    (xxh3_64(format!("tube:{topic}").as_bytes()) % partitions as u64) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::partition::partition_of;

    #[test]
    fn numbers_name_their_partition_and_ids_sort_like_numbers() {
        for parts in [1u16, 7, 256, 4096] {
            let mut last = String::new();
            for k in [1u64, 2, 3, 31, 32, 33, 1 << 20, u32::MAX as u64] {
                let mut ps = vec![0, parts / 2, parts - 1];
                ps.dedup();
                for p in ps {
                    let n = number(k, p, parts);
                    assert_eq!(partition_of_number(n, parts), p);
                    let id = id_of_number(n, parts);
                    assert_eq!(partition_of(&id, parts as u32), p as u32, "{id}");
                    assert_eq!(number_of_id(&id, parts), Some(n));
                    assert!(crate::job::validate_id(&id).is_ok());
                    if p == 0 {
                        assert!(last < id, "{last} < {id}");
                        last = id;
                    }
                }
            }
        }
        assert_eq!(number(1, 0, 1), 1);
        assert_eq!(number(2, 0, 1), 2);
        assert_eq!(number_of_id("01ARZ3NDEKTSV4RRFFQ69G5FAV", 256), None);
        assert_eq!(number_of_id("order-1", 256), None);
        assert_eq!(number_of_id("00000000000000000000000000", 1), None);
    }

    #[test]
    fn tubes_map_to_topics_one_to_one() {
        assert_eq!(topic_of_tube("default"), ("default".into(), false));
        assert_eq!(topic_of_tube("orders.close_1"), ("orders.close_1".into(), false));
        let (a, made) = topic_of_tube("a+b");
        assert!(made && a.starts_with("bs-a_b-"));
        assert_ne!(topic_of_tube("a+b").0, topic_of_tube("a/b").0);
        let (b, made) = topic_of_tube("bs-x");
        assert!(made && b != "bs-x");
        let long = "x".repeat(200);
        let (t, made) = topic_of_tube(&long);
        assert!(made && crate::job::validate_topic(&t).is_ok(), "{t}");
        for tube in ["a+b", "$(x);/y", "bs-x", &long] {
            assert!(crate::job::validate_topic(&topic_of_tube(tube).0).is_ok());
        }
        assert!(is_tube_name(b"a+b/c;d.e$f_g(h)-"));
        assert!(!is_tube_name(b"-a") && !is_tube_name(b"") && !is_tube_name(b"a b"));
        assert!(is_tube_name(long.as_bytes()) && !is_tube_name("x".repeat(201).as_bytes()));
    }
}
