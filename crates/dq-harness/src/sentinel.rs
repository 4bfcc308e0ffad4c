//! A real local Redis Sentinel set for tests: a primary, its replica, and 3 sentinels watching them as
//! `mymaster` (quorum 2), each process on a free port in a temp dir of its own, with nodes to kill and restart.
//!
//! Every process runs from a config file in its dir, which Sentinel rewrites as it goes (the sentinels their
//! own; the data nodes' on REPLICAOF), so a restarted node comes back as what Sentinel last made it. A primary
//! is judged down after 1 s. Everything is killed on drop, and every log printed when the test fails (panics).
//!
//! With TLS ([`RedisOptions`]) data nodes and sentinels serve their TLS ports only, and talk TLS to each other;
//! with a user, the sentinels have it too, and give it to the data nodes and to each other.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use crate::options::Directives;
use crate::{RedisOptions, RedisProcess, free_port, info, info_field, wait_for};

/// The name the sentinels know the primary by.
const MASTER_NAME: &str = "mymaster";

/// How long starting the set may take on a busy machine.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// A primary, a replica and 3 sentinels of a test's own.
pub struct RedisSentinelSet {
    /// The data nodes: the first primary, then its replica.
    data: Vec<RedisProcess>,
    /// The sentinels.
    sentinels: Vec<RedisProcess>,
    /// Every port handed out, never handed out twice.
    taken: HashSet<u16>,
    /// TLS and the user, of every data node and sentinel.
    options: RedisOptions,
}

/// The config of a data node on `port` living in `dir`, secured as `options` say, replica of the one on
/// `primary` if any. Replicas sync at once, not after the default 5 s wait for more replicas.
fn data_config(options: &RedisOptions, port: u16, dir: &Path, primary: Option<u16>) -> String {
    let mut config = options.data_node(port);
    config
        .add("bind", ["127.0.0.1"])
        .add("save", [""])
        .add("appendonly", ["no"])
        .add("repl-diskless-sync-delay", ["0"])
        .extend(files_in(dir));
    if let Some(primary) = primary {
        config.add("replicaof", ["127.0.0.1".to_string(), primary.to_string()]);
    }
    config.file()
}

/// The config of a sentinel on `port` living in `dir`, secured as `options` say, watching the primary on
/// `primary`.
fn sentinel_config(options: &RedisOptions, port: u16, dir: &Path, primary: u16) -> String {
    let mut config = options.sentinel(port);
    config
        .add("bind", ["127.0.0.1"])
        .extend(files_in(dir))
        .add(
            "sentinel",
            ["monitor", MASTER_NAME, "127.0.0.1", &primary.to_string(), "2"],
        )
        .add("sentinel", ["down-after-milliseconds", MASTER_NAME, "1000"])
        .add("sentinel", ["failover-timeout", MASTER_NAME, "5000"])
        .add("sentinel", ["parallel-syncs", MASTER_NAME, "1"])
        .extend(options.sentinel_auth(MASTER_NAME));
    config.file()
}

/// `dir` and `logfile` of a process living in `dir`.
fn files_in(dir: &Path) -> Directives {
    let mut directives = Directives::default();
    directives
        .add("dir", [dir.to_string_lossy()])
        .add("logfile", [RedisProcess::log_path(dir).to_string_lossy()]);
    directives
}

impl RedisSentinelSet {
    /// Starts the primary, then its replica and waits for its link to be up, then the 3 sentinels, and waits
    /// until every sentinel names the primary as `mymaster`, knows the replica and the 2 other sentinels.
    /// Plaintext, no password.
    pub fn start() -> Self {
        Self::start_with(&RedisOptions::default())
    }

    /// As [`RedisSentinelSet::start`], every data node and sentinel secured as `options` say. Panics if the
    /// user name or password has a space, a quote or a backslash: Sentinel (7.0) writes `sentinel auth-pass`
    /// and the like back to its config file unquoted, and then cannot read it when restarted.
    pub fn start_with(options: &RedisOptions) -> Self {
        if let Some((name, password)) = &options.user {
            let unsafe_char = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '\\');
            assert!(
                !name.contains(unsafe_char) && !password.contains(unsafe_char),
                "a Sentinel set's user name and password must not contain spaces, quotes or backslashes: \
                 Sentinel rewrites them unquoted into its config file and then fails to restart from it"
            );
        }
        let mut set = RedisSentinelSet {
            data: Vec::new(),
            sentinels: Vec::new(),
            taken: HashSet::new(),
            options: options.clone(),
        };
        let primary = set.start_process(false, "redis.conf", |options, port, dir| {
            data_config(options, port, dir, None)
        });
        let primary_port = primary.port;
        set.data.push(primary);
        let replica = set.start_process(false, "redis.conf", |options, port, dir| {
            data_config(options, port, dir, Some(primary_port))
        });
        let replica_port = replica.port;
        set.data.push(replica);
        // Sentinels learn of replicas from the primary's INFO, asked for at once and then every 10 s: have the
        // replica attached before they start.
        wait_for(SETUP_TIMEOUT, "the replica to attach", || {
            let replication = info(&set.options, replica_port, "replication").ok_or("the replica does not answer")?;
            match info_field(&replication, "master_link_status") {
                Some("up") => Ok(()),
                _ => Err(format!("replica :{replica_port} has no link to its primary yet")),
            }
        });
        for _ in 0..3 {
            let sentinel = set.start_process(true, "sentinel.conf", |options, port, dir| {
                sentinel_config(options, port, dir, primary_port)
            });
            set.sentinels.push(sentinel);
        }
        wait_for(
            SETUP_TIMEOUT,
            "the sentinels to know each other and the replica",
            || {
                for sentinel in &set.sentinels {
                    let port = sentinel.port;
                    let mut conn = set
                        .options
                        .quick_conn(port)
                        .ok_or_else(|| format!("sentinel :{port} does not answer"))?;
                    let master = master_addr(&mut conn)?;
                    if master != primary_port {
                        return Err(format!("sentinel :{port} names :{master} as the primary"));
                    }
                    let replicas = sentinel_list(&mut conn, "replicas")?;
                    if replicas == 0 {
                        return Err(format!("sentinel :{port} knows no replica yet"));
                    }
                    let others = sentinel_list(&mut conn, "sentinels")?;
                    if others != 2 {
                        return Err(format!("sentinel :{port} knows {others} other sentinels, not 2"));
                    }
                }
                Ok(())
            },
        );
        set
    }

    /// Starts `redis-server` with a config file `file` (written by `config(options, port, dir)`) on new ports in
    /// a new temp dir, trying other ports if those turn out to be taken; with `sentinel`, in Sentinel mode
    /// (`redis-server <file> --sentinel`, the same as `redis-sentinel <file>`, whose Debian package is not
    /// always installed with redis-server's).
    fn start_process(
        &mut self,
        sentinel: bool,
        file: &str,
        config: impl Fn(&RedisOptions, u16, &Path) -> String,
    ) -> RedisProcess {
        let program = "redis-server";
        let mut last = String::new();
        for _ in 0..10 {
            let port = loop {
                let port = free_port();
                if self.taken.insert(port) {
                    break port;
                }
            };
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join(file);
            std::fs::write(&path, config(&self.options, port, dir.path())).expect("write config file");
            let mut args = vec![path.into_os_string()];
            if sentinel {
                args.push("--sentinel".into());
            }
            match RedisProcess::start(program, args, port, dir, &self.options) {
                Ok(process) => return process,
                Err(e) => last = e,
            }
        }
        panic!("could not start {program} (is it installed? scripts/test.sh installs it): {last}");
    }

    /// The name the sentinels know the primary by: `mymaster`.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// `redis://127.0.0.1:<port>` of the 3 sentinels; with TLS `rediss://`, with a user `name:password@` after
    /// the scheme (see [`RedisOptions::url`]). The data nodes take the same scheme and credentials.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(|s| self.options.url(s.port)).collect()
    }

    /// The options it was started with (their certificates, for a client over TLS).
    pub fn options(&self) -> &RedisOptions {
        &self.options
    }

    /// The ports of the 3 sentinels (their TLS ports with TLS).
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The ports of both data nodes, primary or replica (the first primary first).
    pub fn data_ports(&self) -> Vec<u16> {
        self.data.iter().map(|d| d.port).collect()
    }

    /// The port of the current primary, as the first running sentinel that answers names it.
    pub fn primary_port(&self) -> u16 {
        let mut errors = Vec::new();
        for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
            match self
                .options
                .quick_conn(sentinel.port)
                .ok_or_else(|| format!("sentinel :{} does not answer", sentinel.port))
                .and_then(|mut conn| master_addr(&mut conn))
            {
                Ok(port) => return port,
                Err(e) => errors.push(e),
            }
        }
        panic!("no sentinel names the primary: {errors:?}");
    }

    /// The ports of the data nodes other than the current primary (see [`RedisSentinelSet::primary_port`]),
    /// killed ones included.
    pub fn replica_ports(&self) -> Vec<u16> {
        let primary = self.primary_port();
        self.data_ports().into_iter().filter(|&p| p != primary).collect()
    }

    fn process_mut(&mut self, port: u16) -> &mut RedisProcess {
        self.data
            .iter_mut()
            .chain(&mut self.sentinels)
            .find(|p| p.port == port)
            .unwrap_or_else(|| panic!("no data node or sentinel on port {port}"))
    }

    /// Kills the data node or sentinel on `port` (SIGKILL), keeping its dir and config file.
    pub fn kill(&mut self, port: u16) {
        self.process_mut(port).kill();
    }

    /// Starts the data node or sentinel on `port` again from its config file, same port and dir. A primary that
    /// was failed over in the meantime comes back empty, as a primary, until a sentinel makes it a replica of
    /// its successor (some 10 to 20 s later: Sentinel waits to be sure). Does not wait for that.
    pub fn restart(&mut self, port: u16) {
        self.process_mut(port).restart();
    }

    /// Starts the data node on `port` again as a replica of the one on `primary`, as an operator brings a
    /// failed primary back after a failover: it syncs from the new primary at once, and the sentinels pick
    /// it up as a replica from the primary's INFO. (Started as it was, it would call itself primary until
    /// Sentinel demotes it, which Sentinel delays on purpose and puts off further while it is in TILT
    /// mode, as on a loaded machine: minutes, once.) Does not wait for the sync.
    pub fn restart_as_replica(&mut self, port: u16, primary: u16) {
        let options = self.options.clone();
        let process = self.process_mut(port);
        let dir = process.dir.path().to_path_buf();
        std::fs::write(dir.join("redis.conf"), data_config(&options, port, &dir, Some(primary)))
            .expect("write config file");
        process.restart();
    }

    /// Waits until every running sentinel names the same primary other than `old_primary`, and that node says
    /// it is a primary; gives its port. Panics after `timeout`.
    #[track_caller]
    pub fn wait_failover(&self, old_primary: u16, timeout: Duration) -> u16 {
        wait_for(timeout, &format!("a failover away from :{old_primary}"), || {
            let mut named = HashSet::new();
            for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
                let port = sentinel.port;
                let mut conn = self
                    .options
                    .quick_conn(port)
                    .ok_or_else(|| format!("sentinel :{port} does not answer"))?;
                named.insert(master_addr(&mut conn)?);
            }
            let new = match named.into_iter().collect::<Vec<_>>()[..] {
                [port] if port != old_primary => port,
                [_] => return Err(format!("the sentinels still name :{old_primary}")),
                ref ports => return Err(format!("the sentinels name different primaries: {ports:?}")),
            };
            let replication =
                info(&self.options, new, "replication").ok_or_else(|| format!("new primary :{new} does not answer"))?;
            match info_field(&replication, "role") {
                Some("master") => Ok(new),
                _ => Err(format!("new primary :{new} is not a primary yet")),
            }
        })
    }

    /// A synchronous connection to the data node or sentinel on `port`.
    pub fn conn(&self, port: u16) -> redis::Connection {
        self.options
            .client(port)
            .get_connection()
            .unwrap_or_else(|e| panic!("connect to :{port}: {e}"))
    }

    /// The log of the data node or sentinel on `port` so far.
    pub fn node_log(&self, port: u16) -> String {
        self.data
            .iter()
            .chain(&self.sentinels)
            .find(|p| p.port == port)
            .unwrap_or_else(|| panic!("no data node or sentinel on port {port}"))
            .log()
    }
}

/// The port of the primary the sentinel on `conn` names.
fn master_addr(conn: &mut redis::Connection) -> Result<u16, String> {
    let addr: Vec<String> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER_NAME)
        .query(conn)
        .map_err(|e| format!("SENTINEL get-master-addr-by-name: {e}"))?;
    addr.get(1)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("SENTINEL get-master-addr-by-name gave {addr:?}"))
}

/// How many entries `SENTINEL <what> mymaster` (`replicas`, `sentinels`) lists on `conn`.
fn sentinel_list(conn: &mut redis::Connection, what: &str) -> Result<usize, String> {
    let entries: Vec<redis::Value> = redis::cmd("SENTINEL")
        .arg(what)
        .arg(MASTER_NAME)
        .query(conn)
        .map_err(|e| format!("SENTINEL {what}: {e}"))?;
    Ok(entries.len())
}

impl Drop for RedisSentinelSet {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for process in &self.data {
                eprintln!("---- redis data node :{} log ----\n{}", process.port, process.log());
            }
            for process in &self.sentinels {
                eprintln!("---- redis sentinel :{} log ----\n{}", process.port, process.log());
            }
        }
        for process in self.data.iter_mut().chain(&mut self.sentinels) {
            process.kill();
        }
    }
}
