//! A pipelining beanstalkd client against real dq processes: many commands in one write get every reply,
//! in order; a reserve that waits keeps its place while the commands after it are read, and the replies
//! before it are written while it waits.

mod common;

use common::beanstalkd::DqBeanstalkd;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Reads one reply line (without CR LF), and the body of a `RESERVED`.
async fn reply(stream: &mut BufReader<TcpStream>) -> String {
    let mut line = String::new();
    assert!(
        stream.read_line(&mut line).await.unwrap() > 0,
        "the server closed the connection"
    );
    let line = line.trim_end().to_string();
    if let Some(rest) = line.strip_prefix("RESERVED ") {
        let len: usize = rest.split(' ').nth(1).unwrap().parse().unwrap();
        let mut body = vec![0; len + 2];
        stream.read_exact(&mut body).await.unwrap();
    }
    line
}

/// The server's `stats` (its YAML).
async fn stats(stream: &mut BufReader<TcpStream>) -> String {
    stream.get_mut().write_all(b"stats\r\n").await.unwrap();
    let mut head = String::new();
    stream.read_line(&mut head).await.unwrap();
    let len: usize = head.trim_end().strip_prefix("OK ").unwrap().parse().unwrap();
    let mut body = vec![0; len + 2];
    stream.read_exact(&mut body).await.unwrap();
    String::from_utf8(body).unwrap()
}

async fn connect(addr: &str) -> BufReader<TcpStream> {
    BufReader::new(TcpStream::connect(addr).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_commands_in_one_write_get_a_hundred_replies_in_order() {
    let dq = DqBeanstalkd::start().await;
    let mut c = connect(&dq.addr).await;
    // 100 puts in one write: INSERTED 1 … 100 (one partition: numbers count from 1).
    let puts: String = (0..100)
        .map(|i| format!("put 0 0 60 {}\r\njob-{i:03}\r\n", 7))
        .collect();
    c.get_mut().write_all(puts.as_bytes()).await.unwrap();
    for n in 1..=100 {
        assert_eq!(reply(&mut c).await, format!("INSERTED {n}"));
    }
    // 100 reserves in one write, then their 100 deletes in one write, mixed with other commands.
    let reserves = "reserve-with-timeout 0\r\n".repeat(100);
    c.get_mut().write_all(reserves.as_bytes()).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..100 {
        let line = reply(&mut c).await;
        let id: u64 = line
            .strip_prefix("RESERVED ")
            .unwrap_or_else(|| panic!("{line}"))
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        ids.push(id);
    }
    ids.sort_unstable();
    assert_eq!(ids, (1..=100).collect::<Vec<u64>>(), "every job reserved once");
    let deletes: String = ids
        .iter()
        .map(|id| format!("delete {id}\r\nlist-tube-used\r\n"))
        .collect();
    c.get_mut().write_all(deletes.as_bytes()).await.unwrap();
    for _ in &ids {
        assert_eq!(reply(&mut c).await, "DELETED");
        assert_eq!(reply(&mut c).await, "USING default");
    }
    c.get_mut().write_all(b"reserve-with-timeout 0\r\n").await.unwrap();
    assert_eq!(reply(&mut c).await, "TIMED_OUT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_reserve_writes_the_replies_before_it_and_keeps_its_place() {
    let dq = DqBeanstalkd::start().await;
    let mut worker = connect(&dq.addr).await;
    // In one write: a command, a reserve that must wait (the tube is empty), and a command after it.
    worker
        .get_mut()
        .write_all(b"watch t\r\nreserve-with-timeout 60\r\nlist-tubes-watched\r\n")
        .await
        .unwrap();
    // The reply before the reserve comes while the reserve waits (were it held until the reserve ends,
    // the job below would never be put, and the reserve would end TIMED_OUT after 60 s).
    assert_eq!(reply(&mut worker).await, "WATCHING 2");
    let mut producer = connect(&dq.addr).await;
    producer
        .get_mut()
        .write_all(b"use t\r\nput 0 0 60 2\r\nhi\r\n")
        .await
        .unwrap();
    assert_eq!(reply(&mut producer).await, "USING t");
    let inserted = reply(&mut producer).await;
    let n = inserted
        .strip_prefix("INSERTED ")
        .unwrap_or_else(|| panic!("{inserted}"));
    // The waiting reserve got the job, then the command read while it waited is answered.
    assert_eq!(reply(&mut worker).await, format!("RESERVED {n} 2"));
    assert!(
        reply(&mut worker).await.starts_with("OK "),
        "list-tubes-watched answers after the reserve"
    );
}

/// Reserves that may not wait, read together, look for jobs together: each gets the best job left in
/// turn (by priority, then number), the ones after the last job what a look that finds nothing gets
/// (here `DEADLINE_SOON`: the connection then holds a job with a 1 s TTR), and a command behind them
/// is answered after them. Each counts as a command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserves_read_together_take_the_best_jobs_in_turn() {
    let dq = DqBeanstalkd::start().await;
    let mut c = connect(&dq.addr).await;
    c.get_mut()
        .write_all(b"put 5 0 60 1\r\na\r\nput 1 0 60 1\r\nb\r\nput 5 0 60 1\r\nc\r\nput 9 0 1 1\r\nd\r\n")
        .await
        .unwrap();
    for n in 1..=4 {
        assert_eq!(reply(&mut c).await, format!("INSERTED {n}"));
    }
    let looks = "reserve-with-timeout 0\r\n".repeat(6) + "list-tube-used\r\n";
    c.get_mut().write_all(looks.as_bytes()).await.unwrap();
    for n in [2, 1, 3, 4] {
        assert_eq!(reply(&mut c).await, format!("RESERVED {n} 1"));
    }
    assert_eq!(reply(&mut c).await, "DEADLINE_SOON");
    assert_eq!(reply(&mut c).await, "DEADLINE_SOON");
    assert_eq!(reply(&mut c).await, "USING default");
    let stats = stats(&mut c).await;
    assert!(
        stats.contains("cmd-reserve-with-timeout: 6\n"),
        "each reserve counted: {stats}"
    );
}

/// Deletes read together, of jobs the connection holds, are acked side by side and answered in turn; a
/// delete of the same number again, of a ready job, or of no job is answered as alone, in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_read_together_are_answered_in_turn() {
    let dq = DqBeanstalkd::start().await;
    let mut c = connect(&dq.addr).await;
    let puts = "put 0 0 60 1\r\nx\r\n".repeat(4);
    c.get_mut().write_all(puts.as_bytes()).await.unwrap();
    for n in 1..=4 {
        assert_eq!(reply(&mut c).await, format!("INSERTED {n}"));
    }
    let looks = "reserve-with-timeout 0\r\n".repeat(3);
    c.get_mut().write_all(looks.as_bytes()).await.unwrap();
    for n in 1..=3 {
        assert_eq!(reply(&mut c).await, format!("RESERVED {n} 1"));
    }
    c.get_mut()
        .write_all(b"delete 1\r\ndelete 2\r\ndelete 2\r\ndelete 4\r\ndelete 3\r\ndelete 99\r\nstats-job 1\r\n")
        .await
        .unwrap();
    for expected in [
        "DELETED",
        "DELETED",
        "NOT_FOUND",
        "DELETED",
        "DELETED",
        "NOT_FOUND",
        "NOT_FOUND",
    ] {
        assert_eq!(reply(&mut c).await, expected);
    }
    let stats = stats(&mut c).await;
    for line in [
        "cmd-delete: 6\n",
        "current-jobs-ready: 0\n",
        "current-jobs-reserved: 0\n",
    ] {
        assert!(stats.contains(line), "{line:?} in {stats}");
    }
}
