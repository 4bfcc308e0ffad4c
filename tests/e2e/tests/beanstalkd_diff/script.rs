//! What a session is: connections, and the bytes sent on them step by step.

use std::time::Duration;

/// How long a step waits for a reply by default: long enough for a reply that waits on a delay, a TTR or a
/// pause of up to 5 s on a busy machine; a server that answers at once does not make the test wait.
const REPLY_DEADLINE: Duration = Duration::from_secs(10);

/// One scripted conversation, run against a fresh server: its connections are opened first, in order.
pub struct Session {
    /// Names it in a failure.
    pub name: &'static str,
    /// How many connections it opens (numbered from 0).
    pub conns: usize,
    /// What happens, in order.
    pub steps: Vec<Step>,
    /// The partitions of the dq it runs against (1: numbers count 1, 2, 3 … as beanstalkd's). With more,
    /// tubes have home partitions of their own and numbers differ from beanstalkd's: the replies' job
    /// numbers are then compared by the order they first appear in (see `renumbered`), and the session
    /// must not name a job by its number.
    pub partitions: u16,
}

/// One thing done on one connection.
pub struct Step {
    /// The connection (0-based).
    pub conn: usize,
    /// What is done on it.
    pub action: Action,
    /// The name of the difference (in `DIFFERENCES`) whose comparison this step's replies get; exact otherwise.
    pub difference: Option<&'static str>,
    /// How long to wait for the reply.
    pub deadline: Duration,
}

/// What a step does.
pub enum Action {
    /// Send the bytes, then read one reply.
    Send(Vec<u8>),
    /// Send the bytes without reading: a later [`Action::Read`] reads the reply (a reserve that blocks).
    Start(Vec<u8>),
    /// Read one reply: to an earlier [`Action::Start`], or the second reply to bytes holding two commands.
    Read,
    /// Send the bytes and read the reply, again and again until the reply holds each of the texts (or the
    /// deadline passes): waits for the server to get somewhere without a fixed sleep.
    Until(Vec<u8>, &'static [&'static str]),
    /// Close the connection.
    Close,
}

impl Action {
    /// The bytes the step sends, if any.
    pub fn sent(&self) -> &[u8] {
        match self {
            Action::Send(b) | Action::Start(b) | Action::Until(b, _) => b,
            Action::Read | Action::Close => b"",
        }
    }

    /// A short word for what it does, for failure messages.
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Send(_) => "send",
            Action::Start(_) => "start",
            Action::Read => "read",
            Action::Until(..) => "until",
            Action::Close => "close",
        }
    }
}

impl Session {
    /// A session of `conns` connections and no steps yet.
    pub fn new(name: &'static str, conns: usize) -> Self {
        Session {
            name,
            conns,
            steps: Vec::new(),
            partitions: 1,
        }
    }

    /// Runs against a dq of `partitions` partitions (see [`Session::partitions`]).
    pub fn on_partitions(mut self, partitions: u16) -> Self {
        self.partitions = partitions;
        self
    }

    fn push(mut self, conn: usize, action: Action) -> Self {
        assert!(conn < self.conns, "{}: connection {conn} of {}", self.name, self.conns);
        self.steps.push(Step {
            conn,
            action,
            difference: None,
            deadline: REPLY_DEADLINE,
        });
        self
    }

    /// Sends `bytes` on `conn` and reads the reply.
    pub fn send(self, conn: usize, bytes: impl AsRef<[u8]>) -> Self {
        self.push(conn, Action::Send(bytes.as_ref().to_vec()))
    }

    /// Sends a command line (CR LF added) on `conn` and reads the reply.
    pub fn cmd(self, conn: usize, line: &str) -> Self {
        self.send(conn, format!("{line}\r\n"))
    }

    /// Sends `put <pri> <delay> <ttr> <len>` and the body on `conn`, and reads the reply.
    pub fn put(self, conn: usize, pri: u32, delay: u32, ttr: u32, body: impl AsRef<[u8]>) -> Self {
        self.send(conn, put(pri, delay, ttr, body.as_ref()))
    }

    /// Sends a command line (CR LF added) on `conn`; the reply is read by a later [`Session::read`].
    pub fn start(self, conn: usize, line: &str) -> Self {
        self.start_raw(conn, format!("{line}\r\n"))
    }

    /// Sends `bytes` on `conn`; a reply, if any, is read by a later [`Session::read`] or [`Session::send`].
    pub fn start_raw(self, conn: usize, bytes: impl AsRef<[u8]>) -> Self {
        self.push(conn, Action::Start(bytes.as_ref().to_vec()))
    }

    /// Reads one reply on `conn`.
    pub fn read(self, conn: usize) -> Self {
        self.push(conn, Action::Read)
    }

    /// Sends a command line on `conn` until the reply holds each of `needles`.
    pub fn until(self, conn: usize, line: &str, needles: &'static [&'static str]) -> Self {
        self.push(conn, Action::Until(format!("{line}\r\n").into_bytes(), needles))
    }

    /// Closes `conn`.
    pub fn close(self, conn: usize) -> Self {
        self.push(conn, Action::Close)
    }

    /// Compares the last step's replies as difference `name` allows.
    pub fn differs(mut self, name: &'static str) -> Self {
        self.steps.last_mut().expect("a step to mark").difference = Some(name);
        self
    }
}

/// The bytes of a put: the command line, the body and its CR LF.
pub fn put(pri: u32, delay: u32, ttr: u32, body: &[u8]) -> Vec<u8> {
    let mut bytes = format!("put {pri} {delay} {ttr} {}\r\n", body.len()).into_bytes();
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(b"\r\n");
    bytes
}
