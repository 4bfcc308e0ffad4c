//! `put`, alone or in runs: the puts a pipelining client sent together (already read) are stored with one
//! push many, one group-commit entry rather than one per job. Each job gets its number's id in its
//! tube's home partition (see [`dq_core::beanstalkd`]).

use bytes::Bytes;
use dq_core::beanstalkd::id_of_number;
use dq_core::{Due, Error, NewJob};

use super::codec::Frame;
use super::command::PutLine;
use super::session::{Frames, Session, internal};
use super::{body, reply};

/// Most puts stored together when a pipelining client sends many at once.
const PUT_RUN: usize = 100;

impl Session {
    /// The puts that follow `run`'s at once (a pipelining client's, already read), up to [`PUT_RUN`]:
    /// they are stored together. The first other frame stays next in line.
    pub(super) fn gather_puts(&mut self, run: &mut Vec<(PutLine, Bytes)>, frames: &mut Frames) {
        while run.len() < PUT_RUN {
            let Some(next) = self.read_already(frames) else {
                break;
            };
            match next {
                Frame::Put { line, body, crlf: true } => {
                    self.shared.counters.count_command("cmd-put");
                    run.push((line, body));
                }
                other => {
                    self.pending.push_front(other);
                    break;
                }
            }
        }
    }

    /// A put whose number a producer took over HTTP meanwhile (a conflict), tried under the next
    /// numbers (three numbers in all, the first one included).
    async fn put_again(&mut self, line: PutLine, bytes: &[u8]) -> Vec<u8> {
        let queue = &self.shared.queue;
        let json = body::to_json(bytes);
        for _ in 0..2 {
            let n = match self.shared.numbers.next(queue, self.used.home).await {
                Ok(n) => n,
                Err(e) => return internal(e),
            };
            match queue.producer().push(self.put_job(n, &line, json.clone())).await {
                Ok(_) => return self.inserted(n),
                Err(Error::Conflict(_)) => continue,
                Err(e) => return internal(e),
            }
        }
        reply::INTERNAL_ERROR.to_vec()
    }

    /// `put`s: one, or those that came together, stored with one push many (one group-commit entry, not
    /// one per job); the replies of all, in order. A put whose number was taken meanwhile goes again
    /// alone.
    pub(super) async fn put(&mut self, run: Vec<(PutLine, Bytes)>) -> Vec<u8> {
        if self.shared.draining.is_cancelled() {
            return reply::DRAINING.repeat(run.len());
        }
        if !self.producer {
            self.producer = true;
            self.shared.counters.gauge(|g| g.producers += 1);
        }
        let queue = self.shared.queue.clone();
        let mut numbers = Vec::with_capacity(run.len());
        let mut jobs = Vec::with_capacity(run.len());
        for (line, bytes) in &run {
            let n = match self.shared.numbers.next(&queue, self.used.home).await {
                Ok(n) => n,
                Err(e) => return internal(e).repeat(run.len()),
            };
            numbers.push(n);
            jobs.push(self.put_job(n, line, body::to_json(bytes)));
        }
        let results = queue.producer().push_many(jobs).await;
        let mut out = Vec::new();
        for (((line, bytes), n), result) in run.into_iter().zip(numbers).zip(results) {
            let reply = match result {
                Ok(_) => self.inserted(n),
                Err(Error::Conflict(_)) => self.put_again(line, &bytes).await,
                Err(e) => internal(e),
            };
            out.extend_from_slice(&reply);
        }
        out
    }

    /// The job of a put numbered `n` in the used tube.
    fn put_job(&self, n: u64, line: &PutLine, body: String) -> NewJob {
        NewJob {
            id: Some(id_of_number(n, self.shared.queue.partitions().count())),
            topic: self.used.topic.clone(),
            body,
            schedule: Due::Delay(line.delay as u64 * 1000),
            // beanstalkd makes a TTR of 0 one second.
            ttr_ms: line.ttr.max(1) as u64 * 1000,
            max_attempts: 0,
            dedup: None,
            max_age_ms: None,
            backoff_ms: None,
            priority: Some(line.priority),
            coalesce: None,
            flow_key: None,
            fanout: Vec::new(),
            // The protocol has no place for a trace context.
            trace: None,
        }
    }

    /// A stored put's reply, counted for its tube.
    fn inserted(&self, n: u64) -> Vec<u8> {
        self.shared.counters.count(&format!("{}:total-jobs", self.used.topic));
        format!("INSERTED {n}\r\n").into_bytes()
    }
}
