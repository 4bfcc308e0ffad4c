//! The harness's Redis Cluster and Sentinel set: they start whole, and fail over when a primary is killed.

use std::time::{Duration, Instant};

use dq_harness::{RedisCluster, RedisSentinelSet};

/// How long any one condition may take to come true.
const DEADLINE: Duration = Duration::from_secs(30);

/// Polls `check` until it holds, or panics naming `what` after `timeout`.
fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn cluster_fails_over_rejoins_and_grows() {
    let began = Instant::now();
    let mut cluster = RedisCluster::start();
    eprintln!("cluster formed in {:?}", began.elapsed());
    assert_eq!(cluster.urls().len(), 6);
    let primaries = cluster.primaries();
    let replicas = cluster.replicas();
    assert_eq!(primaries.len(), 3, "primaries: {primaries:?}");
    assert_eq!(replicas.len(), 3, "replicas: {replicas:?}");
    for slot in [0, 5460, 5461, 10922, 10923, 16383] {
        assert!(primaries.contains(&cluster.primary_for_slot(slot)), "slot {slot}");
    }
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut cluster.conn(primaries[0]))
        .unwrap();
    assert!(info.contains("cluster_slots_ok:16384"), "{info}");

    let any = primaries[0].to_string();
    assert_eq!(cluster.redis_cli(&["-c", "-p", &any, "SET", "dq:shapes", "v1"]), "OK");
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("dq:shapes")
        .query(&mut cluster.conn(primaries[0]))
        .unwrap();
    let owner = cluster.primary_for_slot(slot);
    // Replication is asynchronous: have the key on the owner's replica before killing the owner.
    wait_until("the key to reach a replica", DEADLINE, || {
        replicas.iter().any(|&port| {
            let mut conn = cluster.conn(port);
            let _: () = redis::cmd("READONLY").query(&mut conn).unwrap();
            redis::cmd("GET")
                .arg("dq:shapes")
                .query::<Option<String>>(&mut conn)
                .ok()
                .flatten()
                == Some("v1".into())
        })
    });

    let killed = Instant::now();
    cluster.kill(owner);
    cluster.wait_healthy(DEADLINE);
    eprintln!("cluster failed over in {:?}", killed.elapsed());
    let successor = cluster.primary_for_slot(slot);
    assert_ne!(successor, owner);
    assert!(replicas.contains(&successor), "{successor} was not a replica");
    let port = successor.to_string();
    assert_eq!(cluster.redis_cli(&["-c", "-p", &port, "GET", "dq:shapes"]), "v1");

    let restarted = Instant::now();
    cluster.restart(owner);
    cluster.wait_healthy(DEADLINE);
    eprintln!("old primary rejoined in {:?}", restarted.elapsed());
    assert!(
        cluster.replicas().contains(&owner),
        "{owner} did not come back as a replica"
    );
    assert_eq!(cluster.primaries().len(), 3);

    let added = Instant::now();
    let new = cluster.add_primary();
    eprintln!("primary added in {:?}", added.elapsed());
    assert_eq!(cluster.primaries().len(), 4);
    let from = cluster.primary_for_slot(0);
    let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(new));
    cluster.redis_cli(&[
        "--cluster",
        "reshard",
        &format!("127.0.0.1:{from}"),
        "--cluster-from",
        &from_id,
        "--cluster-to",
        &to_id,
        "--cluster-slots",
        "100",
        "--cluster-yes",
    ]);
    cluster.wait_healthy(DEADLINE);
    assert_eq!(cluster.primary_for_slot(0), new);
    assert_eq!(cluster.redis_cli(&["-c", "-p", &port, "GET", "dq:shapes"]), "v1");
    eprintln!("cluster test took {:?}", began.elapsed());
}

#[test]
fn sentinel_set_fails_over_and_takes_back_the_old_primary() {
    let began = Instant::now();
    let mut set = RedisSentinelSet::start();
    eprintln!("sentinel set started in {:?}", began.elapsed());
    assert_eq!(set.master_name(), "mymaster");
    assert_eq!(set.sentinel_urls().len(), 3);
    let old = set.primary_port();
    assert_eq!(set.data_ports().len(), 2);
    let replicas = set.replica_ports();
    assert_eq!(replicas.len(), 1);
    let _: () = redis::cmd("SET").arg("k").arg("v1").query(&mut set.conn(old)).unwrap();

    let killed = Instant::now();
    set.kill(old);
    let new = set.wait_failover(old, DEADLINE);
    eprintln!("sentinel failed over in {:?}", killed.elapsed());
    assert_eq!(new, replicas[0]);
    assert_eq!(set.primary_port(), new);
    let mut conn = set.conn(new);
    let _: () = redis::cmd("SET").arg("k").arg("v2").query(&mut conn).unwrap();
    let v: String = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
    assert_eq!(v, "v2");

    let restarted = Instant::now();
    set.restart(old);
    let new_port = new.to_string();
    // Sentinel waits on purpose (8 s past its next INFO, sent every 10 s) before it takes a primary back as a
    // replica: give it six times the deadline (it took over 60 s once on a loaded 2-core machine).
    wait_until(
        "the old primary to become a replica of the new one",
        6 * DEADLINE,
        || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut set.conn(old))
                .unwrap_or_default();
            info.contains("role:slave")
                && info.contains(&format!("master_port:{new_port}"))
                && info.contains("master_link_status:up")
        },
    );
    eprintln!("old primary became a replica in {:?}", restarted.elapsed());
    assert_eq!(set.replica_ports(), vec![old]);
    eprintln!("sentinel test took {:?}", began.elapsed());
}
