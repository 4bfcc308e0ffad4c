//! `Type=notify`: every binary tells systemd it is ready once it serves, pings the watchdog, and says it
//! is stopping when it drains.

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use common::env;
use dq_harness::{DqProcess, RedisServer, free_port};

/// Reads datagrams until one contains `want`, or panics after `timeout`.
fn expect(socket: &UnixDatagram, want: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 512];
    while Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buf)
            && String::from_utf8_lossy(&buf[..n]).contains(want)
        {
            return;
        }
    }
    panic!("no {want} within {timeout:?}");
}

#[test]
fn every_binary_notifies_ready_watchdog_and_stopping() {
    let redis = RedisServer::start();
    for name in ["dq-server", "dq-timer", "dq-consumer", "dq-checker"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut vars = env(&[&redis], free_port());
        vars.push(("NOTIFY_SOCKET", path.to_str().unwrap().to_string()));
        vars.push(("WATCHDOG_USEC", "400000".into()));
        let mut p = DqProcess::spawn(name, &vars, &[]);
        expect(&socket, "READY=1", Duration::from_secs(30));
        expect(&socket, "WATCHDOG=1", Duration::from_secs(30));
        p.signal("TERM");
        expect(&socket, "STOPPING=1", Duration::from_secs(30));
        let status = p.wait(Duration::from_secs(30)).expect("exits");
        assert_eq!(status.code(), Some(0), "{name}: {}", p.log());
    }
}
