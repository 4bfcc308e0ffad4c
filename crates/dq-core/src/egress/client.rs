//! Where deliveries and dead-job hooks may go: HTTP clients whose resolver applies the egress policy to
//! every address a callback's name resolves to, at connect time, so a name that later resolves elsewhere (DNS rebinding)
//! is checked again on every new connection. An IP-literal host never reaches a resolver (the connector
//! dials it directly), so it is checked before sending; being literal, it cannot rebind.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use tokio_util::sync::CancellationToken;

use super::{Policy, Refused};
use crate::Queue;
use crate::config::EgressSettings;

/// How often the Redis nodes are read again (Sentinel failovers, cluster nodes added or moved).
const NODE_REFRESH: Duration = Duration::from_secs(30);

/// The egress side of delivery (dq-consumer) and of dead-job hooks (dq-checker): the policy in force, the HTTP clients that apply it, and the bounds on
/// reading answers.
pub struct Egress {
    /// The policy in force; replaced when the Redis nodes are read again. Resolvers hold it too.
    policy: Arc<RwLock<Arc<Policy>>>,
    /// One client per callback port: a resolver sees the name but not the port, and the Redis-node rule
    /// needs both. Each keeps its own connection pool.
    clients: Mutex<HashMap<u16, reqwest::Client>>,
    /// `egress.max_answer_bytes`: an answer beyond it fails the delivery unread.
    pub max_answer_bytes: usize,
    /// `egress.excerpt_bytes`: how much of a failed delivery's answer goes into `last_error`.
    pub excerpt_bytes: usize,
}

/// Why a callback cannot be called.
#[derive(Debug, thiserror::Error)]
pub enum CannotCall {
    /// Its host is an IP address the policy refuses.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// Its name resolves only to addresses the policy refuses.
    #[error(transparent)]
    NameRefused(#[from] NameRefused),
    /// No HTTP client could be made (TLS set-up).
    #[error("cannot build an HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// A callback host name whose every address the policy refuses.
#[derive(Debug, thiserror::Error)]
#[error("`{name}` resolves only to refused addresses: {}", list(.refused))]
pub struct NameRefused {
    /// The name.
    pub name: String,
    /// Each address it resolved to, with the rule that refuses it.
    pub refused: Vec<Refused>,
}

impl NameRefused {
    /// The refusal somewhere in `err`'s chain of causes (the resolver's error, wrapped by the connector
    /// and by reqwest), if it is there.
    pub fn in_chain<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a NameRefused> {
        let mut cause = Some(err);
        while let Some(e) = cause {
            if let Some(r) = e.downcast_ref::<NameRefused>() {
                return Some(r);
            }
            cause = e.source();
        }
        None
    }
}

fn list(refused: &[Refused]) -> String {
    refused
        .iter()
        .map(|r| format!("{} ({})", r.addr, r.rule))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Egress {
    /// Applies `policy`, with the answer bounds of `settings`.
    pub fn new(settings: &EgressSettings, policy: Policy) -> Egress {
        Egress {
            policy: Arc::new(RwLock::new(Arc::new(policy))),
            clients: Mutex::new(HashMap::new()),
            max_answer_bytes: settings.max_answer_bytes,
            excerpt_bytes: settings.excerpt_bytes,
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.read().expect("policy lock").clone()
    }

    /// Puts `policy` in force for every connection made from now on.
    pub fn set_policy(&self, policy: Policy) {
        *self.policy.write().expect("policy lock") = Arc::new(policy);
    }

    /// Puts `egress.allow` and `egress.deny` of `settings` in force (SIGHUP), keeping the Redis nodes. The
    /// clients go, and their pooled connections with them: a connection kept alive to a network now
    /// refused would otherwise go on being used.
    pub fn set_lists(&self, settings: &EgressSettings) {
        let mut policy = self.policy.write().expect("policy lock");
        *policy = Arc::new(Policy::new(settings, policy.redis_nodes().to_vec()));
        self.clients.lock().expect("clients lock").clear();
    }

    /// The client to POST to `url` with; refused when its host is an IP address the policy refuses.
    pub fn client(&self, url: &Url) -> Result<reqwest::Client, CannotCall> {
        self.policy().check_url(url)?;
        let port = url.port_or_known_default().unwrap_or(0);
        let mut clients = self.clients.lock().expect("clients lock");
        if let Some(c) = clients.get(&port) {
            return Ok(c.clone());
        }
        let resolver = PolicyResolver {
            policy: self.policy.clone(),
            port,
        };
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(4096)
            .tcp_nodelay(true)
            .no_proxy()
            // A redirect would turn the POST into a GET elsewhere, unchecked; a 3xx is a failed delivery.
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(resolver)
            .build()
            .map_err(CannotCall::Client)?;
        clients.insert(port, client.clone());
        Ok(client)
    }

    /// Reads the Redis nodes again every [`NODE_REFRESH`] until `stop`, keeping the policy's Redis-node
    /// rule up to date with failovers and cluster changes.
    pub async fn follow_nodes(self: Arc<Self>, queue: Queue, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(NODE_REFRESH) => {}
                _ = stop.cancelled() => return,
            }
            let nodes = queue.egress().await.redis_nodes;
            // The lists in force stay: a reload may have changed them since the queue was made.
            let mut policy = self.policy.write().expect("policy lock");
            if nodes != policy.redis_nodes {
                tracing::info!(?nodes, "Redis nodes refused to callbacks changed");
            }
            *policy = Arc::new(Policy {
                redis_nodes: nodes,
                ..Policy::clone(&policy)
            });
        }
    }
}

/// Resolves callback names for one port and keeps only the addresses the policy allows.
struct PolicyResolver {
    /// The policy in force, read at every resolution.
    policy: Arc<RwLock<Arc<Policy>>>,
    /// The port of every callback this resolver's client calls.
    port: u16,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let (policy, port) = (self.policy.clone(), self.port);
        let name = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), port)).await?.collect();
            let policy = policy.read().expect("policy lock").clone();
            let (mut allowed, mut refused) = (Vec::new(), Vec::new());
            for addr in addrs {
                match policy.check(addr) {
                    Ok(()) => allowed.push(addr),
                    Err(r) => refused.push(r),
                }
            }
            if allowed.is_empty() && !refused.is_empty() {
                return Err(Box::new(NameRefused { name, refused }) as _);
            }
            if !refused.is_empty() {
                tracing::debug!(%name, refused = %list(&refused), "some addresses of a callback are refused");
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress(deny: &[&str], nodes: &[&str]) -> Egress {
        let settings = EgressSettings {
            deny: deny.iter().map(|s| s.to_string()).collect(),
            ..EgressSettings::default()
        };
        let policy = Policy::new(&settings, nodes.iter().map(|n| n.parse().unwrap()).collect());
        Egress::new(&settings, policy)
    }

    async fn resolve(e: &Egress, url: &str) -> Result<Vec<SocketAddr>, String> {
        let url = Url::parse(url).unwrap();
        let port = url.port_or_known_default().unwrap();
        let resolver = PolicyResolver {
            policy: e.policy.clone(),
            port,
        };
        let name: Name = url.host_str().unwrap().parse().unwrap();
        resolver
            .resolve(name)
            .await
            .map(|a| a.collect())
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn names_resolving_only_to_refused_addresses_are_refused_naming_the_rule() {
        let e = egress(&["127.0.0.0/8", "::1"], &[]);
        let err = resolve(&e, "http://localhost:8080/").await.unwrap_err();
        assert!(
            err.contains("`localhost`") && err.contains("egress.deny 127.0.0.0/8"),
            "{err}"
        );
        let e = egress(&[], &["127.0.0.1:6379"]);
        let err = resolve(&e, "http://localhost:6379/").await.unwrap_err();
        assert!(err.contains("redis node 127.0.0.1:6379"), "{err}");
        let addrs = resolve(&e, "http://localhost:6380/").await.unwrap();
        assert!(addrs.contains(&"127.0.0.1:6380".parse().unwrap()), "{addrs:?}");
    }

    #[tokio::test]
    async fn literal_hosts_are_refused_before_any_client_and_clients_are_per_port() {
        let e = egress(&[], &["127.0.0.1:6379"]);
        for url in ["http://2130706433:6379/", "http://[::ffff:169.254.169.254]/"] {
            let err = e.client(&Url::parse(url).unwrap()).unwrap_err();
            assert!(matches!(err, CannotCall::Refused(_)), "{url}: {err}");
        }
        e.client(&Url::parse("http://127.0.0.1:8080/").unwrap()).unwrap();
        e.client(&Url::parse("http://localhost:8080/").unwrap()).unwrap();
        e.client(&Url::parse("https://localhost/").unwrap()).unwrap();
        assert_eq!(e.clients.lock().unwrap().len(), 2, "one client per port");
    }

    #[tokio::test]
    async fn new_lists_keep_the_redis_nodes_and_drop_the_pooled_clients() {
        let e = egress(&[], &["127.0.0.1:6379"]);
        e.client(&Url::parse("http://127.0.0.1:8080/").unwrap()).unwrap();
        let deny = EgressSettings {
            deny: vec!["127.0.0.0/8".into()],
            ..EgressSettings::default()
        };
        e.set_lists(&deny);
        assert!(
            e.clients.lock().unwrap().is_empty(),
            "no connection kept alive survives"
        );
        assert_eq!(e.policy().redis_nodes(), ["127.0.0.1:6379".parse().unwrap()]);
        let err = e.client(&Url::parse("http://127.0.0.1:8080/").unwrap()).unwrap_err();
        assert!(err.to_string().contains("egress.deny 127.0.0.0/8"), "{err}");
        e.set_lists(&EgressSettings::default());
        e.client(&Url::parse("http://127.0.0.1:8080/").unwrap()).unwrap();
    }

    #[tokio::test]
    async fn a_new_policy_applies_to_the_next_resolution() {
        let e = egress(&[], &[]);
        resolve(&e, "http://localhost:7000/").await.unwrap();
        e.set_policy(Policy::new(
            &EgressSettings::default(),
            vec!["127.0.0.1:7000".parse().unwrap()],
        ));
        let err = resolve(&e, "http://localhost:7000/").await.unwrap_err();
        assert!(err.contains("redis node 127.0.0.1:7000"), "{err}");
    }
}
