//! A connection's replies, gathered: a pipelining client (many commands in one write) gets its replies
//! in one write per batch of commands read, not one write per reply.
//!
//! The connection loop answers every command already read before it writes ([`Output::flush`] when no
//! further command is at hand), so a client that sends one command and waits gets its reply at once,
//! and one that sends a hundred gets the hundred replies in one `write`. Sending one reply per write was
//! most of dq-server's CPU on the beanstalkd path (the kernel's share of each write). A reserve that must
//! wait for a job writes what is pending after [`FLUSH_WHILE_WAITING`] at the latest, so the replies
//! before it are never held for the length of the wait.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;

/// How long a reserve that waits for a job keeps the replies before it unwritten (a job usually comes
/// sooner, and its reply then goes with them).
pub const FLUSH_WHILE_WAITING: Duration = Duration::from_millis(1);

/// Above this many bytes pending, replies are written at once, whatever follows (a batch of reserves
/// of large jobs must not grow without bound).
const MOST_PENDING: usize = 64 * 1024;

/// The write half of a connection and the replies not yet written.
pub struct Output {
    write: OwnedWriteHalf,
    pending: Vec<u8>,
}

impl Output {
    /// Replies to `write`.
    pub fn new(write: OwnedWriteHalf) -> Self {
        Output {
            write,
            pending: Vec::new(),
        }
    }

    /// Adds a reply; writes what is pending once it passes `MOST_PENDING` (64 KiB).
    pub async fn push(&mut self, reply: &[u8]) -> std::io::Result<()> {
        self.pending.extend_from_slice(reply);
        if self.pending.len() >= MOST_PENDING {
            self.flush().await?;
        }
        Ok(())
    }

    /// Whether replies wait to be written.
    pub fn is_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Writes the pending replies, in one write.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        if !self.pending.is_empty() {
            self.write.write_all(&self.pending).await?;
            self.pending.clear();
        }
        Ok(())
    }
}
