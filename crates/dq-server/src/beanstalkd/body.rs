//! A job body as bytes (the protocol) and as JSON (dq's jobs, the HTTP API).
//!
//! A body put over the protocol is kept as a JSON string when it is UTF-8 (`hello` → `"hello"`; NUL and
//! control characters escaped), and as `{"$base64": "<standard base 64>"}` when it is not. A body shown
//! over the protocol is the string's bytes for a JSON string, the decoded bytes for exactly that object,
//! and the JSON text itself for any other body (a job pushed over HTTP with an object body reads as its
//! JSON). So bytes put over the protocol come back exactly.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

/// The key of the object that holds a body that is not UTF-8.
const BYTES_KEY: &str = "$base64";

/// The JSON text dq keeps for `bytes`.
pub fn to_json(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::to_string(text).expect("a string serializes"),
        Err(_) => serde_json::json!({ BYTES_KEY: STANDARD.encode(bytes) }).to_string(),
    }
}

/// The bytes the protocol shows for the JSON text `json`.
pub fn to_bytes(json: &str) -> Vec<u8> {
    let first = json.trim_start().as_bytes().first().copied();
    if first == Some(b'"') {
        if let Ok(Value::String(s)) = serde_json::from_str(json) {
            return s.into_bytes();
        }
    } else if first == Some(b'{')
        && json.contains(BYTES_KEY)
        && let Ok(Value::Object(map)) = serde_json::from_str(json)
        && let (1, Some(Value::String(b64))) = (map.len(), map.get(BYTES_KEY))
        && let Ok(bytes) = STANDARD.decode(b64)
    {
        return bytes;
    }
    json.as_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_come_back_exactly() {
        let cases: [&[u8]; 6] = [
            b"",
            b"hello",
            b"a\0b\r\n\x01",
            b"\xff\xfe\x00",
            "é✓".as_bytes(),
            b"{\"x\":1}",
        ];
        for bytes in cases {
            assert_eq!(to_bytes(&to_json(bytes)), bytes);
        }
        assert_eq!(to_json(b"hi"), "\"hi\"");
        assert_eq!(to_json(b"\xff"), r#"{"$base64":"/w=="}"#);
        // Bodies pushed over HTTP read as their JSON, strings as their text.
        assert_eq!(to_bytes(r#"{"order":1}"#), br#"{"order":1}"#);
        assert_eq!(to_bytes("42"), b"42");
        assert_eq!(to_bytes(r#""text""#), b"text");
    }
}
