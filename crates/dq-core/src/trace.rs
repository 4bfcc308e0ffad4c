//! W3C trace context carried with a job (`traceparent`, `tracestate`): checked at push, stored in the
//! job's record (field `tc`, see `record.lua`), handed back on every delivery (the callback's headers, the
//! reserve answer, a hand-off), so a job pushed inside a traced request shows up in the same trace when
//! its callback runs, however much later.
//!
//! Checked strictly, to W3C Trace Context Level 1: a `traceparent` of version `00`,
//! `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lower case, neither id all zeros; a
//! `tracestate` of at most 512 characters in the list syntax (at most 32 members `key=value`, keys
//! unique). The opentelemetry crate's `TraceContextPropagator` is not used to check: a propagator must
//! never fail a request, so it accepts short ids, later versions and drops a bad `tracestate` silently,
//! where dq refuses bad input with a 400 and stores nothing. Its types (`TraceId`, `SpanId`,
//! `SpanContext`) are what a checked context becomes for the spans ([`crate::telemetry::spans`]).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

use crate::error::Error;

/// The longest `tracestate` dq takes, in characters (W3C: a vendor SHOULD propagate at least 512).
pub const MAX_TRACESTATE: usize = 512;

/// Most members of a `tracestate` list (W3C).
const MAX_MEMBERS: usize = 32;

/// What [`TraceContext::parse`] takes as a `traceparent`, as a regular expression (ECMA-262, for the
/// OpenAPI document).
pub const TRACEPARENT_PATTERN: &str = "^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$";

/// The length of a version `00` `traceparent`.
const TRACEPARENT_LEN: usize = 55;

/// A `traceparent`'s bytes: version, trace id (16), parent id (8), flags.
const STORED_BYTES: usize = 26;

/// A job's W3C trace context, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `00-<trace id>-<parent id>-<flags>`: the trace the job belongs to, and the span it hangs from
    /// (the producer's, or dq-server's push span when dq exports spans).
    pub traceparent: String,
    /// Vendors' entries of the trace, as the producer sent them (list members joined by `,`, blanks
    /// around them dropped); `None` when it sent none or an empty list.
    pub tracestate: Option<String>,
}

/// Why a trace context was refused. The messages name the field, for the 400's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TraceContextError {
    /// `traceparent` is not a version `00` trace parent.
    #[error(
        "`traceparent` `{0}` is not a W3C trace parent: 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, \
         lower case, neither id all zeros"
    )]
    Traceparent(String),
    /// `tracestate` breaks the list syntax or its limits.
    #[error("`tracestate` is not a W3C trace state: {0}")]
    Tracestate(String),
    /// A `tracestate` came without a `traceparent`.
    #[error("`tracestate` needs a `traceparent`")]
    TracestateAlone,
}

impl From<TraceContextError> for Error {
    fn from(e: TraceContextError) -> Self {
        Error::Invalid(e.to_string())
    }
}

impl TraceContext {
    /// Checks a `traceparent` and its optional `tracestate` (see the module's rules).
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Result<Self, TraceContextError> {
        check_traceparent(traceparent)?;
        let tracestate = tracestate.map(check_tracestate).transpose()?.flatten();
        Ok(TraceContext {
            traceparent: traceparent.to_string(),
            tracestate,
        })
    }

    /// The context a push gives as optional fields (or headers): none, both, or `traceparent` alone.
    pub fn from_fields(traceparent: Option<&str>, tracestate: Option<&str>) -> Result<Option<Self>, TraceContextError> {
        match (traceparent, tracestate) {
            (None, None) => Ok(None),
            (None, Some(_)) => Err(TraceContextError::TracestateAlone),
            (Some(p), s) => Self::parse(p, s).map(Some),
        }
    }

    /// The trace's id, 32 hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The parent span's id, 16 hex digits.
    pub fn parent_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// The trace flags byte.
    pub fn flags(&self) -> u8 {
        u8::from_str_radix(&self.traceparent[53..55], 16).unwrap_or(0)
    }

    /// Whether the producer records this trace (the `sampled` flag): dq makes spans only for those.
    pub fn sampled(&self) -> bool {
        self.flags() & 1 == 1
    }

    /// The same trace, hanging from span `span_id` (dq's own span: the push, a delivery attempt), with
    /// the flags W3C lets a participant pass on (only `sampled`), and the same `tracestate`.
    pub fn child(&self, span_id: SpanId) -> TraceContext {
        TraceContext {
            traceparent: format!("00-{}-{span_id}-{:02x}", self.trace_id(), self.flags() & 1),
            tracestate: self.tracestate.clone(),
        }
    }

    /// As a remote parent for an OpenTelemetry span.
    pub fn span_context(&self) -> SpanContext {
        let trace_id = TraceId::from_hex(self.trace_id()).unwrap_or(TraceId::INVALID);
        let span_id = SpanId::from_hex(self.parent_id()).unwrap_or(SpanId::INVALID);
        // Checked already; the crate's own parse of a state dq took cannot fail on what it checks.
        let state = self
            .tracestate
            .as_deref()
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        SpanContext::new(trace_id, span_id, TraceFlags::new(self.flags()), true, state)
    }

    /// The one string the record keeps (`tc`) and `push.lua` takes: the `traceparent` packed, its
    /// version, trace id, parent id and flags (26 bytes) in base64url without padding (35 characters,
    /// the first always `A`, version `00`'s first six bits), then a space and the `tracestate` when
    /// there is one. 20 bytes shorter than the `traceparent` as text: a delayed job with a 64-byte body
    /// and a trace context fits the allocator's 128-byte class, not the 160-byte one, and Redis has
    /// fewer bytes to take, copy and keep per traced job.
    pub fn stored(&self) -> String {
        let mut packed = [0u8; STORED_BYTES];
        // Checked hex (check_traceparent), so it decodes.
        hex::decode_to_slice(self.trace_id(), &mut packed[1..17]).expect("a checked trace id");
        hex::decode_to_slice(self.parent_id(), &mut packed[17..25]).expect("a checked parent id");
        packed[25] = self.flags();
        let p = URL_SAFE_NO_PAD.encode(packed);
        match &self.tracestate {
            Some(s) => format!("{p} {s}"),
            None => p,
        }
    }

    /// Reads [`TraceContext::stored`] back, and the `traceparent` as text that records written before
    /// kept; `None` for an empty or malformed value (a record is never refused for its trace: a job
    /// without one is delivered without one).
    pub fn from_stored(stored: &str) -> Option<Self> {
        let (p, s) = match stored.split_once(' ') {
            Some((p, s)) => (p, Some(s)),
            None => (stored, None),
        };
        let traceparent = if p.starts_with("00-") {
            p.to_string()
        } else {
            let mut packed = [0u8; STORED_BYTES];
            let n = URL_SAFE_NO_PAD.decode_slice(p, &mut packed).ok()?;
            if n != STORED_BYTES || packed[0] != 0 {
                return None;
            }
            format!(
                "00-{}-{}-{:02x}",
                hex::encode(&packed[1..17]),
                hex::encode(&packed[17..25]),
                packed[25]
            )
        };
        check_traceparent(&traceparent).ok()?;
        Some(TraceContext {
            traceparent,
            tracestate: s.filter(|s| !s.is_empty()).map(str::to_string),
        })
    }
}

/// `00-<32 lower hex, not all 0>-<16 lower hex, not all 0>-<2 lower hex>`.
fn check_traceparent(p: &str) -> Result<(), TraceContextError> {
    let bad = || TraceContextError::Traceparent(crate::job::shorten(p));
    let b = p.as_bytes();
    if b.len() != TRACEPARENT_LEN || !p.starts_with("00-") || b[35] != b'-' || b[52] != b'-' {
        return Err(bad());
    }
    let hex = |s: &[u8]| s.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
    let zero = |s: &[u8]| s.iter().all(|c| *c == b'0');
    let (trace, parent, flags) = (&b[3..35], &b[36..52], &b[53..55]);
    if !hex(trace) || !hex(parent) || !hex(flags) || zero(trace) || zero(parent) {
        return Err(bad());
    }
    Ok(())
}

/// Checks a `tracestate` list and returns it without blanks around its members and without empty ones
/// (`None` when nothing is left).
pub fn check_tracestate(s: &str) -> Result<Option<String>, TraceContextError> {
    let bad = |why: String| TraceContextError::Tracestate(why);
    if s.chars().count() > MAX_TRACESTATE {
        return Err(bad(format!("longer than {MAX_TRACESTATE} characters")));
    }
    let mut keys: Vec<&str> = Vec::new();
    let mut members: Vec<&str> = Vec::new();
    for member in s.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        let (key, value) = member
            .split_once('=')
            .ok_or_else(|| bad(format!("member `{}` is not key=value", crate::job::shorten(member))))?;
        if !valid_key(key) {
            return Err(bad(format!("key `{}` is not valid", crate::job::shorten(key))));
        }
        if !valid_value(value) {
            return Err(bad(format!("the value of `{key}` is not valid")));
        }
        if keys.contains(&key) {
            return Err(bad(format!("key `{key}` appears twice")));
        }
        keys.push(key);
        members.push(member);
    }
    if members.len() > MAX_MEMBERS {
        return Err(bad(format!("more than {MAX_MEMBERS} members")));
    }
    Ok((!members.is_empty()).then(|| members.join(",")))
}

/// `lcalpha 0*255(lcalpha / DIGIT / "_" / "-" / "*" / "/")`, or
/// `(lcalpha / DIGIT) 0*240(…) "@" lcalpha 0*13(…)` (a tenant at a system).
fn valid_key(key: &str) -> bool {
    let rest = |s: &[u8]| {
        s.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-' | b'*' | b'/'))
    };
    match key.split_once('@') {
        None => {
            let b = key.as_bytes();
            (1..=256).contains(&b.len()) && b[0].is_ascii_lowercase() && rest(&b[1..])
        }
        Some((tenant, system)) => {
            let (t, s) = (tenant.as_bytes(), system.as_bytes());
            (1..=241).contains(&t.len())
                && (t[0].is_ascii_lowercase() || t[0].is_ascii_digit())
                && rest(&t[1..])
                && (1..=14).contains(&s.len())
                && s[0].is_ascii_lowercase()
                && rest(&s[1..])
        }
    }
}

/// `0*255(chr) nblk-chr`: 1 to 256 printable ASCII characters but `,` and `=`, not ending in a space.
fn valid_value(value: &str) -> bool {
    let b = value.as_bytes();
    (1..=256).contains(&b.len())
        && b.iter().all(|c| (0x20..=0x7e).contains(c) && *c != b',' && *c != b'=')
        && b[b.len() - 1] != b' '
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_traceparent_reads_its_parts() {
        let tc = TraceContext::parse(TP, None).unwrap();
        assert_eq!(tc.trace_id(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(tc.parent_id(), "b7ad6b7169203331");
        assert_eq!((tc.flags(), tc.sampled()), (1, true));
        let unsampled = TraceContext::parse(&TP.replace("-01", "-00"), None).unwrap();
        assert!(!unsampled.sampled());
        let sc = tc.span_context();
        assert!(sc.is_valid() && sc.is_remote() && sc.is_sampled());
        assert_eq!(sc.trace_id().to_string(), tc.trace_id());
        assert_eq!(sc.span_id().to_string(), tc.parent_id());
    }

    #[test]
    fn bad_traceparents_are_refused() {
        for bad in [
            "",
            "00",
            // Upper case, wrong lengths, other versions, all-zero ids, bad separators, non-hex.
            "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g",
            " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 ",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333é-01",
        ] {
            let err = TraceContext::parse(bad, None).unwrap_err();
            assert!(matches!(err, TraceContextError::Traceparent(_)), "{bad}: {err}");
            assert!(err.to_string().contains("`traceparent`"), "{err}");
        }
    }

    #[test]
    fn a_tracestate_is_checked_and_kept_without_blanks() {
        let ok = |s: &str| TraceContext::parse(TP, Some(s)).unwrap().tracestate;
        assert_eq!(ok("congo=t61rcWkgMzE").as_deref(), Some("congo=t61rcWkgMzE"));
        assert_eq!(
            ok(" rojo=00f067aa0ba902b7 ,\tcongo=t61rcWkgMzE ,,").as_deref(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
        assert_eq!(
            ok("t@sys=a b;c").as_deref(),
            Some("t@sys=a b;c"),
            "a value may hold a space and `;`"
        );
        assert_eq!(ok("0t@s-1=x").as_deref(), Some("0t@s-1=x"));
        assert_eq!(
            ok("k=trailing ,j=v").as_deref(),
            Some("k=trailing,j=v"),
            "blanks around a member go"
        );
        assert_eq!(ok(""), None);
        assert_eq!(ok(" , "), None);
        let many = (0..32).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(",");
        assert_eq!(ok(&many).as_deref(), Some(many.as_str()));
        let long = format!("k={}", "v".repeat(256));
        assert!(ok(&long).is_some());
        for bad in [
            "novalue",
            "=v",
            "Upper=v",
            "1key=v",
            "k=",
            "k=a,b=",
            "k=a=b",
            "k=tab\tinside",
            "k=é",
            "k@=v",
            "k@sys@x=v",
            "k@Sys=v",
            "k@systemnamewaytoolong=v",
            "k=1,k=2",
            &(0..33).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(","),
            &format!("k={}", "v".repeat(257)),
            &format!("{}=v", "k".repeat(257)),
            // 30 good members, 569 characters.
            &(0..30)
                .map(|i| format!("k{i:02}={}", "v".repeat(14)))
                .collect::<Vec<_>>()
                .join(","),
        ] {
            let err = TraceContext::parse(TP, Some(bad)).unwrap_err();
            assert!(matches!(err, TraceContextError::Tracestate(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn fields_come_together_or_the_traceparent_alone() {
        assert_eq!(TraceContext::from_fields(None, None), Ok(None));
        assert_eq!(
            TraceContext::from_fields(None, Some("k=v")),
            Err(TraceContextError::TracestateAlone)
        );
        let tc = TraceContext::from_fields(Some(TP), Some("k=v")).unwrap().unwrap();
        assert_eq!(tc.tracestate.as_deref(), Some("k=v"));
        let err: Error = TraceContextError::TracestateAlone.into();
        assert!(matches!(err, Error::Invalid(_)));
    }

    #[test]
    fn the_stored_form_reads_back() {
        for tc in [
            TraceContext::parse(TP, None).unwrap(),
            TraceContext::parse(TP, Some("a=1 2,b=x;y")).unwrap(),
        ] {
            assert_eq!(TraceContext::from_stored(&tc.stored()), Some(tc));
        }
        assert_eq!(TraceContext::from_stored(""), None);
        assert_eq!(TraceContext::from_stored("garbage"), None);
        assert_eq!(TraceContext::from_stored(&format!("{TP} ")).unwrap().tracestate, None);
        // 35 characters, the first `A` (push.lua tells a context alone by it), no `;` and no space.
        let stored = TraceContext::parse(TP, None).unwrap().stored();
        assert_eq!(stored.len(), 35);
        assert!(stored.starts_with('A') && !stored.contains([';', ' ']), "{stored}");
        // The text form records written before kept reads too, with its state.
        let before = TraceContext::from_stored(&format!("{TP} k=v")).unwrap();
        assert_eq!(
            (before.traceparent.as_str(), before.tracestate.as_deref()),
            (TP, Some("k=v"))
        );
        // A packed form of another version, of the wrong length, or with a zero id is no context.
        let mut bytes = [0u8; 26];
        bytes[1] = 1;
        bytes[17] = 1;
        let valid = URL_SAFE_NO_PAD.encode(bytes);
        assert!(TraceContext::from_stored(&valid).is_some());
        bytes[0] = 1;
        assert_eq!(TraceContext::from_stored(&URL_SAFE_NO_PAD.encode(bytes)), None);
        assert_eq!(TraceContext::from_stored(&URL_SAFE_NO_PAD.encode([0u8; 25])), None);
        assert_eq!(TraceContext::from_stored(&URL_SAFE_NO_PAD.encode([0u8; 26])), None);
    }

    #[test]
    fn a_child_keeps_the_trace_and_names_the_new_span() {
        let tc = TraceContext::parse(&TP.replace("-01", "-03"), Some("k=v")).unwrap();
        let child = tc.child(SpanId::from(0x00f067aa0ba902b7));
        assert_eq!(
            child.traceparent,
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
        );
        assert_eq!(child.tracestate.as_deref(), Some("k=v"));
        assert!(TraceContext::parse(&child.traceparent, None).is_ok());
    }
}
