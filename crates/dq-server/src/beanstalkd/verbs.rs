//! The commands that look (peek, stats, lists) or move jobs without holding them (kick, pause-tube).

use std::collections::HashMap;

use dq_core::{Job, State};

use super::command::Command;
use super::session::Session;
use super::{body, reply, yaml};

/// beanstalkd's urgent jobs: ready with a priority below this.
const URGENT: u32 = 1024;

impl Session {
    /// The commands of this module.
    pub(super) async fn read_only(&mut self, command: Command) -> dq_core::Result<Vec<u8>> {
        let queue = self.shared.queue.clone();
        let topic = self.used.topic.clone();
        match command {
            Command::Peek(n) => Ok(match queue.beanstalkd().bs_find(n).await? {
                Some(job) => found(n, &job.body),
                None => reply::NOT_FOUND.to_vec(),
            }),
            Command::PeekReady => self.peek_first(&topic, State::Ready).await,
            Command::PeekDelayed => self.peek_first(&topic, State::Delayed).await,
            Command::PeekBuried => self.peek_first(&topic, State::Dead).await,
            Command::Kick(bound) => {
                let mut kicked = 0u32;
                let buried = queue.admin().dead(&topic, 0, bound as usize).await?;
                let jobs: Vec<Job> = if buried.total > 0 {
                    buried.jobs
                } else {
                    queue
                        .admin()
                        .browse(&topic, State::Delayed, 0, bound as usize)
                        .await?
                        .jobs
                };
                for job in jobs {
                    if queue.beanstalkd().bs_kick(&job.id).await? {
                        kicked += 1;
                    }
                }
                Ok(format!("KICKED {kicked}\r\n").into_bytes())
            }
            Command::KickJob(n) => Ok(match queue.beanstalkd().bs_find(n).await? {
                Some(job)
                    if matches!(job.state, State::Dead | State::Delayed)
                        && queue.beanstalkd().bs_kick(&job.id).await? =>
                {
                    reply::KICKED.to_vec()
                }
                _ => reply::NOT_FOUND.to_vec(),
            }),
            Command::StatsJob(n) => match queue.beanstalkd().bs_find(n).await? {
                Some(job) => {
                    let tube = self.shared.tube_name(&job.topic).await?;
                    Ok(reply::with_body(
                        "OK",
                        &yaml::job(n, &tube, &job, dq_core::clock::unix_ms()),
                    ))
                }
                None => Ok(reply::NOT_FOUND.to_vec()),
            },
            Command::StatsTube(name) => {
                let tube = self.shared.tube(name).await?;
                let mut now = self.shared.tubes_now().await;
                if !now.exists(&tube.topic) {
                    return Ok(reply::NOT_FOUND.to_vec());
                }
                let counts = now.counts.remove(&tube.topic).unwrap_or_default();
                let urgent = self.urgent(&tube.topic, &counts).await?;
                let totals = self.shared.counters.totals(&queue).await;
                let gauges = now.gauges;
                let paused = self
                    .shared
                    .paused
                    .read()
                    .expect("not poisoned")
                    .get(&tube.topic)
                    .copied();
                Ok(reply::with_body(
                    "OK",
                    &yaml::tube(&tube.name, &tube.topic, urgent, &counts, &totals, &gauges, paused),
                ))
            }
            Command::Stats => {
                let now = self.shared.tubes_now().await;
                let mut urgent = 0;
                for (topic, counts) in &now.counts {
                    urgent += self.urgent(topic, counts).await?;
                }
                let totals = self.shared.counters.totals(&queue).await;
                let tubes = now.topics().len();
                let info = yaml::ServerInfo {
                    urgent,
                    max_job_size: self.shared.max_job_size,
                    tubes,
                    draining: self.shared.draining.is_cancelled(),
                    server_id: &self.shared.counters.server_id,
                    uptime_s: self.shared.started.elapsed().as_secs(),
                };
                Ok(reply::with_body(
                    "OK",
                    &yaml::stats(&now.counts, &totals, &now.gauges, &info),
                ))
            }
            Command::ListTubes => {
                let mut names = Vec::new();
                for topic in self.shared.tubes_now().await.topics() {
                    names.push(self.shared.tube_name(&topic).await?);
                }
                Ok(reply::with_body("OK", &yaml::list(&names)))
            }
            Command::ListTubeUsed => Ok(format!("USING {}\r\n", self.used.name).into_bytes()),
            Command::ListTubesWatched => {
                let names: Vec<String> = self.watched.iter().map(|t| t.name.clone()).collect();
                Ok(reply::with_body("OK", &yaml::list(&names)))
            }
            Command::PauseTube(name, delay) => {
                // beanstalkd counts the command before it checks the name.
                if !dq_core::beanstalkd::is_tube_name(name.as_bytes()) {
                    return Ok(reply::BAD_FORMAT.to_vec());
                }
                let tube = self.shared.tube(name).await?;
                if !self.shared.tubes_now().await.exists(&tube.topic) {
                    return Ok(reply::NOT_FOUND.to_vec());
                }
                self.shared.pause(&tube.topic, delay).await?;
                self.shared.counters.count(&format!("{}:cmd-pause-tube", tube.topic));
                Ok(reply::PAUSED.to_vec())
            }
            _ => unreachable!("session.rs handles the other commands"),
        }
    }

    /// `peek-ready`, `peek-delayed`, `peek-buried`: the first job of the used tube in `state`.
    async fn peek_first(&self, topic: &str, state: State) -> dq_core::Result<Vec<u8>> {
        let queue = &self.shared.queue;
        let page = queue.admin().browse(topic, state, 0, 1).await?;
        let Some(job) = page.jobs.into_iter().next() else {
            return Ok(reply::NOT_FOUND.to_vec());
        };
        Ok(match queue.beanstalkd().bs_number(&job.id).await? {
            Some(n) => found(n, job.body.get()),
            None => reply::NOT_FOUND.to_vec(),
        })
    }

    /// Ready jobs of `topic` with a priority below 1024, over every partition that has ready jobs.
    async fn urgent(&self, topic: &str, counts: &HashMap<State, i64>) -> dq_core::Result<u64> {
        if counts.get(&State::Ready).copied().unwrap_or(0) <= 0 {
            return Ok(0);
        }
        let queue = &self.shared.queue;
        queue.beanstalkd().ready_below(topic, URGENT).await
    }
}

/// `FOUND <id> <len>\r\n<body>\r\n` for a body's JSON text.
fn found(n: u64, json: &str) -> Vec<u8> {
    reply::with_body(&format!("FOUND {n}"), &body::to_bytes(json))
}
