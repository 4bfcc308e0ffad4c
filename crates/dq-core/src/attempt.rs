//! A job's history: one entry per delivery attempt, kept with the job (docs/redis-keys.md, "Attempts").
//!
//! An entry is a MessagePack array appended to the job's record, after the record's own array: the
//! history lives and goes with the record (its done retention included), costs an ack one `APPEND` of
//! bytes packed here, in Rust, and no script ever decodes it on a job's way (`record.lua` keeps it as
//! bytes; only a job past 20 attempts has its oldest dropped). The entry's first element, the attempt
//! number, is written as 0 here and filled in by the script from the record.
//!
//! A reservation's receipt carries the time it was made (see [`receipt_nonce`]), so an ack or nack that
//! names only the job and its receipt still tells when its attempt began.

use rand::Rng;

pub use dq_api::attempt::{ANSWER_BYTES, Attempt, KEPT_ATTEMPTS, Outcome};

/// The longest `consumer` name the API takes (characters; so at most 512 bytes, what an attempt keeps).
pub const MAX_CONSUMER_CHARS: usize = 128;

/// What an ack or nack tells of the attempt it ends, beyond what the verb itself says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Note {
    /// How it ended; `None`: the verb's own (an ack `acked`, a nack `nacked`).
    pub outcome: Option<Outcome>,
    /// When it began, Unix ms; `None`: when the reservation was made, read from its receipt.
    pub started_at: Option<i64>,
    /// The callback's HTTP status, when it answered.
    pub status: Option<u16>,
    /// The first [`ANSWER_BYTES`] of the callback's answer.
    pub answer: Option<String>,
    /// Who made the attempt (a dq-consumer instance, or the name a pull worker gave).
    pub consumer: Option<String>,
}

impl Note {
    /// The entry for an attempt under `receipt` that ended now as `outcome` (unless the note says
    /// otherwise), with `error`, packed as `record.lua`'s `rec_attempt` takes it: an array of 8,
    /// attempt (0, filled in by the script), started_at, duration_ms, outcome code, status, error,
    /// answer, consumer; an absent value is `false`, which Lua keeps in a table where it would drop a
    /// nil (a history cut at 20 is decoded and packed again by the script).
    pub(crate) fn pack(&self, receipt: &str, outcome: Outcome, error: Option<&str>) -> Vec<u8> {
        let now = crate::clock::unix_ms();
        let started = self.started_at.or_else(|| reserved_at(receipt)).unwrap_or(now).min(now);
        let mut out = Vec::with_capacity(32 + self.answer.as_ref().map_or(0, String::len));
        let w = &mut out;
        // Writing to a Vec cannot fail.
        rmp::encode::write_array_len(w, 8).expect("a Vec takes it");
        rmp::encode::write_uint(w, 0).expect("a Vec takes it");
        rmp::encode::write_sint(w, started).expect("a Vec takes it");
        rmp::encode::write_uint(w, (now - started) as u64).expect("a Vec takes it");
        rmp::encode::write_uint(w, self.outcome.unwrap_or(outcome).code() as u64).expect("a Vec takes it");
        match self.status {
            Some(s) => drop(rmp::encode::write_uint(w, s as u64).expect("a Vec takes it")),
            None => rmp::encode::write_bool(w, false).expect("a Vec takes it"),
        }
        let answer = self.answer.as_deref().map(|a| cut(a, ANSWER_BYTES));
        let consumer = self.consumer.as_deref().map(|c| cut(c, 4 * MAX_CONSUMER_CHARS));
        for text in [error, answer, consumer] {
            match text {
                Some(t) => rmp::encode::write_str(w, t).expect("a Vec takes it"),
                None => rmp::encode::write_bool(w, false).expect("a Vec takes it"),
            }
        }
        out
    }
}

/// The entry of an attempt under `receipt` that ended as `outcome` (unless `note` says otherwise), with
/// `error`, as [`Note::pack`] makes it; empty when `jobs.attempt_history` (`on`) is off: the scripts
/// then keep none.
pub(crate) fn entry(on: bool, note: &Note, receipt: &str, outcome: Outcome, error: Option<&str>) -> Vec<u8> {
    if on {
        note.pack(receipt, outcome, error)
    } else {
        Vec::new()
    }
}

/// `text` cut to at most `max` bytes, at a character's boundary.
pub fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The entries of a record's history (the bytes after its own array), newest first. An entry that
/// cannot be read ends the list (what came before it is kept).
pub(crate) fn unpack(mut bytes: &[u8]) -> Vec<Attempt> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let Ok(value) = rmpv::decode::read_value(&mut bytes) else {
            tracing::warn!("an attempt of a job's history cannot be read; the older ones are left out");
            break;
        };
        match read_entry(&value) {
            Some(a) => out.push(a),
            None => tracing::warn!(?value, "a job's history holds an entry that is not an attempt"),
        }
    }
    out.reverse();
    out
}

/// One entry as [`Note::pack`] (or `expire.lua`) wrote it; `nil` and `false` read as absent.
fn read_entry(value: &rmpv::Value) -> Option<Attempt> {
    let items = value.as_array()?;
    let at = |i: usize| items.get(i).filter(|v| !v.is_nil() && v.as_bool() != Some(false));
    let text = |i: usize| at(i).and_then(|v| v.as_str()).map(str::to_string);
    Some(Attempt {
        attempt: at(0)?.as_u64()? as u32,
        started_at: at(1)?.as_i64()?,
        duration_ms: at(2).and_then(|v| v.as_u64()).unwrap_or(0),
        outcome: Outcome::of_code(at(3)?.as_u64()?)?,
        status: at(4).and_then(|v| v.as_u64()).map(|s| s as u16),
        error: text(5),
        answer: text(6),
        consumer: text(7),
    })
}

/// A fresh receipt nonce for a reservation made now: the time in ms (11 hex digits) and 48 random bits
/// (12 hex digits), so a receipt cannot be guessed from another. A script's receipts are `<nonce>.<n>`;
/// [`reserved_at`] reads the time back.
pub fn receipt_nonce() -> String {
    let salt: u64 = rand::rng().random();
    format!(
        "{:011x}{:012x}",
        crate::clock::unix_ms().max(0) as u64 & 0xfff_ffff_ffff,
        salt & 0xffff_ffff_ffff
    )
}

/// When the reservation of `receipt` was made, Unix ms, if its nonce is one [`receipt_nonce`] made.
pub fn reserved_at(receipt: &str) -> Option<i64> {
    let (nonce, _) = receipt.split_once('.')?;
    if nonce.len() != 23 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    i64::from_str_radix(&nonce[..11], 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_packs_to_what_unpack_reads() {
        let receipt = format!("{}.3", receipt_nonce());
        let started = reserved_at(&receipt).unwrap();
        assert!((crate::clock::unix_ms() - started).abs() < 60_000);
        let note = Note {
            status: Some(503),
            answer: Some("é".repeat(300)),
            consumer: Some("host:1".into()),
            ..Default::default()
        };
        let mut bytes = note.pack(&receipt, Outcome::Failed, Some("HTTP 503"));
        // The script fills in the attempt number; here, as a one-byte fixint.
        bytes[1] = 4;
        let plain = Note::default().pack(&receipt, Outcome::Acked, None);
        let mut both = bytes.clone();
        both.extend_from_slice(&plain);
        let got = unpack(&both);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].outcome, Outcome::Acked, "newest first");
        let failed = &got[1];
        assert_eq!((failed.attempt, failed.status), (4, Some(503)));
        assert_eq!(failed.error.as_deref(), Some("HTTP 503"));
        assert_eq!(
            failed.answer.as_ref().unwrap().len(),
            512,
            "cut at a character's boundary"
        );
        assert_eq!(failed.consumer.as_deref(), Some("host:1"));
        assert!(failed.started_at >= started);
        // A broken tail keeps what came before it.
        both.push(0xc1);
        assert_eq!(unpack(&both).len(), 2);
    }

    #[test]
    fn receipts_without_a_time_have_none() {
        assert_eq!(reserved_at("0123456789abcdef.1"), None);
        assert_eq!(reserved_at("nonsense"), None);
        assert_eq!(reserved_at("0000000000100000000000x.1"), None);
        assert_eq!(reserved_at("00000000001000000000000.1"), Some(1));
        assert_ne!(receipt_nonce(), receipt_nonce());
    }
}
