//! `[secrets]`: the keys that seal callback secrets and header values at rest in Redis.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};
use crate::sealed::Sealer;

/// The sealing keys (see [`crate::sealed`]).
#[derive(Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecretsSettings {
    /// 32-byte keys in base64 (`openssl rand -base64 32`), the one that seals first; every one opens.
    /// Empty: registrations are stored as they are. Set it in the environment file
    /// (`DQ__SECRETS__KEYS`, comma-separated), not in the TOML file beside them.
    pub keys: Vec<String>,
}

impl std::fmt::Debug for SecretsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretsSettings")
            .field("keys", &format!("<{} keys>", self.keys.len()))
            .finish()
    }
}

impl SecretsSettings {
    /// The keys, decoded; the error names the key by its place in the list, never its text.
    fn decoded(&self) -> Result<Vec<[u8; 32]>, ConfigError> {
        self.keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                STANDARD
                    .decode(k.trim())
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
                    .ok_or_else(|| {
                        invalid(
                            "secrets.keys",
                            format!(
                                "key {} is not 32 bytes in base64 (make one with `openssl rand -base64 32`)",
                                i + 1
                            ),
                        )
                    })
            })
            .collect()
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.decoded().map(|_| ())
    }

    /// The sealer over these keys (checked at load).
    pub fn sealer(&self) -> Sealer {
        Sealer::new(&self.decoded().unwrap_or_default())
    }
}
