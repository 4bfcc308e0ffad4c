//! The two servers the beanstalkd protocol tests talk to: the real beanstalkd (Debian's 1.12, installed by
//! scripts/ensure-beanstalkd.sh) and dq-server's beanstalkd listener with dq-timer on a Redis of its own.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dq_harness::{RedisServer, free_port};

use super::{Running, env, start_on};

/// A `beanstalkd -l 127.0.0.1 -p <port>` of a test's own: in memory (no binlog), killed on drop.
pub struct Beanstalkd {
    /// The running server.
    child: Child,
    /// `127.0.0.1:<port>`.
    pub addr: String,
}

impl Beanstalkd {
    /// Starts one on a free port and waits until it accepts connections (another port if it exits first,
    /// which a port taken meanwhile does).
    pub fn start() -> Self {
        for _ in 0..10 {
            let port = free_port();
            let mut child = Command::new("beanstalkd")
                .args(["-l", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("cannot start beanstalkd (scripts/ensure-beanstalkd.sh installs it)");
            let addr = format!("127.0.0.1:{port}");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if TcpStream::connect(&addr).is_ok() {
                    return Beanstalkd { child, addr };
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("beanstalkd did not start");
    }
}

impl Drop for Beanstalkd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// dq-server with its beanstalkd listener, and dq-timer (which promotes delayed jobs and ends expired
/// reservations), on a fresh Redis, by default with one partition, so that job ids count 1, 2, 3 … as
/// beanstalkd's do.
pub struct DqBeanstalkd {
    /// The listener's `127.0.0.1:<port>`.
    pub addr: String,
    /// dq-server (its HTTP API on `server.port`).
    pub server: Running,
    /// Dropped before Redis.
    _timer: Running,
    _redis: RedisServer,
}

impl DqBeanstalkd {
    /// Starts Redis (one partition), dq-server and dq-timer, and waits until the listener accepts
    /// connections.
    pub async fn start() -> Self {
        Self::with_partitions(1).await
    }

    /// As [`DqBeanstalkd::start`], on `partitions` partitions: tubes then have home partitions of their
    /// own, and numbers no longer count 1, 2, 3 … (the order across tubes is what such a dq tests).
    pub async fn with_partitions(partitions: u16) -> Self {
        let redis = RedisServer::start();
        let listen_port = free_port();
        let addr = format!("127.0.0.1:{listen_port}");
        let vars = |port| {
            let mut vars = env(&[&redis], port);
            vars.push(("DQ__REDIS__PARTITIONS", partitions.to_string()));
            vars
        };
        let port = free_port();
        let mut server_vars = vars(port);
        server_vars.push(("DQ__BEANSTALKD__LISTEN", addr.clone()));
        let server = start_on("dq-server", port, server_vars).await;
        let port = free_port();
        let timer = start_on("dq-timer", port, vars(port)).await;
        dq_harness::eventually(
            Duration::from_secs(10),
            &format!("dq's beanstalkd listener on {addr}"),
            || {
                let addr = addr.clone();
                async move { tokio::net::TcpStream::connect(addr).await.is_ok() }
            },
        )
        .await;
        DqBeanstalkd {
            addr,
            server,
            _timer: timer,
            _redis: redis,
        }
    }
}
