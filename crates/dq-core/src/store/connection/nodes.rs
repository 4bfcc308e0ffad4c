//! Every Redis node's address, for the egress policy: a callback must not reach dq's own Redis.

use std::time::Duration;

use redis::{ConnectionAddr, IntoConnectionInfo};

use super::{Conn, Handle, Redis, Target};

impl Redis {
    /// Host and port of every Redis node dq talks to: the configured URLs (the Redis, the sentinels or
    /// the cluster's seed nodes), the primary Sentinel names now with its replicas (as its `ROLE` lists
    /// them: one of them is the primary after a failover), and every node of a cluster as CLUSTER NODES
    /// lists it (replicas included). What cannot be read within `redis.response_timeout_ms` is left out.
    pub async fn node_addresses(&self) -> Vec<(String, u16)> {
        let settings = &self.inner.settings;
        let mut out: Vec<(String, u16)> = settings
            .urls
            .iter()
            .filter_map(|u| tcp_address(u.as_str().into_connection_info().ok()?.addr()))
            .collect();
        let topology = async {
            match &self.inner.conn {
                Conn::Primary { target, .. } if matches!(**target, Target::Sentinel(_)) => {
                    let mut nodes: Vec<(String, u16)> = target
                        .client()
                        .await
                        .ok()
                        .and_then(|c| tcp_address(c.get_connection_info().addr()))
                        .into_iter()
                        .collect();
                    let role = self.query::<redis::Value>(&redis::cmd("ROLE")).await;
                    nodes.extend(role.ok().map(|r| replica_addresses(&r)).unwrap_or_default());
                    nodes
                }
                Conn::Primary { .. } => Vec::new(),
                Conn::Cluster(_) => self.cluster_addresses().await.unwrap_or_default(),
            }
        };
        let wait = Duration::from_millis(settings.response_timeout_ms);
        out.extend(tokio::time::timeout(wait, topology).await.unwrap_or_default());
        out.sort();
        out.dedup();
        out
    }

    /// Every node of the cluster with an address, from CLUSTER NODES.
    async fn cluster_addresses(&self) -> redis::RedisResult<Vec<(String, u16)>> {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        let Ok(Handle::Cluster(mut c, g)) = self.handle().await else {
            return Ok(Vec::new());
        };
        let v = c
            .route_command(
                redis::cmd("CLUSTER").arg("NODES").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await;
        let text: String = redis::from_redis_value(self.saw(g, v)?)?;
        Ok(cluster_addresses(&text))
    }
}

/// Host and port of a TCP address (a Unix socket has none a callback could reach).
fn tcp_address(addr: &ConnectionAddr) -> Option<(String, u16)> {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
        _ => None,
    }
}

/// The replicas a primary's `ROLE` answer lists (`["master", offset, [[ip, port, offset], …]]`); none
/// for any other answer (a replica's, a sentinel's).
fn replica_addresses(role: &redis::Value) -> Vec<(String, u16)> {
    let Ok((kind, _, replicas)) = redis::from_redis_value::<(String, i64, Vec<(String, String, String)>)>(role.clone())
    else {
        return Vec::new();
    };
    if kind != "master" {
        return Vec::new();
    }
    replicas
        .into_iter()
        .filter_map(|(ip, port, _)| Some((ip, port.parse().ok().filter(|p| *p != 0)?)))
        .collect()
}

/// Every node's address in a CLUSTER NODES answer (`127.0.0.1:7000@17000[,hostname]`), primaries and
/// replicas alike, failing ones included; nodes without an address are skipped.
fn cluster_addresses(text: &str) -> Vec<(String, u16)> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let addr = fields.nth(1)?.split(['@', ',']).next()?;
            if fields.next()?.contains("noaddr") {
                return None;
            }
            let (host, port) = addr.rsplit_once(':')?;
            let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
            (!host.is_empty()).then(|| (host.to_string(), port))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_answer_gives_every_address() {
        let text = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
d4 10.0.0.4:7004@17004 slave a1 0 1 1 connected
c3 127.0.0.1:7003@17003 master,fail - 0 1 3 connected
e5 10.0.0.5:7005@17005,host5 master - 0 1 5 connected 10923-16383
f6 :0@0 master,noaddr - 0 1 6 disconnected
";
        assert_eq!(
            cluster_addresses(text),
            [
                ("127.0.0.1".to_string(), 7001),
                ("10.0.0.4".to_string(), 7004),
                ("127.0.0.1".to_string(), 7003),
                ("10.0.0.5".to_string(), 7005),
            ]
        );
    }

    #[test]
    fn a_primarys_role_gives_its_replicas() {
        use redis::Value::{Array, BulkString, Int};
        let s = |t: &str| BulkString(t.as_bytes().to_vec());
        let role = Array(vec![
            s("master"),
            Int(3129659),
            Array(vec![
                Array(vec![s("10.0.0.8"), s("6380"), s("3129242")]),
                Array(vec![s("10.0.0.9"), s("6381"), s("3129543")]),
            ]),
        ]);
        assert_eq!(
            replica_addresses(&role),
            [("10.0.0.8".to_string(), 6380), ("10.0.0.9".to_string(), 6381)]
        );
        let replica = Array(vec![s("slave"), s("10.0.0.7"), Int(6379), s("connected"), Int(1)]);
        assert!(replica_addresses(&replica).is_empty());
        let lonely = Array(vec![s("master"), Int(0), Array(vec![])]);
        assert!(replica_addresses(&lonely).is_empty());
    }

    #[test]
    fn configured_urls_give_host_and_port() {
        let addr = |u: &str| tcp_address(u.into_connection_info().unwrap().addr());
        assert_eq!(addr("redis://10.0.0.7"), Some(("10.0.0.7".into(), 6379)));
        assert_eq!(
            addr("rediss://u:p@redis.internal:6380/0"),
            Some(("redis.internal".into(), 6380))
        );
        assert_eq!(addr("redis+unix:///tmp/redis.sock"), None);
    }

    #[tokio::test]
    async fn a_standalone_redis_is_its_url() {
        let mut settings = crate::config::RedisSettings::default();
        settings.urls = vec!["redis://:secret@127.0.0.1:6399".into()];
        let redis = Redis::new(&settings).unwrap();
        assert_eq!(redis.node_addresses().await, [("127.0.0.1".to_string(), 6399)]);
    }
}
