//! The beanstalkd protocol on dq (`beanstalkd.listen`): every beanstalkd client works against dq, its
//! jobs durable in Redis. docs/beanstalkd.md is the user's guide, with each difference from beanstalkd.
//!
//! - [`codec`]: framing (command lines, put bodies); [`command`]: reading a line as beanstalkd does.
//! - [`session`]: a connection (put, the verbs on its reservations); [`reserve`]: reserving; [`verbs`]:
//!   the rest.
//! - [`body`]: bytes ↔ JSON bodies; [`yaml`]: the stats and lists; [`reply`]: fixed replies.
//! - [`counters`]: `cmd-…` counters and `current-…` gauges over every dq-server; [`numbers`]: job numbers.
//! - [`dispatch`]: waiting reserves served together, many jobs per call.

pub mod body;
pub mod codec;
pub mod command;
pub mod counters;
pub mod dispatch;
pub mod held;
pub mod numbers;
pub mod output;
pub mod put;
pub mod reply;
pub mod reserve;
pub mod session;
pub mod verbs;
pub mod yaml;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use dq_core::admin::topics::TopicCache;
use dq_core::beanstalkd::{home_partition, is_made_topic, topic_of_tube};
use dq_core::{Queue, Result};
use futures_util::{FutureExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::codec::Codec;
use self::counters::Counters;
use self::numbers::Numbers;
use self::output::Output;
use self::session::{Next, Session, Tube};

/// What every connection of the listener shares.
#[derive(Debug)]
pub struct Shared {
    /// The queue.
    pub queue: Arc<Queue>,
    /// The topic registry (topics paused over HTTP are not reserved).
    pub topics: Arc<TopicCache>,
    /// Command counters and connection gauges.
    pub counters: Counters,
    /// Job numbers.
    pub numbers: Numbers,
    /// Waiting reserves, served together.
    pub dispatcher: Arc<dispatch::Dispatcher>,
    /// Cancelled when the server drains: puts and reserves answer `DRAINING`.
    pub draining: CancellationToken,
    /// Cancelled when the drain's grace is over: every connection closes.
    pub closing: CancellationToken,
    /// `beanstalkd.max_job_size`.
    pub max_job_size: usize,
    /// When the listener started.
    pub started: Instant,
    /// Paused tubes: topic -> (end of the pause, Unix ms; its length in seconds), read once a second.
    pub paused: RwLock<HashMap<String, (i64, u64)>>,
    /// Tube names of made topics (see [`dq_core::beanstalkd`]), as stored.
    names: RwLock<HashMap<String, String>>,
}

impl Shared {
    /// The tube named `name`, its made topic's name stored the first time.
    pub async fn tube(&self, name: String) -> Result<Tube> {
        let (topic, made) = topic_of_tube(&name);
        let home = home_partition(&topic, self.queue.partitions().count());
        if made && !self.names.read().expect("not poisoned").contains_key(&topic) {
            self.queue.beanstalkd().store_tube_name(&topic, &name).await?;
            self.names
                .write()
                .expect("not poisoned")
                .insert(topic.clone(), name.clone());
        }
        Ok(Tube { name, topic, home })
    }

    /// The tube name of `topic`.
    pub async fn tube_name(&self, topic: &str) -> Result<String> {
        if !is_made_topic(topic) {
            return Ok(topic.to_string());
        }
        if let Some(name) = self.names.read().expect("not poisoned").get(topic) {
            return Ok(name.clone());
        }
        let name = self.queue.beanstalkd().stored_tube_name(topic).await?;
        let name = name.unwrap_or_else(|| topic.to_string());
        self.names
            .write()
            .expect("not poisoned")
            .insert(topic.to_string(), name.clone());
        Ok(name)
    }

    /// The jobs' counts and every server's gauges now, read once for a command that looks at tubes.
    pub async fn tubes_now(&self) -> TubesNow {
        TubesNow {
            counts: self.queue.admin().counts().await.counts,
            gauges: self.counters.all_gauges(&self.queue).await,
            registered: self.topics.snapshot().keys().cloned().collect(),
        }
    }

    /// `pause-tube`: reserves over the protocol leave `topic` alone for `secs` seconds.
    pub async fn pause(&self, topic: &str, secs: u32) -> Result<()> {
        let until = self.queue.redis_now_ms().await? + secs as i64 * 1000;
        self.queue.beanstalkd().pause(topic, until, secs).await?;
        self.paused
            .write()
            .expect("not poisoned")
            .insert(topic.to_string(), (until, secs as u64));
        Ok(())
    }

    /// Reads the paused tubes (once a second), dropping pauses long over.
    async fn read_pauses(&self) {
        let Ok(stored) = self.queue.beanstalkd().pauses().await else {
            return;
        };
        let now = dq_core::clock::unix_ms();
        let mut map = HashMap::new();
        for (topic, v) in stored {
            let mut parts = v.split(' ').map(|x| x.parse::<i64>().unwrap_or(0));
            let (until, secs) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
            if until + 60_000 < now {
                let _ = self.queue.beanstalkd().forget_pause(&topic).await;
                continue;
            }
            map.insert(topic, (until, secs.max(0) as u64));
        }
        *self.paused.write().expect("not poisoned") = map;
    }
}

/// What the commands that look at tubes read: counts, gauges, the registry.
#[derive(Debug)]
pub struct TubesNow {
    /// Jobs by topic and state, over every partition.
    pub counts: HashMap<String, HashMap<dq_core::State, i64>>,
    /// Every server's gauges.
    pub gauges: counters::Gauges,
    /// Registered topics.
    pub registered: BTreeSet<String>,
}

impl TubesNow {
    /// The topics that are tubes: `default`, registered topics, topics with jobs, and tubes some
    /// connection (of any dq-server) uses or watches. `default` first, then by name.
    pub fn topics(&self) -> Vec<String> {
        let mut set = self.registered.clone();
        set.extend(
            self.counts
                .iter()
                .filter(|(_, c)| c.iter().any(|(s, &n)| *s != dq_core::State::Done && n > 0))
                .map(|(t, _)| t.clone()),
        );
        set.extend(
            self.gauges
                .tubes
                .iter()
                .filter(|(_, g)| g[0] > 0 || g[1] > 0)
                .map(|(t, _)| t.clone()),
        );
        set.remove("default");
        std::iter::once("default".to_string()).chain(set).collect()
    }

    /// Whether `topic` is a tube (see [`TubesNow::topics`]).
    pub fn exists(&self, topic: &str) -> bool {
        topic == "default" || self.topics().iter().any(|t| t == topic)
    }
}

/// Binds `beanstalkd.listen` (checked by the config: loopback unless `beanstalkd.allow_remote`).
pub async fn bind(listen: &str) -> anyhow::Result<TcpListener> {
    use anyhow::Context;
    TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen} (beanstalkd.listen)"))
}

/// Serves the protocol on `listener` until `shutdown`; then puts and reserves answer `DRAINING`,
/// connections that hold reservations may finish them for `grace`, and every connection closes,
/// handing back what it still holds.
pub async fn serve(
    listener: TcpListener,
    queue: Arc<Queue>,
    topics: Arc<TopicCache>,
    settings: &dq_core::config::BeanstalkdSettings,
    grace: Duration,
    shutdown: CancellationToken,
) {
    let shared = Arc::new(Shared {
        queue,
        topics,
        counters: Counters::new(),
        numbers: Numbers::default(),
        dispatcher: Arc::default(),
        draining: shutdown.clone(),
        closing: CancellationToken::new(),
        max_job_size: settings.max_job_size,
        started: Instant::now(),
        paused: RwLock::default(),
        names: RwLock::default(),
    });
    let housekeeping_stop = CancellationToken::new();
    let housekeeping = {
        let (shared, stop) = (shared.clone(), housekeeping_stop.clone());
        tokio::spawn(async move {
            let pauses = async {
                loop {
                    shared.read_pauses().await;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            };
            tokio::select! {
                _ = shared.counters.write_every_second(&shared.queue, stop.clone()) => {}
                _ = pauses => {}
            }
        })
    };
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "beanstalkd protocol listening");
    }
    let permits = Arc::new(Semaphore::new(settings.max_connections));
    let tracker = TaskTracker::new();
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("never closed"),
            _ = shutdown.cancelled() => break,
        };
        let socket = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => socket,
                Err(e) => {
                    tracing::warn!(error = %e, "beanstalkd accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let shared = shared.clone();
        tracker.spawn(async move {
            connection(shared, socket).await;
            drop(permit);
        });
    }
    drop(listener);
    tracker.close();
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        shared.closing.cancel();
        tracker.wait().await;
    }
    housekeeping_stop.cancel();
    let _ = housekeeping.await;
    tracing::info!("beanstalkd protocol stopped");
}

/// One connection, until it quits, goes away, or the server's drain ends it.
async fn connection(shared: Arc<Shared>, socket: TcpStream) {
    let _ = socket.set_nodelay(true);
    let (read, write) = socket.into_split();
    let mut frames = FramedRead::new(read, Codec::new(shared.max_job_size));
    let mut out = Output::new(write);
    let mut session = Session::new(shared.clone());
    loop {
        let frame = match session.pending.pop_front() {
            Some(frame) => frame,
            // A command already read (a pipelining client's next one) is answered before anything is
            // written: the replies of one batch go in one write.
            None => match frames.next().now_or_never() {
                Some(Some(Ok(frame))) => frame,
                Some(_) => break,
                None => {
                    if out.flush().await.is_err() {
                        break;
                    }
                    // A draining server closes connections that hold nothing at once.
                    let idle = !session.holds_jobs();
                    tokio::select! {
                        frame = frames.next() => match frame {
                            Some(Ok(frame)) => frame,
                            _ => break,
                        },
                        _ = shared.draining.cancelled(), if idle => break,
                        _ = shared.closing.cancelled() => break,
                    }
                }
            },
        };
        match session.handle(frame, &mut frames, &mut out).await {
            Next::Reply(bytes) => {
                if out.push(&bytes).await.is_err() {
                    break;
                }
            }
            Next::Close => break,
        }
    }
    let _ = out.flush().await;
    session.close().await;
}
