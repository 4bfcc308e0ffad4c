//! The `X-DQ-Signature` header dq puts on what it POSTs for a topic with a secret: deliveries
//! (dq-consumer) and dead-job hooks (dq-checker), signed the same way so one verifier serves both.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::topic::Callback;

/// `X-DQ-Signature: t=<unix s>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`, with one `v1=` per secret
/// (the current one first, then the one being rotated out): a receiver accepts the request when any of
/// them matches a key it holds.
pub fn signature(secrets: &[&str], unix_s: u64, body: &[u8]) -> String {
    let mut header = format!("t={unix_s}");
    for secret in secrets {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
        mac.update(unix_s.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        header.push_str(",v1=");
        header.push_str(&hex::encode(mac.finalize().into_bytes()));
    }
    header
}

/// The `X-DQ-Signature` value for `body` POSTed for a topic with `callback`, signed now; none when the
/// topic has no secret.
pub fn header_now(callback: &Callback, body: &[u8]) -> Option<String> {
    let secrets = secrets(callback);
    if secrets.is_empty() {
        return None;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Some(signature(&secrets, now, body))
}

/// The secrets `callback` signs with, the current one first; empty when it has none (nothing is signed).
pub fn secrets(callback: &Callback) -> Vec<&str> {
    [&callback.secret, &callback.previous_secret]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;

    #[test]
    fn signature_matches_a_known_hmac() {
        // The header signs "<t>.<body>"; and the HMAC itself is the standard one (Wikipedia's example).
        let sig = signature(&["s3cr3t"], 1_700_000_000, br#"{"id":"a"}"#);
        let mac = |key: &[u8]| {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
            mac.update(br#"1700000000.{"id":"a"}"#);
            hex::encode(mac.finalize().into_bytes())
        };
        assert_eq!(sig, format!("t=1700000000,v1={}", mac(b"s3cr3t")));
        // Two secrets during a rotation: both signatures, the current one first.
        let both = signature(&["new", "old"], 1_700_000_000, br#"{"id":"a"}"#);
        assert_eq!(both, format!("t=1700000000,v1={},v1={}", mac(b"new"), mac(b"old")));
        let known = Hmac::<Sha256>::new_from_slice(b"key")
            .unwrap()
            .chain_update(b"The quick brown fox jumps over the lazy dog")
            .finalize()
            .into_bytes();
        assert_eq!(
            hex::encode(known),
            "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        );
    }

    /// The verifier docs/security.md gives receivers accepts what dq signs (with either secret during a
    /// rotation) and refuses a wrong key, an altered body and a timestamp outside the replay window.
    #[test]
    fn the_documented_python_verifier_accepts_dq_signatures() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/security.md")).unwrap();
        let after = doc
            .split("A verifier in Python")
            .nth(1)
            .expect("security.md has the verifier");
        let code = after.split("```python").nth(1).unwrap().split("```").next().unwrap();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let body = br#"{"id":"a","body":{"x":1}}"#;
        let header = signature(&["new", "old"], now, body);
        let stale = signature(&["new"], now - 301, body);
        let script = format!(
            "{code}\nh = {header:?}\nb = {body:?}.encode()\n\
             assert verify(h, b, [b'new'])\nassert verify(h, b, [b'old'])\n\
             assert not verify(h, b, [b'other'])\nassert not verify(h, b + b' ', [b'new'])\n\
             assert not verify({stale:?}, b, [b'new'])\nprint('ok')\n",
            body = std::str::from_utf8(body).unwrap()
        );
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(&script)
            .output()
            .expect("python3 runs");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "ok",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
