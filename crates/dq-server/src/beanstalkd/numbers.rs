//! Numbers for jobs put over the protocol, taken from the partitions' sequences in blocks, so a put
//! costs no call of its own for its number (see [`dq_core::beanstalkd`] for what a number is).

use std::collections::HashMap;

use dq_core::beanstalkd::number;
use dq_core::{Queue, Result};
use tokio::sync::Mutex;

/// Numbers one call takes from a partition's sequence. A server that stops leaves the rest of its block
/// unused: numbers then jump, as they may in beanstalkd after a restart.
const BLOCK: u64 = 100;

/// This server's unused numbers, per partition: the next k and the last k of its block.
#[derive(Debug, Default)]
pub struct Numbers {
    blocks: Mutex<HashMap<u16, (u64, u64)>>,
}

impl Numbers {
    /// The next number of partition `p`.
    pub async fn next(&self, queue: &Queue, p: u16) -> Result<u64> {
        let mut blocks = self.blocks.lock().await;
        let block = blocks.entry(p).or_insert((1, 0));
        if block.0 > block.1 {
            let last = queue.bs_take_numbers(p, BLOCK).await?;
            *block = (last - BLOCK + 1, last);
        }
        let k = block.0;
        block.0 += 1;
        Ok(number(k, p, queue.partitions().count()))
    }
}
