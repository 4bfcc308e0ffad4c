//! Retry conditions: a small expression language over a callback's answer, with the seed's meaning:
//! `res` is the callback's JSON answer. Against `{"code": 200, "data": {"status": 2}}`, `{res.code}` is
//! 200 and `{res.data.status}` is 2; the HTTP status and the raw body are `{http.status}` and
//! `{http.body}`.
//!
//! dq-consumer POSTs a job to its topic's callback URL. A delivery succeeded when the answer is 2xx
//! **and** the topic's `retry.condition` (if it has one) evaluates to `false`; otherwise it is retried.
//! A condition is parsed once with [`Condition::parse`] (a recursive-descent parser, nothing is ever
//! `eval`ed) and evaluated against each answer with [`Condition::eval`], which cannot fail.
//!
//! # Syntax
//!
//! ```text
//! expr    := and ( "||" and )*
//! and     := primary ( "&&" primary )*
//! primary := "(" expr ")" | operand op operand
//! op      := "==" | "!=" | "<" | "<=" | ">" | ">="
//! operand := field | number | string | "true" | "false" | "null"
//! ```
//!
//! - `&&` binds tighter than `||`: `a || b && c` is `a || (b && c)`. Parentheses override.
//! - Every leaf is a comparison: a bare operand such as `{res.data.ok}` is an error, and there is no `!`.
//! - Fields: `{res}` / `{res.a.b.0.c}` (the answer's body parsed as JSON, and paths into it),
//!   `{http.status}` (the HTTP status, a number) and `{http.body}` (the raw body text, a string).
//!   Segments are separated by `.` and made of `A-Z a-z 0-9 _ -`; an all-digits segment indexes an
//!   array (on an object it is a key). No whitespace inside the braces.
//! - Numbers: `-3`, `2`, `2.5`, `1e3`, `-1.5E-2`. Strings: `'…'` or `"…"`, with the escapes `\\`, `\'`
//!   and `\"` only. Literals: `true`, `false`, `null` (lowercase).
//! - Whitespace (spaces, tabs, newlines) is allowed between any two tokens.
//! - Limits: at most [`MAX_LEN`] bytes and at most [`MAX_DEPTH`] nested parentheses.
//!
//! Errors ([`ConditionError`]) say what is wrong and where, as a 0-based byte offset into the text:
//! `expected a comparison operator at 14, found "&&"`.
//!
//! # Semantics
//!
//! - A field that does not exist is `null`: a missing key, an index past the end, a segment below a
//!   scalar, and all of `res` when the body is not JSON.
//! - `==`: `null` equals only `null`; numbers compare numerically (`2 == 2.0`); a number and a string
//!   holding a number compare as numbers (`"2" == 2` is true, since many APIs send numbers as strings);
//!   two strings compare as strings (`"2" == "2.0"` is false); booleans as booleans; a JSON array or
//!   object equals only an identical JSON value; every other mix is unequal (`"true" == true` is false).
//! - `!=` is exactly the negation of `==`, so a missing field is `!= 2` (and `!= 'x'`).
//! - `<`, `<=`, `>`, `>=`: numeric when both sides are numbers or numeric strings; byte-wise string order
//!   when both sides are non-numeric strings; otherwise (null, booleans, arrays, objects, a number
//!   against a non-numeric string, a numeric string against a non-numeric one) false.
//! - A numeric string is a whole string like `-12`, `2.50`, `1e3` or `+4`, without surrounding
//!   whitespace; `inf` and `NaN` are not numbers. JSON numbers are read as `f64`.
//! - `&&` and `||` short-circuit; evaluation has no side effects, so this changes nothing but speed.

mod error;
mod eval;
mod lexer;
mod parser;
#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

pub use self::error::ConditionError;
use self::eval::Expr;
use self::lexer::Tok;
use self::parser::Parser;

/// The longest condition accepted, in bytes.
pub const MAX_LEN: usize = 1024;

/// The deepest nesting of parentheses accepted.
pub const MAX_DEPTH: usize = 32;

/// A parsed retry condition.
///
/// Two conditions are equal when they have the same structure: redundant parentheses and the
/// grouping of chains of `&&` (or of `||`) do not count, nor do the quotes or spelling of a literal.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    expr: Expr,
}

/// What a condition looks at.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    /// The HTTP status code, `{http.status}`.
    pub status: u16,
    /// The raw body text, `{http.body}`.
    pub body: &'a str,
    /// The body parsed as JSON when it is JSON (else `None`): `{res}`, `{res.code}`, `{res.data.status}`.
    pub json: Option<&'a Value>,
}

impl Condition {
    /// Parses a condition; the error says what and where.
    pub fn parse(text: &str) -> Result<Condition, ConditionError> {
        Self::parse_with(text, false)
    }

    /// Parses a condition written with the meaning dq gave field paths before they followed the seed:
    /// `{res.code}` the HTTP status, `{res.body}` the raw body, `{res.data…}` the JSON answer. Rendered
    /// ([`fmt::Display`]), it is the same condition in today's terms (`{http.status}`, `{http.body}`,
    /// `{res…}`): how registrations stored before the change are rewritten.
    pub fn parse_legacy(text: &str) -> Result<Condition, ConditionError> {
        Self::parse_with(text, true)
    }

    fn parse_with(text: &str, legacy: bool) -> Result<Condition, ConditionError> {
        if text.len() > MAX_LEN {
            return Err(ConditionError::TooLong { len: text.len() });
        }
        let mut parser = Parser::new(text, legacy)?;
        if parser.cur.tok == Tok::Eof {
            return Err(ConditionError::Empty);
        }
        let expr = parser.parse_or()?;
        match parser.cur.tok {
            Tok::Eof => Ok(Condition { expr }),
            Tok::RParen => Err(ConditionError::UnexpectedCloseParen { at: parser.cur.start }),
            _ => Err(parser.expected(r#""&&", "||" or end of condition"#)),
        }
    }

    /// Evaluates against an HTTP answer: `status`, the raw `body` text, and the body parsed as JSON when
    /// it is JSON (else None).
    pub fn eval(&self, answer: &Answer<'_>) -> bool {
        self.expr.eval(answer)
    }
}

impl FromStr for Condition {
    type Err = ConditionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Condition::parse(s)
    }
}

/// The canonical form: single spaces around operators, parentheses only where precedence needs them,
/// numbers in positional notation (exponent notation below 1e-4 and from 1e16), strings in single quotes
/// unless double quotes need fewer escapes. It parses back to an equal [`Condition`]. Should that form
/// exceed [`MAX_LEN`], spaces are left out and numbers take their shortest notation, which makes it no
/// longer than any text the condition was parsed from.
impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        self.expr.render(false, &mut out);
        if out.len() > MAX_LEN {
            out.clear();
            self.expr.render(true, &mut out);
        }
        f.write_str(&out)
    }
}
