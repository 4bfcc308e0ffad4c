//! The beanstalkd protocol listener against a real Redis, in process: what a connection owns, jobs
//! crossing between the protocol and the HTTP API, bodies kept exactly, priorities across tubes, bad
//! input, draining. (The byte-for-byte comparison with the real beanstalkd, timing with dq-timer, and
//! real clients are in tests/e2e: beanstalkd_diff.rs, beanstalkd_clients.rs.)

mod common;

use std::time::Duration;

use common::TestServer;
use dq_harness::{RedisServer, free_port};
use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A protocol connection that reads whole replies.
struct Conn(TcpStream);

impl Conn {
    async fn open(port: u16) -> Conn {
        Conn(TcpStream::connect(("127.0.0.1", port)).await.unwrap())
    }

    /// Sends `bytes` and reads one reply: a line, and its body when the line announces one.
    async fn send(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.0.write_all(bytes).await.unwrap();
        self.reply().await
    }

    async fn reply(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut byte = [0u8; 1];
        let read = async {
            while !out.ends_with(b"\r\n") {
                let n = self.0.read(&mut byte).await.unwrap();
                assert!(n > 0, "connection closed after {:?}", String::from_utf8_lossy(&out));
                out.push(byte[0]);
            }
            let line = String::from_utf8_lossy(&out).to_string();
            let words: Vec<&str> = line.trim_end().split(' ').collect();
            let len = match words[0] {
                "RESERVED" | "FOUND" => words.get(2),
                "OK" => words.get(1),
                _ => None,
            };
            if let Some(len) = len {
                let mut body = vec![0u8; len.parse::<usize>().unwrap() + 2];
                self.0.read_exact(&mut body).await.unwrap();
                out.extend_from_slice(&body);
            }
        };
        tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .expect("a reply within 20 s");
        out
    }

    /// Sends a line and returns the reply as text.
    async fn line(&mut self, line: &str) -> String {
        String::from_utf8_lossy(&self.send(format!("{line}\r\n").as_bytes()).await).into_owned()
    }

    async fn put(&mut self, pri: u32, delay: u32, ttr: u32, body: &[u8]) -> u64 {
        let mut req = format!("put {pri} {delay} {ttr} {}\r\n", body.len()).into_bytes();
        req.extend_from_slice(body);
        req.extend_from_slice(b"\r\n");
        let reply = String::from_utf8(self.send(&req).await).unwrap();
        reply
            .trim_end()
            .strip_prefix("INSERTED ")
            .expect(&reply)
            .parse()
            .unwrap()
    }

    /// `reserve-with-timeout`: (id, body).
    async fn reserve(&mut self, timeout: u32) -> Option<(u64, Vec<u8>)> {
        let reply = self
            .send(format!("reserve-with-timeout {timeout}\r\n").as_bytes())
            .await;
        if reply == b"TIMED_OUT\r\n" {
            return None;
        }
        let end = reply.iter().position(|&b| b == b'\r').unwrap();
        let head = String::from_utf8_lossy(&reply[..end]).to_string();
        let words: Vec<&str> = head.split(' ').collect();
        assert_eq!(words[0], "RESERVED", "{head}");
        Some((words[1].parse().unwrap(), reply[end + 2..reply.len() - 2].to_vec()))
    }
}

/// A dq-server with the listener on its own Redis, with `partitions`.
async fn start(partitions: Option<u32>) -> (TestServer, u16) {
    let redis = vec![RedisServer::start()];
    let mut settings = common::settings(&redis);
    let port = free_port();
    settings.beanstalkd.listen = Some(format!("127.0.0.1:{port}"));
    settings.redis.partitions = partitions;
    let server = TestServer::with_settings(redis, settings).await;
    (server, port)
}

#[tokio::test]
async fn reservations_belong_to_their_connection_and_come_back_when_it_closes() {
    let (_server, port) = start(None).await;
    let mut a = Conn::open(port).await;
    let mut b = Conn::open(port).await;
    let id = a.put(10, 0, 60, b"job").await;
    let (got, body) = a.reserve(0).await.expect("a job");
    assert_eq!((got, body.as_slice()), (id, &b"job"[..]));
    // Another connection may not touch it.
    for cmd in [
        format!("delete {id}"),
        format!("release {id} 1 0"),
        format!("bury {id} 1"),
        format!("touch {id}"),
        format!("reserve-job {id}"),
    ] {
        assert_eq!(b.line(&cmd).await, "NOT_FOUND\r\n", "{cmd}");
    }
    assert_eq!(b.reserve(0).await, None);
    assert_eq!(a.line(&format!("touch {id}")).await, "TOUCHED\r\n");
    // Closing the connection hands the job back at once (its TTR is 60 s).
    drop(a);
    let (again, _) = b.reserve(10).await.expect("the closed connection's job");
    assert_eq!(again, id);
    let stats = b.line(&format!("stats-job {id}")).await;
    assert!(
        stats.contains("state: reserved") && stats.contains("reserves: 2"),
        "{stats}"
    );
    assert_eq!(b.line(&format!("delete {id}")).await, "DELETED\r\n");
    assert_eq!(b.line(&format!("peek {id}")).await, "NOT_FOUND\r\n");
}

#[tokio::test]
async fn a_reserve_whose_client_went_away_takes_no_job() {
    let (_server, port) = start(None).await;
    let mut gone = Conn::open(port).await;
    gone.0.write_all(b"reserve\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(gone);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut a = Conn::open(port).await;
    let id = a.put(1, 0, 60, b"x").await;
    let mut b = Conn::open(port).await;
    assert_eq!(b.reserve(10).await.map(|j| j.0), Some(id));
}

#[tokio::test]
async fn jobs_cross_between_the_protocol_and_the_http_api() {
    let (server, port) = start(None).await;
    let mut c = Conn::open(port).await;
    // Bytes that are not UTF-8 come back exactly, and read as base 64 over HTTP.
    let bytes = b"\x00\xff\r\nend".to_vec();
    c.line("use cross").await;
    let n = c.put(7, 0, 30, &bytes).await;
    let text_n = c.put(7, 0, 30, "é ok".as_bytes()).await;
    let id = dq_core::beanstalkd::id_of_number(n, 256);
    let (status, job) = server.call("GET", &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["topic"], "cross");
    assert_eq!(job["body"], json!({"$base64": "AP8NCmVuZA=="}));
    let text_id = dq_core::beanstalkd::id_of_number(text_n, 256);
    let (_, job) = server.call("GET", &format!("/v1/jobs/{text_id}"), None).await;
    assert_eq!(job["body"], "é ok");
    assert_eq!(c.line("watch cross").await, "WATCHING 2\r\n");
    assert_eq!(c.reserve(0).await, Some((n, bytes)));
    assert_eq!(c.line(&format!("delete {n}")).await, "DELETED\r\n");
    // A job pushed over HTTP is reserved over the protocol (its JSON as the body), numbered then; its
    // priority is the protocol's.
    let pushed = server
        .push(json!({"topic": "cross", "body": {"order": 1}, "priority": 5}))
        .await;
    let mut seen = Vec::new();
    while let Some((num, body)) = c.reserve(0).await {
        seen.push(body.clone());
        if body == br#"{"order":1}"# {
            assert_eq!(
                c.line(&format!("peek {num}")).await,
                format!("FOUND {num} 11\r\n{{\"order\":1}}\r\n")
            );
            let stats = c.line(&format!("stats-job {num}")).await;
            assert!(stats.contains("\npri: 5\n"), "{stats}");
            assert_eq!(c.line(&format!("delete {num}")).await, "DELETED\r\n");
        }
    }
    assert!(seen.contains(&br#"{"order":1}"#.to_vec()), "{seen:?}");
    let (_, job) = server
        .call("GET", &format!("/v1/jobs/{}", pushed["id"].as_str().unwrap()), None)
        .await;
    assert_eq!(job["state"], "done", "{job}");
    // And a job put over the protocol is reserved and acked over HTTP.
    let n = c.put(1, 0, 30, b"\"for http\"").await;
    let jobs = server.reserve(&["cross"], 1, 5000).await;
    assert_eq!(jobs[0]["id"], dq_core::beanstalkd::id_of_number(n, 256));
    assert_eq!(jobs[0]["body"], "\"for http\"");
}

#[tokio::test]
async fn the_number_of_a_job_pushed_over_http_goes_with_the_job() {
    let (server, port) = start(None).await;
    let mut c = Conn::open(port).await;
    c.line("watch numbered").await;
    c.line("ignore default").await;
    let mut ids = Vec::new();
    for end in ["ack", "delete", "purge"] {
        let pushed = server.push(json!({"topic": "numbered", "body": end})).await;
        ids.push((end, pushed["id"].as_str().unwrap().to_string()));
    }
    let index = |id: &str| server.key(id, "bs:ids");
    let mut conn = server.redis[0].conn();
    // Reserved in any order: each job's body says how it ends.
    for _ in 0..ids.len() {
        let (n, body) = c.reserve(5).await.expect("a job");
        let end = String::from_utf8(body).unwrap().trim_matches('"').to_string();
        let id = &ids.iter().find(|(e, _)| *e == end).unwrap().1;
        let entry: Option<String> = redis::cmd("HGET").arg(index(id)).arg(n).query(&mut conn).unwrap();
        assert_eq!(entry.as_deref(), Some(id.as_str()), "{end}");
        match end.as_str() {
            "ack" => assert_eq!(c.line(&format!("delete {n}")).await, "DELETED\r\n"),
            "delete" => {
                c.line(&format!("release {n} 0 3600")).await;
                assert_eq!(c.line(&format!("delete {n}")).await, "DELETED\r\n");
            }
            _ => {
                assert_eq!(c.line(&format!("bury {n} 0")).await, "BURIED\r\n");
                let (status, _) = server
                    .call("DELETE", "/v1/topics/numbered/dead", Some(json!({"ids": [id]})))
                    .await;
                assert!(status.is_success(), "{status}");
            }
        }
        let entry: Option<String> = redis::cmd("HGET").arg(index(id)).arg(n).query(&mut conn).unwrap();
        assert_eq!(entry, None, "{end}: the index keeps no number of a job that is gone");
        assert_eq!(c.line(&format!("peek {n}")).await, "NOT_FOUND\r\n");
    }
}

#[tokio::test]
async fn priorities_order_reserves_within_and_across_tubes() {
    let (_server, port) = start(None).await;
    let mut c = Conn::open(port).await;
    c.line("use low").await;
    let late = c.put(500, 0, 30, b"late").await;
    let low_a = c.put(100, 0, 30, b"a").await;
    let low_b = c.put(100, 0, 30, b"b").await;
    c.line("use high").await;
    let high = c.put(2, 0, 30, b"high").await;
    c.line("watch low").await;
    c.line("watch high").await;
    c.line("ignore default").await;
    let order: Vec<u64> = [0; 4].iter().map(|_| 0).collect();
    let mut got = Vec::new();
    for _ in order {
        got.push(c.reserve(0).await.expect("a job").0);
    }
    assert_eq!(got, vec![high, low_a, low_b, late]);
    // A release with a new priority puts the job back in its place.
    assert_eq!(c.line(&format!("release {late} 0 0")).await, "RELEASED\r\n");
    assert_eq!(c.line(&format!("release {low_a} 50 0")).await, "RELEASED\r\n");
    assert_eq!(c.reserve(0).await.map(|j| j.0), Some(late));
    let stats = c.line(&format!("stats-job {late}")).await;
    assert!(stats.contains("pri: 0\n") && stats.contains("releases: 1\n"), "{stats}");
}

#[tokio::test]
async fn bury_kick_and_tube_names_that_are_not_topics() {
    let (server, port) = start(None).await;
    let mut c = Conn::open(port).await;
    let name = format!("a+b/c;d$(e)_{}", "x".repeat(180));
    assert_eq!(c.line(&format!("use {name}")).await, format!("USING {name}\r\n"));
    c.line(&format!("watch {name}")).await;
    let n = c.put(5, 0, 30, b"b").await;
    let (got, _) = c.reserve(0).await.unwrap();
    assert_eq!(got, n);
    assert_eq!(c.line(&format!("bury {n} 9")).await, "BURIED\r\n");
    assert_eq!(c.line("peek-buried").await, format!("FOUND {n} 1\r\nb\r\n"));
    let tubes = c.line("list-tubes").await;
    assert!(tubes.contains(&format!("- {name}\n")), "{tubes}");
    let stats = c.line(&format!("stats-tube {name}")).await;
    assert!(stats.contains("current-jobs-buried: 1\n"), "{stats}");
    // Over HTTP it is the dead list of the topic the tube maps to.
    let (topic, _) = dq_core::beanstalkd::topic_of_tube(&name);
    let (status, dead) = server.call("GET", &format!("/v1/topics/{topic}/dead"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(dead["jobs"].as_array().unwrap().len(), 1, "{dead}");
    assert_eq!(c.line("kick 5").await, "KICKED 1\r\n");
    let stats = c.line(&format!("stats-job {n}")).await;
    assert!(
        stats.contains("state: ready\n") && stats.contains("buries: 1\n") && stats.contains("kicks: 1\n"),
        "{stats}"
    );
    let d = c.put(5, 3600, 30, b"later").await;
    assert_eq!(c.line("peek-delayed").await, format!("FOUND {d} 5\r\nlater\r\n"));
    assert_eq!(c.line(&format!("kick-job {d}")).await, "KICKED\r\n");
    assert_eq!(c.line(&format!("kick-job {d}")).await, "NOT_FOUND\r\n");
}

#[tokio::test]
async fn delays_and_ttrs_take_beanstalkds_whole_range() {
    let (_server, port) = start(None).await;
    let mut c = Conn::open(port).await;
    let max = u32::MAX;
    let n = c.put(max, max, max, b"far").await;
    let stats = c.line(&format!("stats-job {n}")).await;
    for line in [
        "state: delayed\n",
        &format!("pri: {max}\n"),
        &format!("delay: {max}\n"),
        &format!("ttr: {max}\n"),
    ] {
        assert!(stats.contains(line), "{line} in {stats}");
    }
    assert_eq!(c.line(&format!("kick-job {n}")).await, "KICKED\r\n");
    assert_eq!(c.reserve(0).await.map(|j| j.0), Some(n));
    let stats = c.line(&format!("stats-job {n}")).await;
    assert!(
        stats.contains("state: reserved\n") && stats.contains("time-left: 42949672"),
        "{stats}"
    );
    assert_eq!(c.line(&format!("delete {n}")).await, "DELETED\r\n");
    // A TTR of 0 is 1 s, as in beanstalkd.
    let n = c.put(0, 0, 0, b"quick").await;
    assert!(c.line(&format!("stats-job {n}")).await.contains("ttr: 1\n"));
}

#[tokio::test]
async fn bad_input_gets_beanstalkds_errors_and_writes_nothing() {
    let (server, port) = start(Some(1)).await;
    let mut c = Conn::open(port).await;
    for (sent, want) in [
        (&b"frob\r\n"[..], "UNKNOWN_COMMAND\r\n"),
        (b"put 1 0 1\r\n", "BAD_FORMAT\r\n"),
        (b"put x 0 1 1\r\n", "BAD_FORMAT\r\n"),
        (b"use -bad\r\n", "BAD_FORMAT\r\n"),
        (b"delete 1 2\r\n", "BAD_FORMAT\r\n"),
        (b"peek 0\r\n", "NOT_FOUND\r\n"),
        (b"stats-tube nobody\r\n", "NOT_FOUND\r\n"),
        (b"pause-tube nobody 1\r\n", "NOT_FOUND\r\n"),
        (b"ignore default\r\n", "NOT_IGNORED\r\n"),
    ] {
        assert_eq!(
            String::from_utf8_lossy(&c.send(sent).await),
            want,
            "{:?}",
            String::from_utf8_lossy(sent)
        );
    }
    // A body that does not end where its size says: the two bytes after it were not `\r\n`, and what
    // follows is read as a command line (here an empty one).
    assert_eq!(c.send(b"put 1 0 1 2\r\nabcd\r\n").await, b"EXPECTED_CRLF\r\n");
    assert_eq!(c.reply().await, b"UNKNOWN_COMMAND\r\n");
    let mut big = b"put 1 0 1 65536\r\n".to_vec();
    big.extend(std::iter::repeat_n(b'x', 65536));
    big.extend_from_slice(b"\r\n");
    assert_eq!(c.send(&big).await, b"JOB_TOO_BIG\r\n");
    let mut long = vec![b'a'; 300];
    long.extend_from_slice(b"\r\n");
    assert_eq!(c.send(&long).await, b"BAD_FORMAT\r\n");
    assert_eq!(c.line("list-tube-used").await, "USING default\r\n");
    let (_, stats) = server.call("GET", "/v1/stats", None).await;
    assert_eq!(stats["topics"], json!({}), "nothing written: {stats}");
}

#[tokio::test]
async fn deadline_soon_and_draining() {
    let (server, port) = start(None).await;
    let mut c = Conn::open(port).await;
    let n = c.put(1, 0, 1, b"short").await;
    assert_eq!(c.reserve(0).await.map(|j| j.0), Some(n));
    // Its TTR of 1 s is inside the safety margin: a reserve answers at once.
    assert_eq!(c.line("reserve").await, "DEADLINE_SOON\r\n");
    let mut idle = Conn::open(port).await;
    idle.line("list-tube-used").await;
    let m = c.put(1, 0, 60, b"long").await;
    assert_eq!(c.line(&format!("release {n} 1 0")).await, "RELEASED\r\n");
    let held = c.reserve(0).await.unwrap().0;
    assert!(held == n || held == m);
    server.shutdown.cancel();
    // A draining server takes no new jobs, closes idle connections, and lets this one finish.
    assert_eq!(c.send(b"put 1 0 1 1\r\nx\r\n").await, b"DRAINING\r\n");
    let mut buf = [0u8; 1];
    assert_eq!(idle.0.read(&mut buf).await.unwrap(), 0, "the idle connection is closed");
    assert_eq!(c.line(&format!("delete {held}")).await, "DELETED\r\n");
}
