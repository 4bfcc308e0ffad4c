//! The protocol's fixed replies, and replies with a body.
#![allow(missing_docs)] // Each constant is the reply it names.

pub const BAD_FORMAT: &[u8] = b"BAD_FORMAT\r\n";
pub const UNKNOWN_COMMAND: &[u8] = b"UNKNOWN_COMMAND\r\n";
pub const EXPECTED_CRLF: &[u8] = b"EXPECTED_CRLF\r\n";
pub const JOB_TOO_BIG: &[u8] = b"JOB_TOO_BIG\r\n";
pub const DRAINING: &[u8] = b"DRAINING\r\n";
pub const INTERNAL_ERROR: &[u8] = b"INTERNAL_ERROR\r\n";
pub const NOT_FOUND: &[u8] = b"NOT_FOUND\r\n";
pub const NOT_IGNORED: &[u8] = b"NOT_IGNORED\r\n";
pub const DEADLINE_SOON: &[u8] = b"DEADLINE_SOON\r\n";
pub const TIMED_OUT: &[u8] = b"TIMED_OUT\r\n";
pub const DELETED: &[u8] = b"DELETED\r\n";
pub const RELEASED: &[u8] = b"RELEASED\r\n";
pub const BURIED: &[u8] = b"BURIED\r\n";
pub const TOUCHED: &[u8] = b"TOUCHED\r\n";
pub const KICKED: &[u8] = b"KICKED\r\n";
pub const PAUSED: &[u8] = b"PAUSED\r\n";

/// `<head> <len>\r\n<body>\r\n` (`RESERVED <id>`, `FOUND <id>`, `OK`).
pub fn with_body(head: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + body.len() + 16);
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(format!(" {}\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
    out
}
