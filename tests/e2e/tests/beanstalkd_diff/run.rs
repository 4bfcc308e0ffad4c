//! Running a session against one server: the raw bytes each step got back.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::script::{Action, Session};

/// What one step got.
#[derive(Clone, PartialEq)]
pub enum Reply {
    /// The step reads nothing (start, close).
    Nothing,
    /// A reply: its line and, for RESERVED, FOUND and OK, the body and its CR LF.
    Bytes(Vec<u8>),
    /// The server closed the connection (after `quit`).
    Closed,
    /// Something went wrong: no reply in time, an I/O error, a connection already lost. Never a match.
    Failed(String),
}

impl Reply {
    /// Whether the step went as a step can go (so the two servers' replies may be compared).
    pub fn is_sound(&self) -> bool {
        !matches!(self, Reply::Failed(_))
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Nothing => f.write_str("(nothing read)"),
            Reply::Bytes(b) => f.write_str(&escape(b)),
            Reply::Closed => f.write_str("(connection closed by the server)"),
            Reply::Failed(why) => write!(f, "(FAILED: {why})"),
        }
    }
}

/// `bytes` as escaped ASCII, cut after 300 characters (with the total length).
pub fn escape(bytes: &[u8]) -> String {
    let text: String = bytes.escape_ascii().to_string();
    if text.len() <= 300 {
        text
    } else {
        let cut: String = text.chars().take(300).collect();
        format!("{cut}… ({} bytes)", bytes.len())
    }
}

/// `replies` with each job number of a reply line (`INSERTED <n>`, `RESERVED <n> <len>`, `FOUND <n> <len>`,
/// `BURIED <n>`) replaced by `#<rank>`, its rank among the session's numbers in the order they first appear.
/// Two servers that number jobs otherwise (dq on several partitions) then compare equal when they answer
/// with the same jobs in the same order, and differ when one hands out another job.
pub fn renumbered(replies: &[Reply]) -> Vec<Reply> {
    let mut ranks: HashMap<Vec<u8>, usize> = HashMap::new();
    let numbered: [&[u8]; 4] = [b"INSERTED", b"RESERVED", b"FOUND", b"BURIED"];
    replies
        .iter()
        .map(|reply| {
            let Reply::Bytes(bytes) = reply else {
                return reply.clone();
            };
            let line_end = bytes.windows(2).position(|w| w == b"\r\n").unwrap_or(bytes.len());
            let mut words = bytes[..line_end].splitn(3, |&b| b == b' ');
            let verb = words.next().unwrap_or_default();
            let Some(n) = words
                .next()
                .filter(|n| !n.is_empty() && n.iter().all(u8::is_ascii_digit))
            else {
                return reply.clone();
            };
            if !numbered.contains(&verb) {
                return reply.clone();
            }
            let next = ranks.len() + 1;
            let rank = *ranks.entry(n.to_vec()).or_insert(next);
            let mut out = format!("{} #{rank}", String::from_utf8_lossy(verb)).into_bytes();
            out.extend_from_slice(&bytes[verb.len() + 1 + n.len()..]);
            Reply::Bytes(out)
        })
        .collect()
}

/// One connection of a session.
struct Conn {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

/// Runs `session` against the server at `addr`: one reply per step.
pub async fn run(session: &Session, addr: &str) -> Vec<Reply> {
    let mut conns: Vec<Result<Conn, String>> = Vec::with_capacity(session.conns);
    for _ in 0..session.conns {
        conns.push(match TcpStream::connect(addr).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                let (read, writer) = stream.into_split();
                Ok(Conn {
                    reader: BufReader::new(read),
                    writer,
                })
            }
            Err(e) => Err(format!("cannot connect to {addr}: {e}")),
        });
    }
    let mut replies = Vec::with_capacity(session.steps.len());
    for step in &session.steps {
        let slot = &mut conns[step.conn];
        let conn = match slot {
            Ok(conn) => conn,
            Err(why) => {
                replies.push(Reply::Failed(why.clone()));
                continue;
            }
        };
        let reply = match &step.action {
            Action::Send(bytes) => match conn.writer.write_all(bytes).await {
                Ok(()) => read_reply(conn, step.deadline).await,
                Err(e) => Reply::Failed(format!("write: {e}")),
            },
            Action::Start(bytes) => match conn.writer.write_all(bytes).await {
                Ok(()) => Reply::Nothing,
                Err(e) => Reply::Failed(format!("write: {e}")),
            },
            Action::Read => read_reply(conn, step.deadline).await,
            Action::Until(bytes, needles) => until(conn, bytes, needles, step.deadline).await,
            Action::Close => {
                *slot = Err("closed by the script".into());
                replies.push(Reply::Nothing);
                continue;
            }
        };
        if !reply.is_sound() {
            // Its next reply could answer this step: what the connection says from now on means nothing.
            *slot = Err(format!("lost after an earlier failure on connection {}", step.conn));
        }
        replies.push(reply);
    }
    replies
}

/// Reads one reply within `deadline`.
async fn read_reply(conn: &mut Conn, deadline: Duration) -> Reply {
    match tokio::time::timeout(deadline, read_raw(&mut conn.reader)).await {
        Ok(Ok(Some(bytes))) => Reply::Bytes(bytes),
        Ok(Ok(None)) => Reply::Closed,
        Ok(Err(e)) => Reply::Failed(format!("read: {e}")),
        Err(_) => Reply::Failed(format!("no reply within {deadline:?}")),
    }
}

/// A line, and for `RESERVED <id> <n>`, `FOUND <id> <n>` and `OK <n>` the n bytes and CR LF after it; `None`
/// when the server closed the connection before the line began.
async fn read_raw(reader: &mut BufReader<OwnedReadHalf>) -> std::io::Result<Option<Vec<u8>>> {
    let mut reply = Vec::new();
    if reader.read_until(b'\n', &mut reply).await? == 0 {
        return Ok(None);
    }
    if let Some(len) = body_len(&reply) {
        let start = reply.len();
        reply.resize(start + len + 2, 0);
        reader.read_exact(&mut reply[start..]).await?;
    }
    Ok(Some(reply))
}

/// The length of the body that follows `line`, if its reply has one.
fn body_len(line: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(line.strip_suffix(b"\r\n")?).ok()?;
    let mut words = text.split(' ');
    match words.next()? {
        "RESERVED" | "FOUND" | "OK" => words.next_back()?.parse().ok(),
        _ => None,
    }
}

/// Sends `bytes` and reads the reply until the reply holds each of `needles`, every 20 ms, for at most
/// `deadline`.
async fn until(conn: &mut Conn, bytes: &[u8], needles: &[&str], deadline: Duration) -> Reply {
    let end = Instant::now() + deadline;
    loop {
        if let Err(e) = conn.writer.write_all(bytes).await {
            return Reply::Failed(format!("write: {e}"));
        }
        let reply = read_reply(conn, deadline).await;
        let Reply::Bytes(got) = &reply else {
            return reply;
        };
        let holds = |needle: &&str| got.windows(needle.len()).any(|w| w == needle.as_bytes());
        if needles.iter().all(holds) {
            return reply;
        }
        if Instant::now() > end {
            return Reply::Failed(format!(
                "no reply held {needles:?} within {deadline:?}; the last: {reply}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
