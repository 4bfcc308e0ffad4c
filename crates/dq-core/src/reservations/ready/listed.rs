//! A set of partitions, each with the epoch of the mark that listed it, for the ready index: insert,
//! remove and look-up in O(1) by partition number, no hashing, and iteration from any point, so a
//! reserve that needs one partition of 256 does not sort or shuffle them all.

/// The partitions listed for one topic.
#[derive(Debug, Default)]
pub(super) struct Listed {
    /// The listed partitions, in no particular order.
    order: Vec<u16>,
    /// Partition → its position in `order` plus one (0: not listed). Grown on demand.
    at: Vec<u32>,
    /// Partition → the epoch of the mark that listed it (meaningful while listed).
    epochs: Vec<u64>,
}

impl Listed {
    /// Lists `p` (again) with `epoch`.
    pub(super) fn insert(&mut self, p: u16, epoch: u64) {
        let i = p as usize;
        if self.at.len() <= i {
            self.at.resize(i + 1, 0);
            self.epochs.resize(i + 1, 0);
        }
        if self.at[i] == 0 {
            self.order.push(p);
            self.at[i] = self.order.len() as u32;
        }
        self.epochs[i] = epoch;
    }

    /// Whether `p` is listed.
    pub(super) fn contains(&self, p: u16) -> bool {
        self.at.get(p as usize).is_some_and(|&a| a != 0)
    }

    /// Unlists `p` when its mark is not newer than `epoch`.
    pub(super) fn remove_unless_newer(&mut self, p: u16, epoch: u64) {
        if self.contains(p) && self.epochs[p as usize] <= epoch {
            self.remove(p);
        }
    }

    /// Unlists every partition whose mark is not newer than `epoch`.
    pub(super) fn retain_newer(&mut self, epoch: u64) {
        let old: Vec<u16> = self
            .order
            .iter()
            .copied()
            .filter(|&p| self.epochs[p as usize] <= epoch)
            .collect();
        old.into_iter().for_each(|p| self.remove(p));
    }

    fn remove(&mut self, p: u16) {
        let i = self.at[p as usize] as usize - 1;
        self.order.swap_remove(i);
        if let Some(&moved) = self.order.get(i) {
            self.at[moved as usize] = i as u32 + 1;
        }
        self.at[p as usize] = 0;
    }

    /// Nothing listed.
    pub(super) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Every listed partition, beginning at the one in position `start` (modulo their number).
    pub(super) fn from(&self, start: usize) -> impl Iterator<Item = u16> + '_ {
        let n = self.order.len();
        (0..n).map(move |k| self.order[(start + k) % n])
    }

    /// How many are listed.
    pub(super) fn len(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_and_walk() {
        let mut l = Listed::default();
        for (p, e) in [(5, 1), (300, 2), (0, 3), (5, 4)] {
            l.insert(p, e);
        }
        assert_eq!(l.len(), 3);
        let mut all: Vec<u16> = l.from(1).collect();
        assert_eq!(all.len(), 3);
        all.sort();
        assert_eq!(all, [0, 5, 300]);
        // 5 was marked again at 4: a clear from before that keeps it.
        l.remove_unless_newer(5, 3);
        assert!(l.contains(5));
        l.remove_unless_newer(5, 4);
        assert!(!l.contains(5) && l.contains(300) && l.contains(0));
        l.retain_newer(2);
        assert_eq!(l.from(0).collect::<Vec<_>>(), [0]);
        l.remove_unless_newer(0, 9);
        assert!(l.is_empty() && !l.contains(7000));
    }
}
