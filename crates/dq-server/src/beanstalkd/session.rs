//! One protocol connection: its used tube, watched tubes and reservations ([`super::held`]), and the
//! commands that need them (the verbs on reserved jobs, use/watch/ignore). Putting is in
//! [`super::put`], reserving in [`super::reserve`]; the commands that only read are in [`super::verbs`].
//!
//! Reservations belong to the connection that made them: it alone may delete, release, bury or touch
//! them (another connection gets `NOT_FOUND`, as in beanstalkd), and when it closes, quits or its
//! server drains, what it still holds goes back to ready at once (`release.lua`). The reservation itself
//! is dq's: fenced by its receipt and ended by dq-timer at its deadline, so a connection that hangs
//! loses its jobs after their TTR, and a dq-server that dies loses nothing.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use dq_core::beanstalkd::Released;
use dq_core::beanstalkd::{home_partition, number_of_id};
use dq_core::{Error, State};
use futures_util::{FutureExt, StreamExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;

use super::Shared;
use super::codec::{Codec, Frame};
use super::command::{Command, Refused};
use super::counters::TubeGauge;
use super::held::{Held, HeldJobs};
use super::output::Output;
use super::reply;

/// Most `delete` commands of one connection acked side by side.
const MOST_DELETES: usize = 100;

/// The frames of a connection.
pub type Frames = FramedRead<OwnedReadHalf, Codec>;

/// What to do after a command.
pub enum Next {
    /// Send this reply and read the next command.
    Reply(Vec<u8>),
    /// Close the connection (`quit`, or the client went away).
    Close,
}

/// A tube as a connection names it, and the topic that holds its jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tube {
    /// The name the client uses.
    pub name: String,
    /// dq's topic.
    pub topic: String,
    /// The partition its jobs put over the protocol go to (`dq_core::beanstalkd::home_partition`).
    pub home: u16,
}

/// A connection's state.
pub struct Session {
    pub(super) shared: Arc<Shared>,
    pub(super) used: Tube,
    pub(super) watched: Vec<Tube>,
    pub(super) held: HeldJobs,
    pub(super) producer: bool,
    pub(super) worker: bool,
    /// Frames that arrived while a reserve waited, handled after it.
    pub pending: VecDeque<Frame>,
}

impl Session {
    /// A new connection: using and watching `default`.
    pub fn new(shared: Arc<Shared>) -> Self {
        let default = Tube {
            name: "default".into(),
            topic: "default".into(),
            home: home_partition("default", shared.queue.partitions().count()),
        };
        shared.counters.gauge(|g| {
            g.connections += 1;
            g.total_connections += 1;
        });
        metrics::gauge!("dq_beanstalkd_connections").increment(1.0);
        shared.counters.tube_gauge("default", TubeGauge::Using, 1);
        shared.counters.tube_gauge("default", TubeGauge::Watching, 1);
        Session {
            shared,
            used: default.clone(),
            watched: vec![default],
            held: HeldJobs::default(),
            producer: false,
            worker: false,
            pending: VecDeque::new(),
        }
    }

    /// Whether this connection holds reservations (a draining server keeps it open for them).
    pub fn holds_jobs(&mut self) -> bool {
        self.held.soonest().is_some()
    }

    /// Handles one frame.
    pub async fn handle(&mut self, frame: Frame, frames: &mut Frames, out: &mut Output) -> Next {
        let reply = match frame {
            Frame::TooLong => reply::BAD_FORMAT.to_vec(),
            Frame::TooBig => {
                self.shared.counters.count_command("cmd-put");
                reply::JOB_TOO_BIG.to_vec()
            }
            Frame::PutTrailing => {
                self.shared.counters.count_command("cmd-put");
                reply::BAD_FORMAT.to_vec()
            }
            Frame::Put { line, body, crlf } => {
                self.shared.counters.count_command("cmd-put");
                if !crlf {
                    // beanstalkd made the job, and so took its number, before it read the body.
                    if let Err(e) = self.shared.numbers.next(&self.shared.queue, self.used.home).await {
                        return Next::Reply(internal(e));
                    }
                    reply::EXPECTED_CRLF.to_vec()
                } else {
                    let mut run = vec![(line, body)];
                    self.gather_puts(&mut run, frames);
                    self.put(run).await
                }
            }
            Frame::Line(line) => match super::command::parse(&line) {
                Err(Refused::BadFormat) => reply::BAD_FORMAT.to_vec(),
                Err(Refused::Unknown) => reply::UNKNOWN_COMMAND.to_vec(),
                Ok(Command::Quit) => return Next::Close,
                Ok(Command::Reserve { timeout, with_timeout }) => {
                    return self.reserve(timeout, with_timeout, frames, out).await;
                }
                Ok(Command::Delete(n)) => match self.take_deletable(n) {
                    Some(held) => self.deletes(held, frames).await,
                    None => self.command(Command::Delete(n)).await,
                },
                Ok(command) => self.command(command).await,
            },
        };
        Next::Reply(reply)
    }

    /// The commands other than put, reserve and quit.
    async fn command(&mut self, command: Command) -> Vec<u8> {
        let counted = super::counters::counter_name(&command);
        self.shared.counters.count_command(counted);
        let answer = match command {
            Command::Use(name) => self.use_tube(name).await,
            Command::Watch(name) => self.watch(name).await,
            Command::Ignore(name) => Ok(self.ignore(&name)),
            Command::ReserveJob(n) => self.reserve_job(n).await,
            Command::Delete(n) => self.delete(n).await,
            Command::Release(n, pri, delay) => self.release(n, pri, Some(delay)).await,
            Command::Bury(n, pri) => self.release(n, pri, None).await,
            Command::Touch(n) => self.touch(n).await,
            other => self.read_only(other).await,
        };
        answer.unwrap_or_else(internal)
    }

    /// `delete <id>` of any job but one [`Session::deletes`] takes: a job this connection holds that was
    /// pushed over HTTP is acked (it stays `done` for lookups, as after any ack; a job put over the
    /// protocol leaves nothing, as beanstalkd's delete); a ready, delayed or buried job is deleted; a
    /// job another connection holds is `NOT_FOUND`.
    async fn delete(&mut self, n: u64) -> dq_core::Result<Vec<u8>> {
        let queue = self.shared.queue.clone();
        if let Some(h) = self.held.remove(n) {
            let acked = queue.reservations().ack(&h.id, &h.receipt).await;
            return self.delete_reply(&h.topic, acked);
        }
        let Some(job) = queue.beanstalkd().bs_find(n).await? else {
            return Ok(reply::NOT_FOUND.to_vec());
        };
        if job.state == State::Reserved {
            return Ok(reply::NOT_FOUND.to_vec());
        }
        let cancelled = queue.producer().cancel(&job.id).await;
        self.delete_reply(&job.topic, cancelled)
    }

    /// The reply to a delete of a job of `topic` that was acked or cancelled (`done`), counted for its
    /// tube: `NOT_FOUND` when the job or its reservation was gone meanwhile.
    fn delete_reply(&self, topic: &str, done: dq_core::Result<()>) -> dq_core::Result<Vec<u8>> {
        match done {
            Ok(()) => {
                self.shared.counters.count(&format!("{topic}:cmd-delete"));
                Ok(reply::DELETED.to_vec())
            }
            Err(Error::StaleReceipt | Error::NotFound(_)) => Ok(reply::NOT_FOUND.to_vec()),
            Err(e) => Err(e),
        }
    }

    /// The next command already read (a pipelining client's), without waiting for more: those kept in
    /// `pending` first. None when nothing more has been read yet, or when the connection ended, which
    /// the next read finds again.
    pub(super) fn read_already(&mut self, frames: &mut Frames) -> Option<Frame> {
        self.pending.pop_front().or_else(|| match frames.next().now_or_never() {
            Some(Some(Ok(frame))) => Some(frame),
            _ => None,
        })
    }

    /// The reservation `delete <n>` acks leaving nothing behind, taken from those held: of a job this
    /// connection holds that was put over the protocol (its id made from its number). None for any
    /// other delete.
    fn take_deletable(&mut self, n: u64) -> Option<Held> {
        let count = self.shared.queue.partitions().count();
        if self.held.get(n).is_some_and(|h| number_of_id(&h.id, count).is_some()) {
            self.held.remove(n)
        } else {
            None
        }
    }

    /// A `delete` of `first` ([`Session::take_deletable`]) and such deletes read right behind it (a
    /// pipelining client's, up to [`MOST_DELETES`]): acked side by side, so the group commit sends them
    /// in one call, and answered in turn. The first other command (another delete too, or one of a
    /// number already in the run: no longer held) stays for after them.
    async fn deletes(&mut self, first: Held, frames: &mut Frames) -> Vec<u8> {
        let mut held = vec![first];
        while held.len() < MOST_DELETES {
            let Some(next) = self.read_already(frames) else {
                break;
            };
            let taken = match &next {
                Frame::Line(line) => match super::command::parse(line) {
                    Ok(Command::Delete(n)) => self.take_deletable(n),
                    _ => None,
                },
                _ => None,
            };
            match taken {
                Some(h) => held.push(h),
                None => {
                    self.pending.push_front(next);
                    break;
                }
            }
        }
        let reservations = self.shared.queue.reservations();
        let acks = held.iter().map(|h| reservations.ack_deleting(&h.id, &h.receipt));
        let acked = futures_util::future::join_all(acks).await;
        let mut replies = Vec::new();
        for (h, acked) in held.iter().zip(acked) {
            self.shared.counters.count_command("cmd-delete");
            replies.extend_from_slice(&self.delete_reply(&h.topic, acked).unwrap_or_else(internal));
        }
        replies
    }

    /// `release <id> <pri> <delay>` (`delay` given) and `bury <id> <pri>` (none).
    async fn release(&mut self, n: u64, priority: u32, delay: Option<u32>) -> dq_core::Result<Vec<u8>> {
        let Some(h) = self.held.remove(n) else {
            return Ok(reply::NOT_FOUND.to_vec());
        };
        let (id, receipt) = (h.id, h.receipt);
        let delay_ms = delay.map(|d| d as u64 * 1000);
        Ok(
            match self
                .shared
                .queue
                .beanstalkd()
                .bs_release(&id, &receipt, priority, delay_ms)
                .await?
            {
                Released::Now(State::Dead) => reply::BURIED.to_vec(),
                Released::Now(_) => reply::RELEASED.to_vec(),
                Released::Gone | Released::Stale => reply::NOT_FOUND.to_vec(),
            },
        )
    }

    /// `touch <id>`: the reservation starts its TTR again.
    async fn touch(&mut self, n: u64) -> dq_core::Result<Vec<u8>> {
        let Some(h) = self.held.get(n) else {
            return Ok(reply::NOT_FOUND.to_vec());
        };
        let (id, receipt) = (h.id.clone(), h.receipt.clone());
        match self.shared.queue.reservations().touch(&id, &receipt, None).await {
            Ok(deadline) => {
                self.held.set_deadline(n, local_deadline(deadline));
                Ok(reply::TOUCHED.to_vec())
            }
            Err(Error::StaleReceipt | Error::NotFound(_)) => {
                self.held.remove(n);
                Ok(reply::NOT_FOUND.to_vec())
            }
            Err(e) => Err(e),
        }
    }

    /// `use <tube>`.
    async fn use_tube(&mut self, name: String) -> dq_core::Result<Vec<u8>> {
        let tube = self.shared.tube(name).await?;
        let counters = &self.shared.counters;
        counters.tube_gauge(&self.used.topic, TubeGauge::Using, -1);
        counters.tube_gauge(&tube.topic, TubeGauge::Using, 1);
        let answer = format!("USING {}\r\n", tube.name).into_bytes();
        self.used = tube;
        Ok(answer)
    }

    /// `watch <tube>`.
    async fn watch(&mut self, name: String) -> dq_core::Result<Vec<u8>> {
        let tube = self.shared.tube(name).await?;
        if !self.watched.contains(&tube) {
            self.shared.counters.tube_gauge(&tube.topic, TubeGauge::Watching, 1);
            self.watched.push(tube);
        }
        Ok(format!("WATCHING {}\r\n", self.watched.len()).into_bytes())
    }

    /// `ignore <tube>`.
    fn ignore(&mut self, name: &str) -> Vec<u8> {
        if let Some(i) = self.watched.iter().position(|t| t.name == name) {
            if self.watched.len() < 2 {
                return reply::NOT_IGNORED.to_vec();
            }
            // beanstalkd moves the last watched tube into the gap (`list-tubes-watched` shows it so).
            let tube = self.watched.swap_remove(i);
            self.shared.counters.tube_gauge(&tube.topic, TubeGauge::Watching, -1);
        }
        format!("WATCHING {}\r\n", self.watched.len()).into_bytes()
    }

    /// The connection ends: what it holds goes back to ready at once, and its gauges go.
    pub async fn close(mut self) {
        for h in self.held.drain() {
            if let Err(e) = self
                .shared
                .queue
                .reservations()
                .hand_back(&h.id, &h.receipt, true)
                .await
                && !matches!(e, Error::StaleReceipt | Error::NotFound(_))
            {
                tracing::warn!(error = %e.chain(), id = %h.id, "could not release a closed connection's job; dq-timer will at its TTR");
            }
        }
        let counters = &self.shared.counters;
        counters.tube_gauge(&self.used.topic, TubeGauge::Using, -1);
        for t in &self.watched {
            counters.tube_gauge(&t.topic, TubeGauge::Watching, -1);
        }
        let (producer, worker) = (self.producer, self.worker);
        metrics::gauge!("dq_beanstalkd_connections").decrement(1.0);
        counters.gauge(|g| {
            g.connections -= 1;
            g.producers -= i64::from(producer);
            g.workers -= i64::from(worker);
        });
    }
}

/// A reservation's deadline (Unix ms, Redis's clock) as an instant of this server's clock.
pub fn local_deadline(deadline_ms: i64) -> Instant {
    let left = (deadline_ms - dq_core::clock::unix_ms()).max(0) as u64;
    Instant::now() + Duration::from_millis(left)
}

/// `INTERNAL_ERROR`, logged.
pub fn internal(e: Error) -> Vec<u8> {
    tracing::warn!(error = %e.chain(), "beanstalkd command failed");
    reply::INTERNAL_ERROR.to_vec()
}
