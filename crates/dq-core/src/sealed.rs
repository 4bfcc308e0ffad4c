//! Callback secrets and header values encrypted at rest in Redis: whoever reads a Redis dump, a replica
//! or a backup does not get the credentials dq-consumer sends to callbacks.
//!
//! Each value is sealed with XChaCha20-Poly1305 (an AEAD, from RustCrypto's `chacha20poly1305`) under
//! the first key of `secrets.keys`, with a fresh random 192-bit nonce, and bound to its topic and field
//! (the associated data), so a sealed value copied to another topic or field does not open. The stored
//! form names the key by a short fingerprint, so every key of the list opens what it sealed: rotate by
//! putting a new key first and keeping the old one until `dq-checker secrets rekey` has sealed every
//! registration again under the new one.
//!
//! `dq:sealed:v1:<key id, 8 hex>:<base64url of nonce ‖ ciphertext ‖ tag>`
//!
//! A value without that prefix is plaintext: a registration written before keys were configured, or by
//! a process without keys. It opens as itself, and is sealed when the registration is next written.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

/// What starts a sealed value.
const PREFIX: &str = "dq:sealed:v1:";

/// Why a sealed value does not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Sealed under a key this process does not have.
    #[error("sealed under key {0}, which is not in secrets.keys")]
    UnknownKey(String),
    /// The value is not what a seal produces, or was altered, or belongs to another topic or field.
    #[error("a sealed value that does not open (altered, or copied from another topic or field)")]
    Corrupt,
}

/// The keys of `secrets.keys`: the first seals, every one opens.
#[derive(Clone, Default)]
pub struct Sealer {
    keys: Vec<(String, XChaCha20Poly1305)>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("keys", &self.keys.iter().map(|(id, _)| id).collect::<Vec<_>>())
            .finish()
    }
}

impl Sealer {
    /// A sealer over 32-byte keys, the sealing one first. No keys: values are stored as they are.
    pub fn new(keys: &[[u8; 32]]) -> Self {
        let keys = keys
            .iter()
            .map(|k| (key_id(k), XChaCha20Poly1305::new(k.into())))
            .collect();
        Sealer { keys }
    }

    /// Whether values are sealed (a key is configured).
    pub fn seals(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The id of the sealing key, if any.
    pub fn sealing_key(&self) -> Option<&str> {
        self.keys.first().map(|(id, _)| id.as_str())
    }

    /// `value` sealed for `context` (topic and field) under the first key; as it is without keys.
    pub fn seal(&self, value: &str, context: &str) -> String {
        let Some((id, cipher)) = self.keys.first() else {
            return value.to_string();
        };
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: value.as_bytes(),
                    aad: context.as_bytes(),
                },
            )
            .expect("XChaCha20-Poly1305 encrypts any length a registration has");
        let mut raw = nonce.to_vec();
        raw.extend_from_slice(&sealed);
        format!("{PREFIX}{id}:{}", URL_SAFE_NO_PAD.encode(raw))
    }

    /// The plaintext of `value` sealed for `context`; a value that was never sealed, as it is.
    pub fn open(&self, value: &str, context: &str) -> Result<String, SealError> {
        let Some(rest) = value.strip_prefix(PREFIX) else {
            return Ok(value.to_string());
        };
        let (id, data) = rest.split_once(':').ok_or(SealError::Corrupt)?;
        let (_, cipher) = self
            .keys
            .iter()
            .find(|(k, _)| k == id)
            .ok_or_else(|| SealError::UnknownKey(id.to_string()))?;
        let raw = URL_SAFE_NO_PAD.decode(data).map_err(|_| SealError::Corrupt)?;
        if raw.len() < 24 {
            return Err(SealError::Corrupt);
        }
        let (nonce, sealed) = raw.split_at(24);
        let plain = cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: context.as_bytes(),
                },
            )
            .map_err(|_| SealError::Corrupt)?;
        String::from_utf8(plain).map_err(|_| SealError::Corrupt)
    }

    /// Whether `value` is sealed under a key other than the sealing one (or not sealed while a key is
    /// configured): a registration to seal again after a rotation.
    pub fn is_stale(&self, value: &str) -> bool {
        let Some(current) = self.sealing_key() else {
            return false;
        };
        match value.strip_prefix(PREFIX).and_then(|r| r.split_once(':')) {
            Some((id, _)) => id != current,
            None => true,
        }
    }
}

/// A key's public name: the first 4 bytes of its SHA-256, in hex.
fn key_id(key: &[u8; 32]) -> String {
    hex::encode(&Sha256::digest(key)[..4])
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: [u8; 32] = [1; 32];
    const NEW: [u8; 32] = [2; 32];

    #[test]
    fn a_sealed_value_opens_with_its_key_and_context_only() {
        let s = Sealer::new(&[OLD]);
        let sealed = s.seal("s3cr3t", "orders\0secret");
        assert!(sealed.starts_with("dq:sealed:v1:"), "{sealed}");
        assert!(!sealed.contains("s3cr3t"));
        assert_ne!(sealed, s.seal("s3cr3t", "orders\0secret"), "a fresh nonce each time");
        assert_eq!(s.open(&sealed, "orders\0secret").unwrap(), "s3cr3t");
        assert_eq!(s.open(&sealed, "other\0secret"), Err(SealError::Corrupt));
        let mut altered = sealed.clone();
        altered.pop();
        altered.push(if sealed.ends_with('A') { 'B' } else { 'A' });
        assert_eq!(s.open(&altered, "orders\0secret"), Err(SealError::Corrupt));
    }

    #[test]
    fn a_rotation_opens_old_and_new_and_seals_with_the_first() {
        let old = Sealer::new(&[OLD]);
        let sealed_old = old.seal("a", "t\0secret");
        let both = Sealer::new(&[NEW, OLD]);
        assert_eq!(both.open(&sealed_old, "t\0secret").unwrap(), "a");
        assert!(both.is_stale(&sealed_old));
        let sealed_new = both.seal("b", "t\0secret");
        assert!(!both.is_stale(&sealed_new));
        assert_eq!(both.open(&sealed_new, "t\0secret").unwrap(), "b");
        let only_new = Sealer::new(&[NEW]);
        assert!(matches!(
            only_new.open(&sealed_old, "t\0secret"),
            Err(SealError::UnknownKey(_))
        ));
    }

    #[test]
    fn without_keys_values_stay_plain_and_plain_values_open_as_themselves() {
        let none = Sealer::default();
        assert!(!none.seals());
        assert_eq!(none.seal("x", "c"), "x");
        assert_eq!(Sealer::new(&[OLD]).open("plain", "c").unwrap(), "plain");
        assert!(Sealer::new(&[OLD]).is_stale("plain"));
        assert!(!none.is_stale("plain"));
    }
}
