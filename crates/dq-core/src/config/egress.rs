//! `[egress]`: which addresses callbacks may reach, and how much of an answer dq-consumer reads.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};
use crate::egress::parse_net;

/// The callback egress policy's settings (the built-in refusals are in [`crate::egress`]).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EgressSettings {
    /// CIDRs (or single addresses) no callback may reach, on top of the built-in refusals, e.g.
    /// `10.0.0.0/8`: an operator's one setting to keep callbacks off a network.
    pub deny: Vec<String>,
    /// When not empty, the only CIDRs callbacks may reach; the built-in refusals and `deny` still apply.
    pub allow: Vec<String>,
    /// Largest callback answer read, in bytes: a larger one fails the delivery (`too_large`) without
    /// being read further, so a callback cannot fill dq-consumer's memory.
    pub max_answer_bytes: usize,
    /// Bytes of a failed delivery's answer kept in the job's `last_error` (0: the status only). Anyone
    /// who may read jobs reads `last_error`, so an excerpt lets them read the answers of whatever a
    /// callback URL points at; keep it at 0 unless callbacks only reach services they may read anyway.
    pub excerpt_bytes: usize,
}

impl Default for EgressSettings {
    fn default() -> Self {
        Self {
            deny: Vec::new(),
            allow: Vec::new(),
            max_answer_bytes: 64 * 1024,
            excerpt_bytes: 0,
        }
    }
}

impl EgressSettings {
    /// Checks what the types alone do not: every CIDR parses, the cap is at least a byte.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (key, list) in [("egress.deny", &self.deny), ("egress.allow", &self.allow)] {
            for net in list {
                parse_net(net).map_err(|e| invalid(key, e))?;
            }
        }
        if self.max_answer_bytes == 0 {
            return Err(invalid("egress.max_answer_bytes", "must be at least 1"));
        }
        Ok(())
    }

    /// `egress.deny`, parsed (the settings were checked at load, so nothing is dropped).
    pub fn deny_nets(&self) -> Vec<IpNet> {
        self.deny.iter().filter_map(|n| parse_net(n).ok()).collect()
    }

    /// `egress.allow`, parsed.
    pub fn allow_nets(&self) -> Vec<IpNet> {
        self.allow.iter().filter_map(|n| parse_net(n).ok()).collect()
    }
}
