//! Reserving over the protocol: `reserve`, `reserve-with-timeout` and `reserve-job`, the reservations a
//! connection then holds, and the order of jobs across watched tubes.

use std::time::Duration;

use dq_core::beanstalkd::home_partition;
use dq_core::reservations::ReserveOptions;
use dq_core::{Reservation, State};
use futures_util::StreamExt;
use tokio::time::Instant;

use super::body;
use super::codec::Frame;
use super::command::Command;
use super::counters::TubeGauge;
use super::held::Held;
use super::output::{FLUSH_WHILE_WAITING, Output};
use super::reply;
use super::session::{Frames, Next, Session, internal, local_deadline};

/// A reserved job's deadline is "soon" within this much of it (beanstalkd's safety margin).
const SAFETY_MARGIN: Duration = Duration::from_secs(1);

/// Most `reserve-with-timeout 0` commands of one connection that look for jobs together.
const MOST_LOOKS: usize = 100;

/// Commands a waiting reserve reads ahead and keeps for after it; past this many it reads no more until
/// it is answered (the socket's buffer then holds the rest).
const MOST_PENDING_FRAMES: usize = 1024;

impl Session {
    /// The topics a reserve takes from now: the watched ones that are not paused (here or over HTTP),
    /// and when the next pause among them ends.
    pub(super) fn live_topics(&self) -> (Vec<String>, Option<Instant>) {
        let registry = self.shared.topics.snapshot();
        let paused = self.shared.paused.read().expect("not poisoned").clone();
        let now = dq_core::clock::unix_ms();
        let mut next_end: Option<Instant> = None;
        let mut topics = Vec::new();
        for t in &self.watched {
            if registry.get(&t.topic).is_some_and(|c| c.paused) {
                continue;
            }
            if let Some(&(until, _)) = paused.get(&t.topic).filter(|(until, _)| *until > now) {
                let end = Instant::now() + Duration::from_millis((until - now) as u64);
                next_end = Some(next_end.map_or(end, |e| e.min(end)));
                continue;
            }
            topics.push(t.topic.clone());
        }
        (topics, next_end)
    }

    /// `reserve` and `reserve-with-timeout`.
    pub(super) async fn reserve(
        &mut self,
        timeout: Option<u32>,
        with_timeout: bool,
        frames: &mut Frames,
        out: &mut Output,
    ) -> Next {
        let shared = self.shared.clone();
        shared.counters.count_command(if with_timeout {
            "cmd-reserve-with-timeout"
        } else {
            "cmd-reserve"
        });
        if !self.worker {
            self.worker = true;
            shared.counters.gauge(|g| g.workers += 1);
        }
        let until = timeout.map(|t| Instant::now() + Duration::from_secs(t as u64));
        let mut waiting = false;
        let next = loop {
            if shared.draining.is_cancelled() {
                break Next::Reply(reply::DRAINING.to_vec());
            }
            let (topics, pause_ends) = self.live_topics();
            let soonest = self.held.soonest();
            let now = Instant::now();
            let soon = soonest.is_some_and(|d| d <= now + SAFETY_MARGIN);
            if soon || until.is_some_and(|u| u <= now) {
                // One look without waiting: a job that is ready is still given, as beanstalkd gives it.
                // With one tube watched, the `reserve-with-timeout 0` commands read right behind this
                // one (a pipelining client's) look together: one reserve of as many jobs, given out in
                // the commands' order, which is the order one look each would give them.
                let looks = if topics.len() == 1 && timeout == Some(0) {
                    1 + self.gather_looks(frames)
                } else {
                    1
                };
                if !topics.is_empty() {
                    let options = ReserveOptions {
                        least_ttr_ms: None,
                        waits: false,
                        best_first: true,
                    };
                    let topics = match best_first(&shared.queue, topics).await {
                        Ok(sorted) => sorted,
                        Err(e) => break Next::Reply(internal(e).repeat(looks)),
                    };
                    break Next::Reply(
                        match shared.queue.reservations().reserve_with(&topics, looks, options).await {
                            Ok(jobs) => self.looked(jobs, looks).await,
                            Err(e) => internal(e).repeat(looks),
                        },
                    );
                }
                break Next::Reply(self.nothing_now().repeat(looks));
            }
            if !waiting {
                waiting = true;
                self.waiting_gauges(1);
            }
            let mut place = (!topics.is_empty()).then(|| shared.dispatcher.enter(&shared.queue, &topics));
            let far = Instant::now() + Duration::from_secs(86_400);
            enum Woke {
                Job(Option<Reservation>),
                Other,
                Gone,
            }
            // Commands that arrive meanwhile (a pipelining client's) wait their turn in `pending`
            // while this reserve keeps its place in the line; the replies before it are written once
            // the wait lasts (see `super::output`).
            let flush_at = Instant::now() + FLUSH_WHILE_WAITING;
            let woke = loop {
                tokio::select! {
                    job = async {
                        match place.as_mut() {
                            Some(p) => p.job().await,
                            None => std::future::pending().await,
                        }
                    } => break Woke::Job(job),
                    _ = tokio::time::sleep_until(until.unwrap_or(far)) => break Woke::Other,
                    _ = tokio::time::sleep_until(soonest.map_or(far, |d| d - SAFETY_MARGIN)) => break Woke::Other,
                    _ = tokio::time::sleep_until(pause_ends.unwrap_or(far)) => break Woke::Other,
                    _ = shared.draining.cancelled() => break Woke::Other,
                    _ = tokio::time::sleep_until(flush_at), if out.is_pending() => {
                        if out.flush().await.is_err() {
                            break Woke::Gone;
                        }
                    }
                    frame = frames.next(), if self.pending.len() < MOST_PENDING_FRAMES => match frame {
                        Some(Ok(frame)) => self.pending.push_back(frame),
                        _ => break Woke::Gone,
                    },
                }
            };
            // Out of the line; a job sent meanwhile is this connection's.
            let gone = matches!(woke, Woke::Gone);
            let sent = match woke {
                Woke::Job(job) => job,
                _ => place.take().and_then(|p| p.leave()),
            };
            if gone {
                // The client went away: it takes no job.
                if let Some(job) = sent {
                    let _ = shared.queue.reservations().release(&job.id, &job.receipt).await;
                }
                break Next::Close;
            }
            if let Some(job) = sent {
                break Next::Reply(self.reserved(job).await);
            }
        };
        if waiting {
            self.waiting_gauges(-1);
        }
        next
    }

    /// Takes the `reserve-with-timeout 0` commands read right behind a first one (up to
    /// [`MOST_LOOKS`] in all), counting each; the first other command stays for after them.
    fn gather_looks(&mut self, frames: &mut Frames) -> usize {
        let mut more = 0;
        while 1 + more < MOST_LOOKS {
            let Some(next) = self.read_already(frames) else {
                break;
            };
            let look = matches!(&next, Frame::Line(line) if matches!(
                super::command::parse(line),
                Ok(Command::Reserve { timeout: Some(0), with_timeout: true })
            ));
            if !look {
                self.pending.push_front(next);
                break;
            }
            self.shared.counters.count_command("cmd-reserve-with-timeout");
            more += 1;
        }
        more
    }

    /// The replies to `looks` reserves that looked together and found `jobs` (the best first): a job
    /// each in turn, then for the others what a look that finds nothing answers.
    async fn looked(&mut self, jobs: Vec<Reservation>, looks: usize) -> Vec<u8> {
        let found = jobs.len();
        let mut replies = Vec::new();
        for job in jobs {
            replies.extend_from_slice(&self.reserved(job).await);
        }
        // Asked after the jobs were kept: one whose reservation is short makes its deadline soon.
        let nothing = self.nothing_now();
        for _ in found..looks {
            replies.extend_from_slice(&nothing);
        }
        replies
    }

    /// What a reserve that may not wait answers when it finds no job: `DEADLINE_SOON` when a job the
    /// connection holds is within the safety margin of its deadline, else `TIMED_OUT`.
    fn nothing_now(&mut self) -> Vec<u8> {
        let soon = self.held.soonest().is_some_and(|d| d <= Instant::now() + SAFETY_MARGIN);
        if soon { reply::DEADLINE_SOON } else { reply::TIMED_OUT }.to_vec()
    }

    pub(super) fn waiting_gauges(&self, by: i64) {
        self.shared.counters.gauge(|g| g.waiting += by);
        for t in &self.watched {
            self.shared.counters.tube_gauge(&t.topic, TubeGauge::Waiting, by);
        }
    }

    /// Keeps a reservation and answers `RESERVED`.
    pub(super) async fn reserved(&mut self, job: Reservation) -> Vec<u8> {
        let n = match self.shared.queue.beanstalkd().bs_number(&job.id).await {
            Ok(Some(n)) => n,
            Ok(None) => return reply::INTERNAL_ERROR.to_vec(),
            Err(e) => {
                // Not shown to the client, so handed back at once.
                let _ = self.shared.queue.reservations().release(&job.id, &job.receipt).await;
                return internal(e);
            }
        };
        self.held.insert(
            n,
            Held {
                id: job.id.clone(),
                topic: job.topic.clone(),
                receipt: job.receipt.clone(),
                deadline: local_deadline(job.deadline),
            },
        );
        reply::with_body(&format!("RESERVED {n}"), &body::to_bytes(job.body.get()))
    }

    /// `reserve-job <id>`.
    pub(super) async fn reserve_job(&mut self, n: u64) -> dq_core::Result<Vec<u8>> {
        let Some(job) = self.shared.queue.beanstalkd().bs_find(n).await? else {
            return Ok(reply::NOT_FOUND.to_vec());
        };
        if job.state == State::Reserved {
            return Ok(reply::NOT_FOUND.to_vec());
        }
        let Some(reservation) = self.shared.queue.beanstalkd().bs_take(&job.id).await? else {
            return Ok(reply::NOT_FOUND.to_vec());
        };
        if !self.worker {
            self.worker = true;
            self.shared.counters.gauge(|g| g.workers += 1);
        }
        Ok(self.reserved(reservation).await)
    }
}

/// `topics` with the one whose first ready job (in its home partition, where jobs put over the protocol
/// are) comes first, then the others by their first jobs, then those with none: beanstalkd's reserve
/// takes the best job of every watched tube, and the tubes' home partitions may differ (within one
/// partition `reserve.lua` compares the queues itself). Jobs are compared by priority (the score), then
/// by id, which sorts as the numbers do; a server's numbers rise in its put order across partitions
/// ([`super::numbers`]), so of jobs of one priority the one put first wins, as in beanstalkd. One topic
/// is returned as it is.
pub async fn best_first(queue: &dq_core::Queue, topics: Vec<String>) -> dq_core::Result<Vec<String>> {
    if topics.len() < 2 {
        return Ok(topics);
    }
    let count = queue.partitions().count();
    let heads = topics.iter().map(|t| async move {
        let p = home_partition(t, count);
        queue.beanstalkd().ready_head(p, t).await
    });
    let heads = futures_util::future::try_join_all(heads).await?;
    let mut ranked: Vec<(Option<(f64, String)>, String)> = heads.into_iter().zip(topics).collect();
    ranked.sort_by(|a, b| match (&a.0, &b.0) {
        (Some(x), Some(y)) => x.0.total_cmp(&y.0).then_with(|| x.1.cmp(&y.1)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    Ok(ranked.into_iter().map(|(_, t)| t).collect())
}
