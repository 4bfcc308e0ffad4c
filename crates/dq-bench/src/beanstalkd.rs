//! `dq-bench beanstalkd`: put and reserve + delete throughput over the beanstalkd protocol.
//!
//! The same load for dq-server's beanstalkd listener and for a real beanstalkd, so that the two can be
//! compared on one machine (scripts/bench-beanstalkd.sh). C connections, each in a task of its own, first
//! put M jobs each, one request at a time (send `put`, wait for `INSERTED`); then, once all are in, each
//! loops `reserve-with-timeout 1` → `delete` until the tube is empty. A phase's time ends at its last job:
//! the closing `TIMED_OUT` each connection waits for is not counted. The protocol is spoken here directly
//! (a line, and a body after RESERVED), so the bench measures the servers, not a client library.
//!
//! With `--pipeline N`, a connection sends N commands in one write and then reads their N replies, as
//! a pipelining client does: N puts at a time; in the drain, N `reserve-with-timeout 0`, then the
//! deletes of what they got, in one write each.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::report::{self, Errors, Hist, Report};

/// Options of `dq-bench beanstalkd`.
#[derive(Debug, Args)]
pub struct BeanstalkdArgs {
    /// The beanstalkd-protocol server: dq-server's `beanstalkd.listen`, or a beanstalkd.
    #[arg(long, default_value = "127.0.0.1:11300")]
    pub addr: String,
    /// Jobs each connection puts.
    #[arg(short = 'n', long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub jobs_per_connection: u64,
    /// Concurrent connections (one task each).
    #[arg(short = 'c', long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// Size of each job's body in bytes.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..=65_535))]
    pub body_bytes: u32,
    /// Tube to put to and drain; it should be empty at the start.
    #[arg(long, default_value = "bench")]
    pub tube: String,
    /// Commands each connection sends in one write before it reads their replies (1: one at a time).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub pipeline: u32,
    /// The puts' priority (beanstalkd's: 0 is the most urgent; dq's default is 1024).
    #[arg(long, default_value_t = 0)]
    pub priority: u32,
}

/// Runs `dq-bench beanstalkd`.
pub async fn run(args: &BeanstalkdArgs) -> Result<Report> {
    let mut conns = Vec::with_capacity(args.connections as usize);
    for _ in 0..args.connections {
        conns.push(Conn::open(&args.addr, &args.tube).await?);
    }
    let put = Arc::new(
        format!(
            "put {} 0 60 {}\r\n{}\r\n",
            args.priority,
            args.body_bytes,
            "x".repeat(args.body_bytes as usize)
        )
        .into_bytes(),
    );
    let errors = Arc::new(Errors::default());

    let start = Instant::now();
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|conn| {
            tokio::spawn(put_all(
                conn,
                Arc::clone(&put),
                args.jobs_per_connection,
                args.pipeline,
                Arc::clone(&errors),
            ))
        })
        .collect();
    let mut puts = Vec::with_capacity(tasks.len());
    for task in tasks {
        puts.push(task.await.context("a put task panicked")?);
    }
    let put_seconds = start.elapsed();
    let put_hist = report::merge(puts.iter().map(|p| &p.latency));
    let inserted: u64 = puts.iter().map(|p| p.jobs).sum();

    let start = Instant::now();
    let tasks: Vec<_> = puts
        .into_iter()
        .filter_map(|p| p.conn)
        .map(|conn| tokio::spawn(drain(conn, args.pipeline, Arc::clone(&errors))))
        .collect();
    let mut drains = Vec::with_capacity(tasks.len());
    for task in tasks {
        drains.push(task.await.context("a drain task panicked")?);
    }
    let drain_seconds = drains
        .iter()
        .filter_map(|d| d.last_job)
        .max()
        .map_or(Duration::ZERO, |last| last - start);
    let deleted: u64 = drains.iter().map(|d| d.jobs).sum();
    let reserve_hist = report::merge(drains.iter().map(|d| &d.reserve));
    let delete_hist = report::merge(drains.iter().map(|d| &d.delete));

    let per_sec = |jobs: u64, d: Duration| {
        if d.is_zero() {
            0.0
        } else {
            (jobs as f64 / d.as_secs_f64()).round()
        }
    };
    let report = Report::new("beanstalkd", inserted, put_seconds, "put", &put_hist, &errors)
        .with_latency("reserve", &reserve_hist)
        .with_latency("delete", &delete_hist)
        .with("put_jobs_per_sec", per_sec(inserted, put_seconds))
        .with("reserve_delete_jobs", deleted)
        .with(
            "reserve_delete_seconds",
            (drain_seconds.as_secs_f64() * 1e4).round() / 1e4,
        )
        .with("reserve_delete_jobs_per_sec", per_sec(deleted, drain_seconds))
        .with("connections", args.connections)
        .with("pipeline", args.pipeline)
        .with("body_bytes", args.body_bytes)
        .with("tube", args.tube.as_str());
    Ok(if deleted < inserted {
        report.failed(format!("{inserted} jobs put, {deleted} reserved and deleted"))
    } else {
        report
    })
}

/// One connection, using and watching only the bench's tube.
struct Conn {
    stream: BufReader<TcpStream>,
    /// The reply line being read.
    line: Vec<u8>,
}

impl Conn {
    /// Connects and moves to `tube` (untimed).
    async fn open(addr: &str, tube: &str) -> Result<Conn> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("cannot connect to {addr}"))?;
        stream.set_nodelay(true)?;
        let mut conn = Conn {
            stream: BufReader::new(stream),
            line: Vec::new(),
        };
        let mut setup = vec![
            (format!("use {tube}"), "USING "),
            (format!("watch {tube}"), "WATCHING "),
        ];
        if tube != "default" {
            setup.push(("ignore default".into(), "WATCHING "));
        }
        for (command, want) in setup {
            let reply = conn.call(format!("{command}\r\n").as_bytes()).await?;
            if !reply.starts_with(want) {
                bail!("{command}: {reply}");
            }
        }
        Ok(conn)
    }

    /// Sends `request` and reads the reply line (without its CR LF).
    async fn call(&mut self, request: &[u8]) -> Result<String> {
        self.stream.get_mut().write_all(request).await?;
        self.reply().await
    }

    /// Reads the next reply line (without its CR LF).
    async fn reply(&mut self) -> Result<String> {
        self.line.clear();
        if self.stream.read_until(b'\n', &mut self.line).await? == 0 {
            bail!("the server closed the connection");
        }
        Ok(String::from_utf8_lossy(self.line.trim_ascii_end()).into_owned())
    }

    /// Reads and drops a job body of `len` bytes and its CR LF.
    async fn skip_body(&mut self, len: usize) -> Result<()> {
        let mut body = vec![0; len + 2];
        self.stream.read_exact(&mut body).await?;
        Ok(())
    }
}

/// What a connection's put phase did.
struct Puts {
    /// The connection, for the drain; `None` once it failed.
    conn: Option<Conn>,
    /// Jobs inserted.
    jobs: u64,
    /// Latency of each put.
    latency: Hist,
}

/// Puts `jobs` jobs, `pipeline` at a time (sent in one write, then their replies read).
async fn put_all(mut conn: Conn, put: Arc<Vec<u8>>, jobs: u64, pipeline: u32, errors: Arc<Errors>) -> Puts {
    let mut done = Puts {
        conn: None,
        jobs: 0,
        latency: report::new_hist(),
    };
    let mut left = jobs;
    while left > 0 {
        let n = left.min(u64::from(pipeline));
        left -= n;
        let sent = Instant::now();
        if let Err(e) = conn.stream.get_mut().write_all(&put.repeat(n as usize)).await {
            errors.add(1, || format!("put: {e:#}"));
            return done;
        }
        for _ in 0..n {
            match conn.reply().await {
                Ok(reply) if reply.starts_with("INSERTED ") => {
                    report::record(&mut done.latency, sent.elapsed());
                    done.jobs += 1;
                }
                Ok(reply) => errors.add(1, || format!("put: {reply}")),
                Err(e) => {
                    errors.add(1, || format!("put: {e:#}"));
                    return done;
                }
            }
        }
    }
    done.conn = Some(conn);
    done
}

/// What a connection's drain did.
struct Drain {
    /// Jobs reserved and deleted.
    jobs: u64,
    /// When its last job was deleted.
    last_job: Option<Instant>,
    /// Latency of each reserve that got a job, and of each delete.
    reserve: Hist,
    delete: Hist,
}

/// Reserves and deletes jobs until a reserve times out: `pipeline` reserves in one write, then the
/// deletes of the jobs they got in one write.
async fn drain(mut conn: Conn, pipeline: u32, errors: Arc<Errors>) -> Drain {
    let mut done = Drain {
        jobs: 0,
        last_job: None,
        reserve: report::new_hist(),
        delete: report::new_hist(),
    };
    // Pipelined, the reserves say `reserve-with-timeout 0`: once the tube is empty, each of a batch would
    // otherwise wait its second in turn (a connection's reserves are answered in order).
    let one = if pipeline > 1 {
        "reserve-with-timeout 0\r\n"
    } else {
        "reserve-with-timeout 1\r\n"
    };
    let reserves = one.repeat(pipeline as usize).into_bytes();
    loop {
        let sent = Instant::now();
        if let Err(e) = conn.stream.get_mut().write_all(&reserves).await {
            errors.add(1, || format!("reserve: {e:#}"));
            return done;
        }
        let mut ids = Vec::with_capacity(pipeline as usize);
        let mut timed_out = false;
        for _ in 0..pipeline {
            let reply = match conn.reply().await {
                Ok(reply) => reply,
                Err(e) => {
                    errors.add(1, || format!("reserve: {e:#}"));
                    return done;
                }
            };
            if reply == "TIMED_OUT" {
                timed_out = true;
                continue;
            }
            let Some((id, len)) = reserved(&reply) else {
                errors.add(1, || format!("reserve: {reply}"));
                return done;
            };
            if let Err(e) = conn.skip_body(len).await {
                errors.add(1, || format!("reserve: {e:#}"));
                return done;
            }
            report::record(&mut done.reserve, sent.elapsed());
            ids.push(id);
        }
        if !ids.is_empty() {
            let sent = Instant::now();
            let deletes: String = ids.iter().map(|id| format!("delete {id}\r\n")).collect();
            if let Err(e) = conn.stream.get_mut().write_all(deletes.as_bytes()).await {
                errors.add(1, || format!("delete: {e:#}"));
                return done;
            }
            for id in &ids {
                match conn.reply().await {
                    Ok(reply) if reply == "DELETED" => {
                        report::record(&mut done.delete, sent.elapsed());
                        done.jobs += 1;
                        done.last_job = Some(Instant::now());
                    }
                    Ok(reply) => errors.add(1, || format!("delete {id}: {reply}")),
                    Err(e) => {
                        errors.add(1, || format!("delete {id}: {e:#}"));
                        return done;
                    }
                }
            }
        }
        if timed_out {
            return done;
        }
    }
}

/// The id and body length of a `RESERVED <id> <bytes>` line.
fn reserved(line: &str) -> Option<(u64, usize)> {
    let mut words = line.strip_prefix("RESERVED ")?.split(' ');
    let id = words.next()?.parse().ok()?;
    let len = words.next()?.parse().ok()?;
    Some((id, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_reserved_lines() {
        assert_eq!(reserved("RESERVED 12 64"), Some((12, 64)));
        assert_eq!(reserved("RESERVED 1 0"), Some((1, 0)));
        assert_eq!(reserved("TIMED_OUT"), None);
        assert_eq!(reserved("RESERVED x 1"), None);
    }

    /// A put and a drain against a tiny in-process server that speaks just enough of the protocol, one
    /// command at a time and pipelined.
    #[tokio::test]
    async fn puts_then_drains() {
        for pipeline in [1, 4] {
            puts_then_drains_with(pipeline).await;
        }
    }

    async fn puts_then_drains_with(pipeline: u32) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let jobs = Arc::new(std::sync::Mutex::new((0u64, Vec::<u64>::new())));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&jobs)));
            }
        });
        let args = BeanstalkdArgs {
            addr,
            jobs_per_connection: 5,
            connections: 3,
            body_bytes: 8,
            tube: "t".into(),
            pipeline,
            priority: 1024,
        };
        let report = run(&args).await.unwrap();
        assert!(!report.is_failure(), "{}", report.human());
        assert_eq!(report.jobs, 15);
        let v: serde_json::Value = serde_json::from_str(&report.json_line()).unwrap();
        assert_eq!(v["reserve_delete_jobs"], 15);
        assert!(v["put_jobs_per_sec"].as_f64().unwrap() > 0.0);
        assert!(v["reserve_delete_jobs_per_sec"].as_f64().unwrap() > 0.0);
    }

    /// Answers use, watch, ignore, put, reserve-with-timeout (at once) and delete.
    async fn serve(stream: TcpStream, jobs: Arc<std::sync::Mutex<(u64, Vec<u64>)>>) {
        let mut stream = BufReader::new(stream);
        let mut line = String::new();
        loop {
            line.clear();
            if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let words: Vec<&str> = line.trim_end().split(' ').collect();
            let reply = match words[0] {
                "use" => format!("USING {}\r\n", words[1]),
                "watch" | "ignore" => "WATCHING 1\r\n".into(),
                "put" => {
                    assert_eq!(words[1], "1024", "the puts' priority is --priority");
                    let mut body = vec![0; words[4].parse::<usize>().unwrap() + 2];
                    stream.read_exact(&mut body).await.unwrap();
                    let mut jobs = jobs.lock().unwrap();
                    jobs.0 += 1;
                    let id = jobs.0;
                    jobs.1.push(id);
                    format!("INSERTED {id}\r\n")
                }
                "reserve-with-timeout" => match jobs.lock().unwrap().1.pop() {
                    Some(id) => format!("RESERVED {id} 2\r\nhi\r\n"),
                    None => "TIMED_OUT\r\n".into(),
                },
                "delete" => "DELETED\r\n".into(),
                _ => "UNKNOWN_COMMAND\r\n".into(),
            };
            stream.get_mut().write_all(reply.as_bytes()).await.unwrap();
        }
    }
}
