//! The callback egress policy: which addresses a callback (and a topic's `callback.on_dead_url`) may
//! reach, and [`client`]: the HTTP clients that apply it.
//!
//! Checked on the address itself, after every spelling of it is normalised: dq-server checks a callback
//! URL whose host is an IP literal at registration, and dq-consumer (deliveries) and dq-checker (dead-job
//! hooks) check every address a name resolves to at connect time (so a name that later resolves
//! elsewhere, DNS rebinding, is checked again).
//!
//! Refused, in this order: link-local addresses (169.254.0.0/16, fe80::/10: cloud metadata services),
//! unspecified ones (0.0.0.0/8, `::`, which reach the host itself), multicast, the IPv4 broadcast address,
//! the Redis nodes dq uses (address and port), `egress.deny`, and, when `egress.allow` is not empty,
//! whatever lies outside it. Loopback and private ranges are allowed by default: calling internal
//! services is what callbacks are for.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use url::{Host, Url};

use crate::config::EgressSettings;

pub mod client;
pub use client::{CannotCall, Egress, NameRefused};

/// The policy in force: the configured lists and the Redis nodes known when it was made.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// `egress.allow`: when not empty, the only networks a callback may reach.
    allow: Vec<IpNet>,
    /// `egress.deny`: networks no callback may reach.
    deny: Vec<IpNet>,
    /// Addresses of the Redis nodes dq uses, normalised: a callback to one of them could talk to Redis.
    redis_nodes: Vec<SocketAddr>,
}

/// Why an address is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rule {
    /// 169.254.0.0/16 or fe80::/10, where cloud metadata services answer.
    LinkLocal,
    /// 0.0.0.0/8 or `::`: a connection to it reaches the host itself.
    Unspecified,
    /// 224.0.0.0/4 or ff00::/8.
    Multicast,
    /// 255.255.255.255.
    Broadcast,
    /// A Redis node dq uses.
    RedisNode(SocketAddr),
    /// In this `egress.deny` network.
    Denied(IpNet),
    /// Not in any `egress.allow` network.
    OutsideAllow,
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rule::LinkLocal => f.write_str("link-local"),
            Rule::Unspecified => f.write_str("unspecified"),
            Rule::Multicast => f.write_str("multicast"),
            Rule::Broadcast => f.write_str("broadcast"),
            Rule::RedisNode(node) => write!(f, "redis node {node}"),
            Rule::Denied(net) => write!(f, "egress.deny {net}"),
            Rule::OutsideAllow => f.write_str("outside egress.allow"),
        }
    }
}

/// An address the policy refuses, and the rule that refuses it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{addr} is refused by the egress policy ({rule})")]
pub struct Refused {
    /// The address as normalised, with the port.
    pub addr: SocketAddr,
    /// The rule.
    pub rule: Rule,
}

impl Policy {
    /// The policy of `settings`, with the Redis nodes at `redis_nodes`.
    pub fn new(settings: &EgressSettings, redis_nodes: Vec<SocketAddr>) -> Policy {
        let mut redis_nodes: Vec<SocketAddr> = redis_nodes
            .into_iter()
            .map(|a| SocketAddr::new(normalise(a.ip()), a.port()))
            .collect();
        redis_nodes.sort();
        redis_nodes.dedup();
        Policy {
            allow: settings.allow_nets(),
            deny: settings.deny_nets(),
            redis_nodes,
        }
    }

    /// The Redis nodes the policy refuses.
    pub fn redis_nodes(&self) -> &[SocketAddr] {
        &self.redis_nodes
    }

    /// Whether a callback may connect to `addr`; refused, the rule says why.
    pub fn check(&self, addr: SocketAddr) -> Result<(), Refused> {
        let ip = normalise(addr.ip());
        let rule = built_in(ip)
            .or_else(|| self.redis_node(ip, addr.port()).map(Rule::RedisNode))
            .or_else(|| self.deny.iter().find(|n| n.contains(&ip)).map(|n| Rule::Denied(*n)))
            .or_else(|| {
                (!self.allow.is_empty() && !self.allow.iter().any(|n| n.contains(&ip))).then_some(Rule::OutsideAllow)
            });
        match rule {
            None => Ok(()),
            Some(rule) => Err(Refused {
                addr: SocketAddr::new(ip, addr.port()),
                rule,
            }),
        }
    }

    /// [`Policy::check`] for a URL whose host is an IP address (as the URL parser reads it: `2130706433`,
    /// `0177.0.0.1` and `0x7f.1` are all 127.0.0.1). A host name passes: what it resolves to is checked
    /// at connect time.
    pub fn check_url(&self, url: &Url) -> Result<(), Refused> {
        let ip: IpAddr = match url.host() {
            Some(Host::Ipv4(ip)) => ip.into(),
            Some(Host::Ipv6(ip)) => ip.into(),
            Some(Host::Domain(_)) | None => return Ok(()),
        };
        self.check(SocketAddr::new(ip, url.port_or_known_default().unwrap_or(0)))
    }

    /// The Redis node at `ip` and `port`. A loopback node stands for every loopback address: a Redis
    /// that listens on all interfaces answers on 127.0.0.2 and `::1` as well.
    fn redis_node(&self, ip: IpAddr, port: u16) -> Option<SocketAddr> {
        self.redis_nodes
            .iter()
            .find(|n| n.port() == port && (n.ip() == ip || n.ip().is_loopback() && ip.is_loopback()))
            .copied()
    }
}

/// The refusals that hold whatever the settings say.
fn built_in(ip: IpAddr) -> Option<Rule> {
    match ip {
        IpAddr::V4(v4) if v4.octets()[0] == 0 => Some(Rule::Unspecified),
        IpAddr::V4(v4) if v4.is_link_local() => Some(Rule::LinkLocal),
        IpAddr::V4(v4) if v4.is_multicast() => Some(Rule::Multicast),
        IpAddr::V4(v4) if v4.is_broadcast() => Some(Rule::Broadcast),
        IpAddr::V6(v6) if v6.is_unspecified() => Some(Rule::Unspecified),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Some(Rule::LinkLocal),
        IpAddr::V6(v6) if v6.is_multicast() => Some(Rule::Multicast),
        _ => None,
    }
}

/// The address `ip` reaches, as IPv4 when it is one: IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible
/// (`::a.b.c.d`, deprecated) and NAT64 (`64:ff9b::a.b.c.d`, which a NAT64 gateway forwards to
/// a.b.c.d) IPv6 addresses become the IPv4 address they carry. `::` and `::1` stay IPv6's own.
pub fn normalise(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return v4.into();
    }
    let s = v6.segments();
    let compatible = s[..6] == [0; 6] && !v6.is_unspecified() && !v6.is_loopback();
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    if compatible || nat64 {
        return Ipv4Addr::from_bits(v6.to_bits() as u32).into();
    }
    ip
}

/// A CIDR (`10.0.0.0/8`, `fd00::/8`) or a single address, as `egress.deny` and `egress.allow` hold them.
/// An IPv4-mapped IPv6 network becomes the IPv4 network, since addresses are normalised before the check.
pub fn parse_net(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    let net = match text.parse::<IpNet>() {
        Ok(net) => net,
        Err(_) => match text.parse::<IpAddr>() {
            Ok(ip) => IpNet::from(ip),
            Err(_) => return Err(format!("`{text}` is not a CIDR (e.g. 10.0.0.0/8) or an IP address")),
        },
    };
    Ok(match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 && v6.network().to_ipv4_mapped().is_some() => {
            let v4 = v6.network().to_ipv4_mapped().expect("checked");
            IpNet::V4(Ipv4Net::new(v4, v6.prefix_len() - 96).expect("at most 32"))
        }
        IpNet::V6(v6) => IpNet::V6(Ipv6Net::new(v6.network(), v6.prefix_len()).expect("same length")),
        IpNet::V4(v4) => IpNet::V4(v4.trunc()),
    })
}

/// How long resolving one Redis node's name may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// The addresses of `nodes` (host and port), names resolved; a name that does not resolve in time is
/// left out (and logged).
pub async fn resolve(nodes: &[(String, u16)]) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for (host, port) in nodes {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            out.push(SocketAddr::new(ip, *port));
            continue;
        }
        match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, *port))).await {
            Ok(Ok(addrs)) => out.extend(addrs),
            Ok(Err(e)) => tracing::warn!(%host, cause = %e, "cannot resolve a Redis node for the egress policy"),
            Err(_) => tracing::warn!(%host, "cannot resolve a Redis node for the egress policy in time"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(deny: &[&str], allow: &[&str], nodes: &[&str]) -> Policy {
        let settings = EgressSettings {
            deny: deny.iter().map(|s| s.to_string()).collect(),
            allow: allow.iter().map(|s| s.to_string()).collect(),
            ..EgressSettings::default()
        };
        Policy::new(&settings, nodes.iter().map(|n| n.parse().unwrap()).collect())
    }

    fn rule(p: &Policy, addr: &str) -> Option<String> {
        p.check(addr.parse().unwrap()).err().map(|r| r.rule.to_string())
    }

    fn url_rule(p: &Policy, url: &str) -> Option<String> {
        p.check_url(&Url::parse(url).unwrap()).err().map(|r| r.rule.to_string())
    }

    #[test]
    fn built_in_refusals() {
        let p = Policy::default();
        for (addr, named) in [
            ("169.254.169.254:80", "link-local"),
            ("169.254.0.1:443", "link-local"),
            ("[fe80::1]:80", "link-local"),
            ("[febf::1]:80", "link-local"),
            ("0.0.0.0:80", "unspecified"),
            ("0.1.2.3:80", "unspecified"),
            ("[::]:80", "unspecified"),
            ("224.0.0.1:80", "multicast"),
            ("239.255.255.250:1900", "multicast"),
            ("[ff02::1]:80", "multicast"),
            ("255.255.255.255:80", "broadcast"),
        ] {
            assert_eq!(rule(&p, addr).as_deref(), Some(named), "{addr}");
        }
    }

    #[test]
    fn loopback_private_and_public_are_allowed_by_default() {
        let p = Policy::default();
        for addr in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "10.0.0.5:8080",
            "172.16.0.1:80",
            "192.168.1.1:80",
            "[fd00::1]:80",
            "93.184.216.34:443",
            "[2606:2800:220:1::1]:443",
            "[fec0::1]:80",
        ] {
            assert_eq!(rule(&p, addr), None, "{addr}");
        }
    }

    #[test]
    fn ipv6_spellings_of_ipv4_are_normalised_first() {
        let p = policy(&["10.0.0.0/8"], &[], &["127.0.0.1:6379"]);
        for (addr, named) in [
            ("[::ffff:169.254.169.254]:80", "link-local"),
            ("[::ffff:a9fe:a9fe]:80", "link-local"),
            ("[::169.254.169.254]:80", "link-local"),
            ("[64:ff9b::169.254.169.254]:80", "link-local"),
            ("[::ffff:0.0.0.0]:80", "unspecified"),
            ("[::ffff:10.1.2.3]:80", "egress.deny 10.0.0.0/8"),
            ("[::ffff:127.0.0.1]:6379", "redis node 127.0.0.1:6379"),
        ] {
            assert_eq!(rule(&p, addr).as_deref(), Some(named), "{addr}");
        }
        let refused = p.check("[::ffff:169.254.169.254]:80".parse().unwrap()).unwrap_err();
        assert_eq!(
            refused.addr,
            "169.254.169.254:80".parse().unwrap(),
            "reported as normalised"
        );
        assert_eq!(normalise("::1".parse().unwrap()), "::1".parse::<IpAddr>().unwrap());
        assert_eq!(normalise("::".parse().unwrap()), "::".parse::<IpAddr>().unwrap());
        assert_eq!(
            normalise(Ipv4Addr::LOCALHOST.to_ipv6_mapped().into()),
            IpAddr::from(Ipv4Addr::LOCALHOST)
        );
    }

    #[test]
    fn the_url_parser_reads_every_ipv4_spelling() {
        // The WHATWG host parser (the `url` crate, which reqwest uses too) reads decimal, octal and hex
        // IPv4 hosts as the address they spell, so the policy sees the address a connection would reach.
        for (url, ip) in [
            ("http://2130706433/", "127.0.0.1"),
            ("http://0177.0.0.1/", "127.0.0.1"),
            ("http://0x7f.0.0.1/", "127.0.0.1"),
            ("http://0x7f.1/", "127.0.0.1"),
            ("http://127.1/", "127.0.0.1"),
            ("http://2852039166/", "169.254.169.254"),
            ("http://0251.0376.0251.0376/", "169.254.169.254"),
            ("http://0xa9fea9fe/", "169.254.169.254"),
        ] {
            let u = Url::parse(url).unwrap();
            assert_eq!(u.host(), Some(Host::Ipv4(ip.parse().unwrap())), "{url}");
        }
    }

    #[test]
    fn urls_with_literal_hosts_are_checked_and_names_pass() {
        let p = policy(&["192.168.0.0/16"], &[], &["127.0.0.1:6379"]);
        for (url, named) in [
            ("http://169.254.169.254/latest/meta-data/", Some("link-local")),
            ("http://[::ffff:169.254.169.254]/", Some("link-local")),
            ("http://2852039166/", Some("link-local")),
            ("http://[fe80::1]/", Some("link-local")),
            ("http://0/", Some("unspecified")),
            ("http://2130706433:6379/", Some("redis node 127.0.0.1:6379")),
            ("http://[::ffff:127.0.0.1]:6379/", Some("redis node 127.0.0.1:6379")),
            ("http://[::1]:6379/", Some("redis node 127.0.0.1:6379")),
            ("http://127.0.0.2:6379/", Some("redis node 127.0.0.1:6379")),
            ("https://192.168.1.1/", Some("egress.deny 192.168.0.0/16")),
            ("http://127.0.0.1:6380/", None),
            ("http://127.0.0.1/", None),
            ("http://metadata.google.internal/", None),
            ("http://localhost:6379/", None),
        ] {
            assert_eq!(url_rule(&p, url).as_deref(), named, "{url}");
        }
        let refused = p
            .check_url(&Url::parse("https://[::ffff:c0a8:101]/").unwrap())
            .unwrap_err();
        assert_eq!(refused.addr, "192.168.1.1:443".parse().unwrap(), "the scheme's port");
    }

    #[test]
    fn redis_nodes_are_refused_by_address_and_port() {
        let p = policy(
            &[],
            &[],
            &["10.0.0.7:6379", "[::ffff:10.0.0.8]:7000", "127.0.0.1:26379"],
        );
        assert_eq!(rule(&p, "10.0.0.7:6379").as_deref(), Some("redis node 10.0.0.7:6379"));
        assert_eq!(
            rule(&p, "10.0.0.8:7000").as_deref(),
            Some("redis node 10.0.0.8:7000"),
            "nodes are normalised too"
        );
        assert_eq!(rule(&p, "10.0.0.7:6380"), None, "another port");
        assert_eq!(rule(&p, "10.0.0.9:6379"), None, "another host");
        assert_eq!(
            rule(&p, "[::1]:26379").as_deref(),
            Some("redis node 127.0.0.1:26379"),
            "a loopback node stands for every loopback address"
        );
        assert_eq!(
            rule(&p, "10.0.0.7:26379"),
            None,
            "but a non-loopback one only for itself"
        );
    }

    #[test]
    fn deny_and_allow() {
        let p = policy(&["10.0.0.0/8", "fd00::/8", "192.168.1.10"], &[], &[]);
        assert_eq!(rule(&p, "10.9.9.9:80").as_deref(), Some("egress.deny 10.0.0.0/8"));
        assert_eq!(rule(&p, "[fd12::1]:80").as_deref(), Some("egress.deny fd00::/8"));
        assert_eq!(
            rule(&p, "192.168.1.10:80").as_deref(),
            Some("egress.deny 192.168.1.10/32")
        );
        assert_eq!(rule(&p, "192.168.1.11:80"), None);

        let p = policy(&["10.0.0.66"], &["10.0.0.0/24", "2001:db8::/32"], &[]);
        assert_eq!(rule(&p, "10.0.0.5:80"), None);
        assert_eq!(rule(&p, "[2001:db8::5]:80"), None);
        assert_eq!(
            rule(&p, "[::ffff:10.0.0.5]:80"),
            None,
            "normalised before the allow list too"
        );
        assert_eq!(rule(&p, "10.0.1.5:80").as_deref(), Some("outside egress.allow"));
        assert_eq!(rule(&p, "127.0.0.1:80").as_deref(), Some("outside egress.allow"));
        assert_eq!(
            rule(&p, "10.0.0.66:80").as_deref(),
            Some("egress.deny 10.0.0.66/32"),
            "deny wins over allow"
        );
        let p = policy(&[], &["169.254.0.0/16"], &[]);
        assert_eq!(
            rule(&p, "169.254.169.254:80").as_deref(),
            Some("link-local"),
            "allow cannot lift a built-in refusal"
        );
    }

    #[test]
    fn networks_parse_as_cidrs_or_addresses() {
        assert_eq!(parse_net("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(
            parse_net(" 10.1.2.3/8 ").unwrap().to_string(),
            "10.0.0.0/8",
            "host bits dropped"
        );
        assert_eq!(parse_net("10.0.0.5").unwrap().to_string(), "10.0.0.5/32");
        assert_eq!(parse_net("::1").unwrap().to_string(), "::1/128");
        assert_eq!(parse_net("::ffff:10.0.0.0/104").unwrap().to_string(), "10.0.0.0/8");
        for bad in ["10.0.0.0/33", "10.0.0", "example.com", "", "fe80::/129"] {
            assert!(parse_net(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn node_names_are_resolved() {
        let nodes = [
            ("localhost".to_string(), 6379),
            ("[::1]".to_string(), 7000),
            ("10.0.0.7".to_string(), 6379),
        ];
        let addrs = resolve(&nodes).await;
        assert!(addrs.contains(&"127.0.0.1:6379".parse().unwrap()), "{addrs:?}");
        assert!(addrs.contains(&"[::1]:7000".parse().unwrap()), "{addrs:?}");
        assert!(addrs.contains(&"10.0.0.7:6379".parse().unwrap()), "{addrs:?}");
    }
}
