//! Coalescing: pushes to a topic with one `coalesce_key` become one job while it is pending (delayed).
//! `first` is deduplication (the push's [`crate::job::Dedup`]); `last` (debounce) and `merge` (batching)
//! are [`Coalescing`], stored by `coalesce.lua` (see docs/api.md, "Coalescing").
//!
//! Each push of a key has an id of its own within the key (the producer's `id`, else one dq makes), kept
//! [`PUSH_MEMORY_MS`] after the push with the job it went into: a push sent again with that id after an
//! unknown outcome (dq's own retry, or the producer's) answers with that job and changes nothing, so an
//! item is never merged twice.

pub use dq_api::{Coalesce, CoalesceMode};

use crate::config::Limits;
use crate::error::{Error, Result};
use crate::job::{Dedup, shorten, validate_key};

/// How long a push's id is remembered after the push (10 minutes): a producer retrying a push whose
/// answer it lost does so well within that.
pub const PUSH_MEMORY_MS: u64 = 600_000;

/// What a merged job's body adds around its items: `{"items":[` and `]}`.
pub const MERGE_FRAME_BYTES: usize = 12;

/// The most items a `merge` may name as `max_items`.
pub const MAX_ITEMS: i64 = 100_000;

/// A validated `last` or `merge` coalescing of a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coalescing {
    /// The producer's key, with a job id's syntax.
    pub key: String,
    /// `Last` or `Merge` (`First` is a [`Dedup`]).
    pub mode: CoalesceMode,
    /// The window, ms.
    pub window_ms: u64,
    /// `last`: due at most this long after the push that started the job.
    pub max_wait_ms: Option<u64>,
    /// `merge`: due at once with this many items.
    pub max_items: Option<u64>,
    /// The push's id within the key: the producer's `id`, else dq makes one when it sends the push.
    pub push_id: Option<String>,
}

/// What a push's coalescing fields make: nothing, a deduplication (`first`), or a [`Coalescing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coalesced {
    /// No coalescing.
    None,
    /// `first`: deduplication by the key for the window.
    First(Dedup),
    /// `last` or `merge`.
    Pending(Coalescing),
}

/// The push fields coalescing reads, as sent.
pub struct Fields<'a> {
    /// `coalesce_key`.
    pub key: Option<String>,
    /// `coalesce`.
    pub coalesce: Option<Coalesce>,
    /// Whether the push has `dedup_key` or `dedup_ms`.
    pub dedup: bool,
    /// The push's `id`.
    pub id: Option<&'a str>,
    /// Whether the push has `delay_ms` or `run_at`.
    pub due_given: bool,
    /// The body's JSON text length.
    pub body_len: usize,
}

/// Checks a push's coalescing fields against `limits`.
pub fn check(f: Fields<'_>, limits: &Limits) -> Result<Coalesced> {
    let invalid = |m: &str| Err(Error::Invalid(m.to_string()));
    let (key, c) = match (f.key, f.coalesce) {
        (None, None) => return Ok(Coalesced::None),
        (Some(_), None) | (None, Some(_)) => return invalid("`coalesce_key` and `coalesce` go together"),
        (Some(key), Some(c)) => (key, c),
    };
    if f.dedup {
        return invalid("give either `dedup_key` or `coalesce_key`, not both");
    }
    validate_key(&key).map_err(|_| {
        Error::Invalid(format!(
            "coalesce_key `{}` is not valid: 1 to 128 of A-Z a-z 0-9 _ . : -",
            shorten(&key)
        ))
    })?;
    let horizon = limits.max_delay_ms;
    if c.window_ms < 1 || c.window_ms as u64 > horizon {
        return Err(Error::Invalid(format!(
            "`coalesce.window_ms` must be between 1 and {horizon} (limits.max_delay_ms), got {}",
            c.window_ms
        )));
    }
    let window_ms = c.window_ms as u64;
    if c.max_wait_ms.is_some() && c.mode != CoalesceMode::Last {
        return invalid("`coalesce.max_wait_ms` goes with mode `last` only");
    }
    if c.max_items.is_some() && c.mode != CoalesceMode::Merge {
        return invalid("`coalesce.max_items` goes with mode `merge` only");
    }
    if c.mode == CoalesceMode::First {
        if f.id.is_some() {
            return invalid("give either `id` (itself the idempotency key) or a `first` `coalesce_key`, not both");
        }
        return Ok(Coalesced::First(Dedup { key, window_ms }));
    }
    if f.due_given {
        return invalid("a `last` or `merge` push is due by its `coalesce.window_ms`: give no `delay_ms` or `run_at`");
    }
    // A bound below the window is a bound all the same: the job is due at the bound.
    let max_wait_ms = match c.max_wait_ms {
        None => None,
        Some(w) if w < 1 || w as u64 > horizon => {
            return Err(Error::Invalid(format!(
                "`coalesce.max_wait_ms` must be between 1 and {horizon} (limits.max_delay_ms), got {w}"
            )));
        }
        Some(w) => Some(w as u64),
    };
    let max_items = match c.max_items {
        None => None,
        Some(n) if !(1..=MAX_ITEMS).contains(&n) => {
            return Err(Error::Invalid(format!(
                "`coalesce.max_items` must be between 1 and {MAX_ITEMS}, got {n}"
            )));
        }
        Some(n) => Some(n as u64),
    };
    if c.mode == CoalesceMode::Merge && f.body_len + MERGE_FRAME_BYTES > limits.max_body_bytes {
        return Err(Error::Invalid(format!(
            "a `merge` item is at most {} bytes (limits.max_body_bytes less the {MERGE_FRAME_BYTES} of \
             `{{\"items\":[…]}}`), got {}",
            limits.max_body_bytes - MERGE_FRAME_BYTES,
            f.body_len
        )));
    }
    Ok(Coalesced::Pending(Coalescing {
        key,
        mode: c.mode,
        window_ms,
        max_wait_ms,
        max_items,
        push_id: f.id.map(str::to_string),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(key: Option<&str>, c: Option<serde_json::Value>) -> Fields<'static> {
        Fields {
            key: key.map(str::to_string),
            coalesce: c.map(|c| serde_json::from_value(c).unwrap()),
            dedup: false,
            id: None,
            due_given: false,
            body_len: 10,
        }
    }

    #[test]
    fn first_is_deduplication() {
        let got = check(
            fields(Some("k"), Some(serde_json::json!({"mode": "first", "window_ms": 500}))),
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(
            got,
            Coalesced::First(Dedup {
                key: "k".into(),
                window_ms: 500
            })
        );
    }

    #[test]
    fn last_and_merge_carry_their_bounds() {
        let got = check(
            fields(
                Some("doc:7"),
                Some(serde_json::json!({"mode": "last", "window_ms": 500, "max_wait_ms": 5000})),
            ),
            &Limits::default(),
        )
        .unwrap();
        let Coalesced::Pending(c) = got else { panic!("{got:?}") };
        assert_eq!(
            (c.mode, c.window_ms, c.max_wait_ms),
            (CoalesceMode::Last, 500, Some(5000))
        );
        let got = check(
            fields(
                Some("digest"),
                Some(serde_json::json!({"mode": "merge", "window_ms": 60000, "max_items": 100})),
            ),
            &Limits::default(),
        )
        .unwrap();
        let Coalesced::Pending(c) = got else { panic!("{got:?}") };
        assert_eq!((c.mode, c.max_items), (CoalesceMode::Merge, Some(100)));
    }

    #[test]
    fn bad_coalescing_is_refused() {
        let limits = Limits::default();
        let c = |v: serde_json::Value| Some(v);
        for (f, says) in [
            (fields(Some("k"), None), "go together"),
            (
                fields(None, c(serde_json::json!({"mode": "last", "window_ms": 5}))),
                "go together",
            ),
            (
                fields(Some("a b"), c(serde_json::json!({"mode": "last", "window_ms": 5}))),
                "coalesce_key",
            ),
            (
                fields(Some("k"), c(serde_json::json!({"mode": "last", "window_ms": 0}))),
                "window_ms",
            ),
            (
                fields(
                    Some("k"),
                    c(serde_json::json!({"mode": "last", "window_ms": 99999999999999i64})),
                ),
                "window_ms",
            ),
            (
                fields(
                    Some("k"),
                    c(serde_json::json!({"mode": "last", "window_ms": 500, "max_wait_ms": 0})),
                ),
                "max_wait_ms",
            ),
            (
                fields(
                    Some("k"),
                    c(serde_json::json!({"mode": "merge", "window_ms": 500, "max_wait_ms": 1000})),
                ),
                "max_wait_ms",
            ),
            (
                fields(
                    Some("k"),
                    c(serde_json::json!({"mode": "last", "window_ms": 500, "max_items": 3})),
                ),
                "max_items",
            ),
            (
                fields(
                    Some("k"),
                    c(serde_json::json!({"mode": "merge", "window_ms": 500, "max_items": 0})),
                ),
                "max_items",
            ),
        ] {
            let err = check(f, &limits).unwrap_err();
            assert!(matches!(err, Error::Invalid(_)), "{err:?}");
            assert!(err.to_string().contains(says), "{says}: {err}");
        }
        let mut f = fields(Some("k"), c(serde_json::json!({"mode": "merge", "window_ms": 500})));
        f.body_len = limits.max_body_bytes - 5;
        assert!(check(f, &limits).unwrap_err().to_string().contains("merge"));
        let mut f = fields(Some("k"), c(serde_json::json!({"mode": "last", "window_ms": 500})));
        f.due_given = true;
        assert!(check(f, &limits).unwrap_err().to_string().contains("delay_ms"));
        let mut f = fields(Some("k"), c(serde_json::json!({"mode": "first", "window_ms": 500})));
        f.dedup = true;
        assert!(check(f, &limits).unwrap_err().to_string().contains("dedup_key"));
        let mut f = fields(Some("k"), c(serde_json::json!({"mode": "first", "window_ms": 500})));
        f.id = Some("i");
        assert!(check(f, &limits).unwrap_err().to_string().contains("id"));
        assert!(serde_json::from_value::<Coalesce>(serde_json::json!({"mode": "sometimes", "window_ms": 5})).is_err());
    }
}
