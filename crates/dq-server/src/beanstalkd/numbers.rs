//! Numbers for jobs put over the protocol, taken from the partitions' sequences in blocks, so a put
//! costs no call of its own for its number (see [`dq_core::beanstalkd`] for what a number is).
//!
//! The numbers a server hands out rise in the order of its puts across every tube, whatever the tubes'
//! partitions, as beanstalkd's one counter does: its reserve over several watched tubes takes, among
//! their first jobs of one priority, the lowest number, the one put first. A partition's number is
//! therefore never lower than the last this server handed out in any partition: the numbers of its block
//! below that are skipped, and a block wholly below it is replaced by one from a least k on
//! (`bs_numbers.lua`). Numbers only need to be unique and rising, so the skipped ones are simply unused.

use std::collections::HashMap;

use dq_core::beanstalkd::number;
use dq_core::{Queue, Result};
use tokio::sync::Mutex;

/// Numbers one call takes from a partition's sequence. A server that stops leaves the rest of its block
/// unused: numbers then jump, as they may in beanstalkd after a restart.
const BLOCK: u64 = 100;

/// This server's unused numbers.
#[derive(Debug, Default)]
pub struct Numbers {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Per partition: the next k and the last k of its block.
    blocks: HashMap<u16, (u64, u64)>,
    /// The last number handed out, in any partition (0: none yet).
    last: u64,
}

impl Numbers {
    /// The next number of partition `p`: above every number this server handed out before.
    pub async fn next(&self, queue: &Queue, p: u16) -> Result<u64> {
        let partitions = queue.partitions().count();
        let mut state = self.state.lock().await;
        let least = least_k(state.last, p, partitions);
        let block = state.blocks.entry(p).or_insert((1, 0));
        block.0 = block.0.max(least);
        if block.0 > block.1 {
            let last = queue.beanstalkd().bs_take_numbers(p, BLOCK, least).await?;
            *block = (last - BLOCK + 1, last);
        }
        let k = block.0;
        block.0 += 1;
        let n = number(k, p, partitions);
        state.last = n;
        Ok(n)
    }
}

/// The least k whose number in partition `p` (of `partitions`) is above `last`.
fn least_k(last: u64, p: u16, partitions: u16) -> u64 {
    // number(k) = (k - 1)·P + p + 1 > last  ⇔  k - 1 > (last - p - 1) / P.
    match last.checked_sub(p as u64 + 1) {
        None => 1,
        Some(over) => over / partitions as u64 + 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_k_is_the_first_number_above_the_last() {
        for partitions in [1u16, 7, 256] {
            for p in [0, partitions / 2, partitions - 1] {
                for last in [0u64, 1, 2, p as u64, p as u64 + 1, p as u64 + 2, 1_000, 65_536, 1 << 40] {
                    let k = least_k(last, p, partitions);
                    assert!(number(k, p, partitions) > last, "{partitions} {p} {last}");
                    assert!(
                        k == 1 || number(k - 1, p, partitions) <= last,
                        "{partitions} {p} {last}"
                    );
                }
            }
        }
    }
}
