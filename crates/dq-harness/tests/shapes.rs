//! The harness's Redis shapes: the Cluster and the Sentinel set start whole and fail over when a primary is
//! killed; and every shape started with TLS and an ACL user refuses plaintext and anonymous clients, and serves
//! one that uses the harness's URLs and certificates.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dq_harness::{RedisCluster, RedisOptions, RedisSentinelSet, RedisServer, TestCerts};

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
    let (slot, owner) = owner_of(&cluster, "dq:shapes");
    // Replication is asynchronous: have the key on the owner's replica before killing the owner.
    wait_until("the key to reach a replica", DEADLINE, || {
        on_a_replica(&cluster, &replicas, "dq:shapes", "v1")
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
    move_slots(&cluster, new, 100);
    cluster.wait_healthy(DEADLINE);
    assert_eq!(cluster.primary_for_slot(0), new);
    assert_eq!(cluster.redis_cli(&["-c", "-p", &port, "GET", "dq:shapes"]), "v1");
    eprintln!("cluster test took {:?}", began.elapsed());
}

#[test]
fn sentinel_set_fails_over_and_the_old_primary_rejoins_as_a_replica() {
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
    set.restart_as_replica(old, new);
    let new_port = new.to_string();
    wait_until("the old primary to become a replica of the new one", DEADLINE, || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut set.conn(old))
            .unwrap_or_default();
        info.contains("role:slave")
            && info.contains(&format!("master_port:{new_port}"))
            && info.contains("master_link_status:up")
    });
    eprintln!("old primary became a replica in {:?}", restarted.elapsed());
    wait_until("the sentinels to list it as a replica", DEADLINE, || {
        set.replica_ports() == vec![old]
    });
    eprintln!("sentinel test took {:?}", began.elapsed());
}

/// The user the secured shapes get. The password has what a URL must escape (no space: Sentinel could not
/// read it back from its rewritten config file).
const USER: &str = "dq-test";
const PASSWORD: &str = "s3cret-p@ss:w0rd/%";

/// TLS with fresh certificates, and the ACL user [`USER`].
fn secured() -> RedisOptions {
    RedisOptions::default()
        .with_tls(Arc::new(TestCerts::generate()))
        .with_user(USER, PASSWORD)
}

/// The error PING on `client` ends in (connecting included), or `None` if it answers.
fn ping_error(client: redis::Client) -> Option<String> {
    let mut conn = match client.get_connection_with_timeout(Duration::from_secs(2)) {
        Ok(conn) => conn,
        Err(e) => return Some(e.to_string()),
    };
    conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    redis::cmd("PING")
        .query::<String>(&mut conn)
        .err()
        .map(|e| e.to_string())
}

/// Checks that the node on `port`, secured as `options`, refuses a plaintext client (with or without the
/// password), and a TLS client with no or a wrong password, and answers one with the credentials, and also
/// one without a client certificate (`tls-auth-clients optional`).
fn check_secured(options: &RedisOptions, port: u16) {
    let certs = options.tls.clone().expect("TLS");
    let plain = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    assert!(
        ping_error(plain).is_some(),
        "plaintext without password answered on :{port}"
    );
    let plain = RedisOptions::default().with_user(USER, PASSWORD);
    assert!(
        ping_error(plain.client(port)).is_some(),
        "plaintext with password answered on :{port}"
    );
    let anonymous = RedisOptions::default().with_tls(certs.clone());
    let error =
        ping_error(anonymous.client(port)).unwrap_or_else(|| panic!("TLS without password answered on :{port}"));
    assert!(error.contains("NOAUTH"), "TLS without password on :{port}: {error}");
    let wrong = RedisOptions::default().with_tls(certs.clone()).with_user(USER, "wrong");
    let error =
        ping_error(wrong.client(port)).unwrap_or_else(|| panic!("TLS with a wrong password answered on :{port}"));
    assert!(
        // redis-rs reports WRONGPASS as its own "Password authentication failed".
        error.contains("WRONGPASS") || error.to_lowercase().contains("authentication failed"),
        "TLS with a wrong password on :{port}: {error}"
    );

    let url = options.url(port);
    assert!(url.starts_with(&format!("rediss://{USER}:")), "{url}");
    assert!(url.ends_with(&format!("@127.0.0.1:{port}")), "{url}");
    assert_eq!(
        ping_error(redis::Client::build_with_tls(url.as_str(), certs.tls_certificates()).unwrap()),
        None
    );
    let no_client_cert = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(std::fs::read(certs.ca_file()).unwrap()),
    };
    assert_eq!(
        ping_error(redis::Client::build_with_tls(url.as_str(), no_client_cert).unwrap()),
        None
    );
}

/// SET then GET of `key` on `conn`.
fn set_get(conn: &mut impl redis::ConnectionLike, key: &str, value: &str) {
    let _: () = redis::cmd("SET").arg(key).arg(value).query(conn).unwrap();
    let got: String = redis::cmd("GET").arg(key).query(conn).unwrap();
    assert_eq!(got, value);
}

#[test]
fn server_with_tls_and_acl_user() {
    let options = secured();
    let mut redis = RedisServer::start_with(&options);
    check_secured(&options, redis.port());
    let certs = options.tls_certificates().unwrap();
    let mut conn = redis::Client::build_with_tls(redis.url(), certs)
        .unwrap()
        .get_connection()
        .unwrap();
    set_get(&mut conn, "dq:tls", "v1");
    let whoami: String = redis::cmd("ACL").arg("WHOAMI").query(&mut redis.conn()).unwrap();
    assert_eq!(whoami, USER);
    redis.restart();
    set_get(&mut redis.conn(), "dq:tls", "v2");
}

#[test]
fn cluster_with_tls_and_acl_user() {
    let began = Instant::now();
    let options = secured();
    let mut cluster = RedisCluster::start_with(&options);
    eprintln!("secured cluster formed in {:?}", began.elapsed());
    assert_eq!(cluster.seed_urls().len(), 6);
    for (url, port) in cluster.urls().iter().zip(cluster.ports()) {
        assert_eq!(*url, options.url(port));
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut cluster.conn(port))
            .unwrap();
        assert!(info.contains("cluster_state:ok"), ":{port}: {info}");
    }
    let primaries = cluster.primaries();
    let replicas = cluster.replicas();
    assert_eq!((primaries.len(), replicas.len()), (3, 3));
    check_secured(&options, primaries[0]);
    check_secured(&options, replicas[0]);

    let client = redis::cluster::ClusterClient::builder(cluster.seed_urls())
        .certs(options.tls_certificates().unwrap())
        .build()
        .unwrap();
    let mut conn = client.get_connection().unwrap();
    // Keys in all three primaries' slot ranges.
    for key in ["dq:{a}", "dq:{b}", "dq:{c}", "dq:{d}", "dq:{e}"] {
        set_get(&mut conn, key, "v1");
    }
    let any = primaries[0].to_string();
    assert_eq!(cluster.redis_cli(&["-c", "-p", &any, "GET", "dq:{a}"]), "v1");

    // A failover needs replication and the cluster bus, both over TLS and authenticated.
    let (slot, owner) = owner_of(&cluster, "dq:{a}");
    wait_until("the key to reach a replica", DEADLINE, || {
        on_a_replica(&cluster, &replicas, "dq:{a}", "v1")
    });
    cluster.kill(owner);
    cluster.wait_healthy(DEADLINE);
    assert_ne!(cluster.primary_for_slot(slot), owner);
    let client = redis::cluster::ClusterClient::builder(cluster.seed_urls())
        .certs(options.tls_certificates().unwrap())
        .build()
        .unwrap();
    let got: String = redis::cmd("GET")
        .arg("dq:{a}")
        .query(&mut client.get_connection().unwrap())
        .unwrap();
    assert_eq!(got, "v1");

    // The old primary rejoins, and a new one joins and takes slots: redis-cli --cluster over TLS with the user.
    cluster.restart(owner);
    cluster.wait_healthy(DEADLINE);
    let new = cluster.add_primary();
    move_slots(&cluster, new, 10);
    cluster.wait_healthy(DEADLINE);
    assert_eq!(cluster.primary_for_slot(0), new);
    check_secured(&options, new);
    eprintln!("secured cluster test took {:?}", began.elapsed());
}

#[test]
fn sentinel_set_with_tls_and_acl_user() {
    let began = Instant::now();
    let options = secured();
    let mut set = RedisSentinelSet::start_with(&options);
    eprintln!("secured sentinel set started in {:?}", began.elapsed());
    let old = set.primary_port();
    for port in set.sentinel_ports().into_iter().chain([old]) {
        check_secured(&options, port);
    }
    let certs = options.tls_certificates().unwrap();
    for url in set.sentinel_urls() {
        let mut conn = redis::Client::build_with_tls(url.as_str(), certs.clone())
            .unwrap()
            .get_connection()
            .unwrap();
        let addr: (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(set.master_name())
            .query(&mut conn)
            .unwrap();
        assert_eq!(addr, ("127.0.0.1".to_string(), old), "{url}");
    }
    let mut conn = redis::Client::build_with_tls(options.url(old), certs.clone())
        .unwrap()
        .get_connection()
        .unwrap();
    set_get(&mut conn, "k", "v1");
    // Replication is asynchronous: have the write on the replica before the kill.
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut conn).unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge the write");
    let replicas = set.replica_ports();

    let killed = Instant::now();
    set.kill(old);
    let new = set.wait_failover(old, DEADLINE);
    eprintln!("secured sentinel set failed over in {:?}", killed.elapsed());
    assert_eq!(vec![new], replicas);
    let mut conn = redis::Client::build_with_tls(options.url(new), certs)
        .unwrap()
        .get_connection()
        .unwrap();
    let v: String = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
    assert_eq!(v, "v1", "the write before the failover reached the replica");
    set_get(&mut conn, "k", "v2");
    eprintln!("secured sentinel test took {:?}", began.elapsed());
}

/// `key`'s slot and the primary that serves it.
fn owner_of(cluster: &RedisCluster, key: &str) -> (u16, u16) {
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut cluster.conn(cluster.primaries()[0]))
        .unwrap();
    (slot, cluster.primary_for_slot(slot))
}

/// Whether some replica has `key` = `value` (replication is asynchronous: wait for it before a kill).
fn on_a_replica(cluster: &RedisCluster, replicas: &[u16], key: &str, value: &str) -> bool {
    replicas.iter().any(|&port| {
        let mut conn = cluster.conn(port);
        let _: () = redis::cmd("READONLY").query(&mut conn).unwrap();
        redis::cmd("GET")
            .arg(key)
            .query::<Option<String>>(&mut conn)
            .ok()
            .flatten()
            == Some(value.into())
    })
}

/// Moves `count` slots from the primary of slot 0 to `to` with `redis-cli --cluster reshard`.
fn move_slots(cluster: &RedisCluster, to: u16, count: u32) {
    let from = cluster.primary_for_slot(0);
    let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(to));
    cluster.redis_cli(&[
        "--cluster",
        "reshard",
        &format!("127.0.0.1:{from}"),
        "--cluster-from",
        &from_id,
        "--cluster-to",
        &to_id,
        "--cluster-slots",
        &count.to_string(),
        "--cluster-yes",
    ]);
}
