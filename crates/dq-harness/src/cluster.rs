//! A real local Redis Cluster for tests: 3 primaries and 3 replicas, each a `redis-server` on free ports in a
//! temp dir of its own, with nodes to kill, restart (they rejoin from their `nodes.conf`) and add.
//!
//! The node timeout is 1 s, so a killed primary's replica takes over within a few seconds. Every node is
//! killed on drop, and every log printed when the test fails (panics). With TLS ([`RedisOptions`]) the nodes
//! serve and gossip their TLS ports only, and the cluster bus and replication run over TLS as well.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::time::Duration;

use crate::{RedisOptions, RedisProcess, free_port, info, info_field, wait_for};

/// How many slots a Redis Cluster has.
const SLOTS: usize = 16384;

/// How long forming the cluster, or adding a node, may take on a busy machine.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// A local Redis Cluster of a test's own, 3 primaries with one replica each to begin with.
pub struct RedisCluster {
    /// Every node started, killed ones included, in the order started.
    nodes: Vec<RedisProcess>,
    /// The ports of `nodes` and their cluster bus ports, never handed out twice.
    taken: HashSet<u16>,
    /// TLS and the user, of every node.
    options: RedisOptions,
}

/// Which primary (port) serves which slot range, as one node sees it.
type SlotOwners = BTreeMap<(u16, u16), u16>;

/// One line of CLUSTER NODES: a node as one node sees it.
#[derive(Debug, Clone, PartialEq)]
struct NodeView {
    /// Node id.
    id: String,
    /// Client port (0 for a node without an address yet).
    port: u16,
    /// `myself`, `master`, `slave`, `fail?`, `fail`, `handshake`, `noaddr`, ...
    flags: Vec<String>,
    /// The id of its primary, for a replica.
    master: Option<String>,
    /// Slot ranges it serves, inclusive (migrating/importing markers left out).
    slots: Vec<(u16, u16)>,
}

impl NodeView {
    fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
    }
}

/// Parses a CLUSTER NODES reply.
fn parse_nodes(text: &str) -> Vec<NodeView> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let id = fields.next()?.to_string();
            let addr = fields.next()?;
            let port = addr.split('@').next()?.rsplit(':').next()?.parse().unwrap_or(0);
            let flags = fields.next()?.split(',').map(str::to_string).collect();
            let master = fields.next().filter(|m| *m != "-").map(str::to_string);
            // ping-sent, pong-recv, config-epoch, link-state.
            let slots = fields
                .skip(4)
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(NodeView {
                id,
                port,
                flags,
                master,
                slots,
            })
        })
        .collect()
}

impl RedisCluster {
    /// Starts 6 cluster-enabled nodes, forms them into a cluster of 3 primaries and 3 replicas with
    /// `redis-cli --cluster create`, and waits until every node reports `cluster_state:ok` with all 16384 slots
    /// assigned and knows all 6 nodes, and every replica's link to its primary is up. Plaintext, no password.
    pub fn start() -> Self {
        Self::start_with(&RedisOptions::default())
    }

    /// As [`RedisCluster::start`], every node secured as `options` say.
    pub fn start_with(options: &RedisOptions) -> Self {
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            taken: HashSet::new(),
            options: options.clone(),
        };
        for _ in 0..6 {
            let node = cluster.start_node();
            cluster.nodes.push(node);
        }
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(cluster.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
        cluster.redis_cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
        wait_for(SETUP_TIMEOUT, "the new cluster to form", || cluster.formed());
        cluster
    }

    /// A port nobody listens on and no node of this cluster has been given.
    fn unused_port(&mut self) -> u16 {
        loop {
            let port = free_port();
            if self.taken.insert(port) {
                return port;
            }
        }
    }

    /// Starts one more empty cluster-enabled node, on new ports (the client port and the cluster bus port) in a
    /// new temp dir, trying other ports if those turn out to be taken.
    fn start_node(&mut self) -> RedisProcess {
        let mut last = String::new();
        for _ in 0..10 {
            let (port, bus_port) = (self.unused_port(), self.unused_port());
            let dir = tempfile::tempdir().expect("temp dir");
            let mut directives = self.options.data_node(port);
            if self.options.tls.is_some() {
                directives.add("tls-cluster", ["yes"]);
            }
            let (bus_port, dir_path) = (bus_port.to_string(), dir.path().to_string_lossy().into_owned());
            directives
                .add("cluster-port", [bus_port.as_str()])
                .add("bind", ["127.0.0.1"])
                .add("cluster-enabled", ["yes"])
                .add("cluster-config-file", ["nodes.conf"])
                .add("cluster-node-timeout", ["1000"])
                .add("cluster-replica-validity-factor", ["0"])
                .add("appendonly", ["no"])
                .add("save", [""])
                // Replicas sync at once instead of after the default 5 s wait for more replicas.
                .add("repl-diskless-sync-delay", ["0"])
                .add("dir", [dir_path])
                .add("logfile", [RedisProcess::log_path(dir.path()).to_string_lossy()]);
            let args: Vec<OsString> = directives.args();
            match RedisProcess::start("redis-server", args, port, dir, &self.options) {
                Ok(node) => return node,
                Err(e) => last = e,
            }
        }
        panic!("could not start a cluster node (is redis-server installed? scripts/test.sh installs it): {last}");
    }

    /// Every node's port (its TLS port with TLS), killed ones included, in the order they were started.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// `redis://127.0.0.1:<port>` of every node, killed ones included; with TLS `rediss://`, with a user
    /// `name:password@` after the scheme (see [`RedisOptions::url`]).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| self.options.url(n.port)).collect()
    }

    /// The options it was started with (their certificates, for a client over TLS).
    pub fn options(&self) -> &RedisOptions {
        &self.options
    }

    /// The URLs to give a cluster client as its seeds: all of [`RedisCluster::urls`].
    pub fn seed_urls(&self) -> Vec<String> {
        self.urls()
    }

    fn node(&self, port: u16) -> &RedisProcess {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    fn node_mut(&mut self, port: u16) -> &mut RedisProcess {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    fn running(&self) -> impl Iterator<Item = &RedisProcess> {
        self.nodes.iter().filter(|n| n.is_running())
    }

    /// CLUSTER NODES as node `port` sees the cluster.
    fn view_of(&self, port: u16) -> Result<Vec<NodeView>, String> {
        let mut conn = self
            .options
            .quick_conn(port)
            .ok_or_else(|| format!("node :{port} does not answer"))?;
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut conn)
            .map_err(|e| format!("CLUSTER NODES on :{port}: {e}"))?;
        Ok(parse_nodes(&text))
    }

    /// The cluster as the first running node that answers sees it.
    fn view(&self) -> Vec<NodeView> {
        let mut errors = Vec::new();
        for node in self.running() {
            match self.view_of(node.port) {
                Ok(view) => return view,
                Err(e) => errors.push(e),
            }
        }
        panic!("no cluster node answers CLUSTER NODES: {errors:?}");
    }

    /// The ports of the current primaries (nodes flagged `master` and not failed), as a running node sees the
    /// cluster: ask again after a failover. Call [`RedisCluster::wait_healthy`] first for a settled answer.
    pub fn primaries(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .view()
            .iter()
            .filter(|n| n.has("master") && !n.has("fail"))
            .map(|n| n.port)
            .collect();
        ports.sort_unstable();
        ports
    }

    /// The ports of the current replicas (nodes flagged `slave` and not failed), as [`RedisCluster::primaries`].
    pub fn replicas(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .view()
            .iter()
            .filter(|n| n.has("slave") && !n.has("fail"))
            .map(|n| n.port)
            .collect();
        ports.sort_unstable();
        ports
    }

    /// The port of the primary serving `slot` now, as a running node sees the cluster.
    pub fn primary_for_slot(&self, slot: u16) -> u16 {
        let view = self.view();
        view.iter()
            .find(|n| n.has("master") && n.serves(slot))
            .map(|n| n.port)
            .unwrap_or_else(|| panic!("no primary serves slot {slot}: {view:?}"))
    }

    /// The node id (CLUSTER MYID) of the node on `port`.
    pub fn node_id(&self, port: u16) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.conn(port))
            .unwrap_or_else(|e| panic!("CLUSTER MYID on :{port}: {e}"))
    }

    /// A synchronous connection to the node on `port` (a plain one: keys of other nodes' slots get MOVED).
    pub fn conn(&self, port: u16) -> redis::Connection {
        self.node(port);
        self.options
            .client(port)
            .get_connection()
            .unwrap_or_else(|e| panic!("connect to cluster node :{port}: {e}"))
    }

    /// Runs `redis-cli` with `args` and gives its standard output, trailing whitespace trimmed; panics if it
    /// fails or takes over 2 minutes. Name the node with `-p <port>` (the host defaults to 127.0.0.1), e.g.
    /// `["-c", "-p", port, "SET", "k", "v"]`, or `["--cluster", "reshard", "127.0.0.1:<port>", "--cluster-from",
    /// id, "--cluster-to", id, "--cluster-slots", "100", "--cluster-yes"]`. The options TLS and the user need
    /// (`--tls`, the certificates, `--user`, `--pass`) come first of their own.
    pub fn redis_cli(&self, args: &[&str]) -> String {
        self.options.redis_cli(args)
    }

    /// Kills the node on `port` (SIGKILL), keeping its dir and `nodes.conf` for [`RedisCluster::restart`].
    pub fn kill(&mut self, port: u16) {
        self.node_mut(port).kill();
    }

    /// Starts the node on `port` again, same port and dir: it rejoins from its `nodes.conf` (a primary that was
    /// failed over in the meantime comes back as a replica of its successor). Does not wait for that: see
    /// [`RedisCluster::wait_healthy`].
    pub fn restart(&mut self, port: u16) {
        self.node_mut(port).restart();
    }

    /// Waits until the running nodes agree that the cluster is whole again (after a failover, a restart, a
    /// reshard): every one reports `cluster_state:ok`, sees the same primary for every slot and all 16384 slots
    /// served by running primaries, sees no running node as failing, and sees every running node in the role
    /// that node gives itself (a restarted old primary turns replica at once, the others learn it by gossip);
    /// and every running replica's link to its primary is up. Panics after `timeout`.
    #[track_caller]
    pub fn wait_healthy(&self, timeout: Duration) {
        wait_for(timeout, "a healthy cluster", || self.healthy());
    }

    /// Why the cluster is not [`RedisCluster::wait_healthy`] yet, if it is not.
    fn healthy(&self) -> Result<(), String> {
        let running: HashSet<u16> = self.running().map(|n| n.port).collect();
        let mut roles = BTreeMap::new();
        for &port in &running {
            let replication =
                info(&self.options, port, "replication").ok_or_else(|| format!("node :{port} does not answer"))?;
            let role = match info_field(&replication, "role") {
                Some("slave") if info_field(&replication, "master_link_status") != Some("up") => {
                    return Err(format!("replica :{port} has no link to its primary yet"));
                }
                Some("slave") => "slave",
                _ => "master",
            };
            roles.insert(port, role);
        }
        let mut first: Option<(u16, SlotOwners)> = None;
        for &port in &running {
            let state = self.cluster_info(port)?;
            if info_field(&state, "cluster_state") != Some("ok") {
                return Err(format!("node :{port} reports cluster_state other than ok"));
            }
            let view = self.view_of(port)?;
            if let Some(sick) = view
                .iter()
                .find(|n| running.contains(&n.port) && (n.has("fail") || n.has("fail?")))
            {
                return Err(format!("node :{port} sees running node :{} as failing", sick.port));
            }
            if let Some(stale) = view
                .iter()
                .find(|n| roles.get(&n.port).is_some_and(|role| !n.has(role)))
            {
                return Err(format!(
                    "node :{port} does not see node :{} as the {} it is",
                    stale.port, roles[&stale.port]
                ));
            }
            let mut owners = BTreeMap::new();
            let mut covered = 0;
            for primary in view.iter().filter(|n| n.has("master")) {
                for &range in &primary.slots {
                    if !running.contains(&primary.port) {
                        return Err(format!(
                            "node :{port} sees slots {range:?} on stopped node :{}",
                            primary.port
                        ));
                    }
                    covered += usize::from(range.1 - range.0) + 1;
                    owners.insert(range, primary.port);
                }
            }
            if covered != SLOTS {
                return Err(format!("node :{port} sees {covered} slots served, not {SLOTS}"));
            }
            match &first {
                None => first = Some((port, owners)),
                Some((other, theirs)) if *theirs != owners => {
                    return Err(format!("nodes :{other} and :{port} disagree on who serves which slots"));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// CLUSTER INFO of node `port`.
    fn cluster_info(&self, port: u16) -> Result<String, String> {
        let mut conn = self
            .options
            .quick_conn(port)
            .ok_or_else(|| format!("node :{port} does not answer"))?;
        redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut conn)
            .map_err(|e| format!("CLUSTER INFO on :{port}: {e}"))
    }

    /// Why the freshly created cluster is not formed yet, if it is not.
    fn formed(&self) -> Result<(), String> {
        self.healthy()?;
        let (mut primaries, mut replicas) = (0, 0);
        for node in &self.nodes {
            let state = self.cluster_info(node.port)?;
            if info_field(&state, "cluster_slots_assigned") != Some("16384") {
                return Err(format!("node :{} does not see all slots assigned", node.port));
            }
            let known = info_field(&state, "cluster_known_nodes").unwrap_or("?");
            if known != self.nodes.len().to_string() {
                return Err(format!("node :{} knows {known} nodes", node.port));
            }
            let replication =
                info(&self.options, node.port, "replication").ok_or_else(|| format!(":{} is gone", node.port))?;
            match info_field(&replication, "role") {
                Some("master") => primaries += 1,
                _ => replicas += 1,
            }
        }
        if (primaries, replicas) != (3, 3) {
            return Err(format!("{primaries} primaries and {replicas} replicas so far"));
        }
        Ok(())
    }

    /// Starts one more, empty, cluster-enabled node, joins it to the cluster as a primary without slots
    /// (`redis-cli --cluster add-node`), and waits until it and every running node know each other. Gives its
    /// port; move slots to it with [`RedisCluster::redis_cli`] (`--cluster reshard`).
    pub fn add_primary(&mut self) -> u16 {
        let existing = self.running().next().expect("a running cluster node").port;
        let node = self.start_node();
        let port = node.port;
        self.nodes.push(node);
        self.redis_cli(&[
            "--cluster",
            "add-node",
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{existing}"),
        ]);
        let ids: HashSet<String> = self.running().map(|n| self.node_id(n.port)).collect();
        let id = self.node_id(port);
        wait_for(SETUP_TIMEOUT, &format!("new node :{port} to join"), || {
            for node in self.running() {
                let view = self.view_of(node.port)?;
                let settled = |n: &NodeView| !n.has("handshake") && !n.has("noaddr") && !n.has("fail?");
                if !view.iter().any(|n| n.id == id && settled(n)) {
                    return Err(format!("node :{} does not know the new node yet", node.port));
                }
                if let Some(missing) = ids.iter().find(|i| !view.iter().any(|n| &n.id == *i && settled(n))) {
                    return Err(format!("node :{} does not know node {missing} yet", node.port));
                }
            }
            let state = self.cluster_info(port)?;
            if info_field(&state, "cluster_state") != Some("ok") {
                return Err(format!("new node :{port} reports cluster_state other than ok"));
            }
            Ok(())
        });
        port
    }

    /// The log of the node on `port` so far.
    pub fn node_log(&self, port: u16) -> String {
        self.node(port).log()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for node in &self.nodes {
                eprintln!("---- redis cluster node :{} log ----\n{}", node.port, node.log());
            }
        }
        for node in &mut self.nodes {
            node.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_nodes() {
        let text = "\
e3 127.0.0.1:21007@41007 master - 0 1795426103614 0 connected
d6 127.0.0.1:21001@41001 myself,master - 0 1795426103614 1 connected 0-5460 [5461->-ce]
c0 127.0.0.1:21006@41006,host slave d6 0 1795426103614 3 connected
84 127.0.0.1:21003@41003 master,fail - 0 1795426103000 3 disconnected 10923 10924-16383
";
        let view = parse_nodes(text);
        assert_eq!(view.len(), 4);
        assert_eq!(view[1].port, 21001);
        assert!(view[1].has("myself") && view[1].has("master"));
        assert_eq!(view[1].slots, vec![(0, 5460)]);
        assert_eq!(view[2].master.as_deref(), Some("d6"));
        assert_eq!(view[2].port, 21006);
        assert_eq!(view[3].slots, vec![(10923, 10923), (10924, 16383)]);
        assert!(view[3].serves(16383) && !view[3].serves(5461));
        assert!(view[0].slots.is_empty() && view[0].master.is_none());
    }
}
