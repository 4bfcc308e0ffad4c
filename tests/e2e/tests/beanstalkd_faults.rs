//! The beanstalkd protocol with real dq processes under faults and across servers: kill -9 of dq-server
//! while workers reserve (nothing lost, clients reconnect), and two dq-servers sharing jobs, counters and
//! gauges.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Running, env, start_on};
use dq_harness::{RedisServer, eventually, free_port};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A minimal protocol client: one command, one reply (a line, and its body when it has one).
struct Client {
    stream: BufReader<TcpStream>,
}

impl Client {
    async fn connect(addr: &str) -> std::io::Result<Client> {
        Ok(Client {
            stream: BufReader::new(TcpStream::connect(addr).await?),
        })
    }

    /// Sends `bytes`; returns the reply's line and body.
    async fn call(&mut self, bytes: &[u8]) -> std::io::Result<(String, Vec<u8>)> {
        self.stream.get_mut().write_all(bytes).await?;
        let mut line = String::new();
        if self.stream.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end().to_string();
        let words: Vec<&str> = line.split(' ').collect();
        let len = match words[0] {
            "RESERVED" | "FOUND" => words.get(2),
            "OK" => words.get(1),
            _ => None,
        };
        let mut body = Vec::new();
        if let Some(len) = len {
            body = vec![0; len.parse::<usize>().unwrap() + 2];
            self.stream.read_exact(&mut body).await?;
            body.truncate(body.len() - 2);
        }
        Ok((line, body))
    }

    async fn line(&mut self, line: &str) -> String {
        self.call(format!("{line}\r\n").as_bytes()).await.unwrap().0
    }

    async fn put(&mut self, ttr: u32, body: &str) -> String {
        let req = format!("put 0 0 {ttr} {}\r\n{body}\r\n", body.len());
        self.call(req.as_bytes()).await.unwrap().0
    }
}

/// dq-server with the listener at `addr`, its API on `port`.
async fn server(redis: &RedisServer, port: u16, addr: &str) -> Running {
    let mut vars = env(&[redis], port);
    vars.push(("DQ__BEANSTALKD__LISTEN", addr.to_string()));
    start_on("dq-server", port, vars).await
}

/// A worker that reserves and deletes in `tube` until told to stop, reconnecting whenever the connection
/// fails; counts each body it was handed (the work a real worker does before its delete: a delete whose
/// answer a kill cut off may have gone through).
async fn worker(
    addr: String,
    tube: &'static str,
    seen: Arc<Mutex<HashMap<String, usize>>>,
    stop: Arc<tokio::sync::Notify>,
) {
    loop {
        let Ok(mut c) = Client::connect(&addr).await else {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => continue,
                _ = stop.notified() => return,
            }
        };
        if c.call(format!("watch {tube}\r\n").as_bytes()).await.is_err() {
            continue;
        }
        loop {
            let reserved = tokio::select! {
                r = c.call(b"reserve-with-timeout 1\r\n") => r,
                _ = stop.notified() => return,
            };
            let Ok((line, body)) = reserved else { break };
            let Some(id) = line.strip_prefix("RESERVED ").and_then(|r| r.split(' ').next()) else {
                continue;
            };
            *seen
                .lock()
                .unwrap()
                .entry(String::from_utf8(body).unwrap())
                .or_default() += 1;
            if c.call(format!("delete {id}\r\n").as_bytes()).await.is_err() {
                break;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_dq_server_while_workers_reserve_loses_nothing() {
    let redis = RedisServer::start();
    let addr = format!("127.0.0.1:{}", free_port());
    let port = free_port();
    let mut dq = server(&redis, port, &addr).await;
    let timer_port = free_port();
    let _timer = start_on("dq-timer", timer_port, env(&[&redis], timer_port)).await;

    const JOBS: usize = 600;
    let mut producer = Client::connect(&addr).await.unwrap();
    producer.line("use work").await;
    for i in 0..JOBS {
        // A TTR of 2 s: jobs the killed server's connections held come back that soon.
        assert!(producer.put(2, &format!("job-{i}")).await.starts_with("INSERTED"));
    }
    drop(producer);

    let seen: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let workers: Vec<_> = (0..4)
        .map(|_| tokio::spawn(worker(addr.clone(), "work", seen.clone(), stop.clone())))
        .collect();
    eventually(Duration::from_secs(60), "a third of the jobs done", || async {
        seen.lock().unwrap().len() >= JOBS / 3
    })
    .await;
    dq.process.signal("KILL");
    dq.process.wait(Duration::from_secs(10)).expect("killed");
    // The clients find the server gone, and reconnect once it is back.
    dq = server(&redis, port, &addr).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while seen.lock().unwrap().len() < JOBS {
        if tokio::time::Instant::now() > deadline {
            let missing: Vec<String> = (0..JOBS)
                .map(|i| format!("job-{i}"))
                .filter(|b| !seen.lock().unwrap().contains_key(b))
                .collect();
            let stats = reqwest::get(format!("http://127.0.0.1:{port}/v1/stats"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            panic!(
                "{} jobs never done after the restart: {missing:?}; {stats}",
                missing.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Nothing left behind: the jobs the killed server's connections held come back at their TTR and are
    // done too, until dq's counts of the topic are all 0.
    let stats_url = format!("http://127.0.0.1:{port}/v1/stats");
    eventually(Duration::from_secs(60), "no job of the tube left in dq", || async {
        let Ok(r) = reqwest::get(&stats_url).await else {
            return false;
        };
        let stats: serde_json::Value = r.json().await.unwrap_or_default();
        let work = &stats["topics"]["work"];
        ["ready", "reserved", "delayed", "dead"]
            .iter()
            .all(|s| work[s].as_i64().unwrap_or(0) == 0)
    })
    .await;
    stop.notify_waiters();
    for w in workers {
        w.abort();
        let _ = w.await;
    }
    let seen = seen.lock().unwrap().clone();
    assert!((0..JOBS).all(|i| seen.contains_key(&format!("job-{i}"))));
    let again: usize = seen.values().map(|n| n - 1).sum();
    eprintln!("{JOBS} jobs, {again} handed out a second time (reserved when dq-server was killed)");
    drop(dq);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_dq_servers_share_jobs_counters_and_gauges() {
    let redis = RedisServer::start();
    let (addr_a, addr_b) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let (port_a, port_b) = (free_port(), free_port());
    let _a = server(&redis, port_a, &addr_a).await;
    let _b = server(&redis, port_b, &addr_b).await;

    let mut on_a = Client::connect(&addr_a).await.unwrap();
    let mut on_b = Client::connect(&addr_b).await.unwrap();
    assert_eq!(on_a.line("use shared").await, "USING shared");
    let put = on_a.put(60, "hello").await;
    let n = put.strip_prefix("INSERTED ").unwrap().to_string();
    // A job put through one server is found, reserved and deleted through the other.
    assert_eq!(on_b.call(format!("peek {n}\r\n").as_bytes()).await.unwrap().1, b"hello");
    on_b.line("watch shared").await;
    let (line, body) = on_b.call(b"reserve-with-timeout 5\r\n").await.unwrap();
    assert_eq!((line, body), (format!("RESERVED {n} 5"), b"hello".to_vec()));
    // Reserved through B: A may not delete it.
    assert_eq!(on_a.line(&format!("delete {n}")).await, "NOT_FOUND");
    assert_eq!(on_b.line(&format!("delete {n}")).await, "DELETED");
    // A's connection using the tube and A's put show in B's stats within a few seconds.
    let mut watcher = Client::connect(&addr_b).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = watcher.call(b"stats-tube shared\r\n").await.unwrap();
        let body = String::from_utf8(body).unwrap();
        // A uses it; B's two connections watch default, B's `on_b` watches it too.
        if body.contains("current-using: 1\n")
            && body.contains("current-watching: 1\n")
            && body.contains("total-jobs: 1\n")
            && body.contains("cmd-delete: 1\n")
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "B never saw A's gauges and counters: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
