//! Retry conditions: a small expression language over a callback's HTTP answer.
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
//! - Fields: `{res.code}` (the status, a number), `{res.body}` (the raw body text, a string) and
//!   `{res.data}` / `{res.data.a.b.0.c}` (the body parsed as JSON). Segments are separated by `.` and
//!   made of `A-Z a-z 0-9 _ -`; an all-digits segment indexes an array (on an object it is a key).
//!   No whitespace inside the braces.
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
//!   scalar, and all of `res.data` when the body is not JSON.
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

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde_json::Value;

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
    /// The HTTP status code, `{res.code}`.
    pub code: u16,
    /// The raw body text, `{res.body}`.
    pub body: &'a str,
    /// The body parsed as JSON when it is JSON (else `None`), `{res.data…}`.
    pub data: Option<&'a Value>,
}

/// Why a condition did not parse. Positions (`at`, `open`, `start`) are 0-based byte offsets into the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConditionError {
    /// The text is empty or only whitespace.
    #[error("empty condition")]
    Empty,
    /// The text is longer than [`MAX_LEN`] bytes.
    #[error("condition too long: {len} bytes, the limit is {MAX_LEN}")]
    TooLong {
        /// Length of the text in bytes.
        len: usize,
    },
    /// Parentheses are nested deeper than [`MAX_DEPTH`].
    #[error("parentheses nested deeper than {MAX_DEPTH} at {at}")]
    TooDeep {
        /// Position of the `(` that is one too deep.
        at: usize,
    },
    /// A string has no closing quote.
    #[error("unterminated string starting at {at}")]
    UnterminatedString {
        /// Position of the opening quote.
        at: usize,
    },
    /// A backslash in a string is followed by something other than `\`, `'` or `"`.
    #[error(r#"invalid escape at {at}: a backslash in a string may only be followed by \, ' or ", found {found:?}"#)]
    InvalidEscape {
        /// Position of the backslash.
        at: usize,
        /// The character after the backslash.
        found: char,
    },
    /// A number is malformed or out of range.
    #[error("invalid number {text} at {at}: {reason}")]
    InvalidNumber {
        /// Position of the number.
        at: usize,
        /// The text of the number.
        text: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A field path has no closing `}`.
    #[error(r#"unterminated field path starting at {at}: missing "}}""#)]
    UnterminatedField {
        /// Position of the `{`.
        at: usize,
    },
    /// A field path holds a character that cannot be part of it.
    #[error("invalid character {found:?} at {at} in the field path starting at {start}: {FIELD_HINT}")]
    InvalidFieldChar {
        /// Position of the character.
        at: usize,
        /// Position of the `{`.
        start: usize,
        /// The character.
        found: char,
    },
    /// A field path does not start with `res.code`, `res.data` or `res.body`.
    #[error("unknown field {path} at {at}: paths start with res.code, res.data or res.body")]
    UnknownField {
        /// Position of the `{`.
        at: usize,
        /// The path, braces included.
        path: String,
    },
    /// A field path is otherwise malformed.
    #[error("invalid field {path} at {at}: {reason}")]
    InvalidField {
        /// Position of the `{`.
        at: usize,
        /// The path, braces included.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An operator that the language does not have, such as `=`, `&` or `!`.
    #[error(r#"unknown operator "{op}" at {at}: {hint}"#)]
    UnknownOperator {
        /// Position of the operator.
        at: usize,
        /// The operator.
        op: &'static str,
        /// What to write instead.
        hint: &'static str,
    },
    /// A character that cannot start a token.
    #[error("unexpected character {found:?} at {at}")]
    UnexpectedChar {
        /// Position of the character.
        at: usize,
        /// The character.
        found: char,
    },
    /// A bare word other than `true`, `false` and `null`.
    #[error(r#"unexpected word "{word}" at {at}: {hint}"#)]
    UnexpectedWord {
        /// Position of the word.
        at: usize,
        /// The word.
        word: String,
        /// What to write instead.
        hint: &'static str,
    },
    /// A `)` with no matching `(`.
    #[error(r#"unexpected ")" at {at}"#)]
    UnexpectedCloseParen {
        /// Position of the `)`.
        at: usize,
    },
    /// A token that does not fit where it is.
    #[error("expected {expected} at {at}, found {found}")]
    Expected {
        /// Position of the token.
        at: usize,
        /// What would fit.
        expected: &'static str,
        /// The token, e.g. `"&&"` or `end of condition`.
        found: String,
    },
    /// The text ends (or the group stops) before the `)` that closes a `(`.
    #[error(r#"expected ")" at {at} to close the "(" at {open}, found {found}"#)]
    Unclosed {
        /// Where the `)` was expected.
        at: usize,
        /// Position of the unclosed `(`.
        open: usize,
        /// What was found instead.
        found: String,
    },
}

/// How a field path is written, for [`ConditionError::InvalidFieldChar`].
const FIELD_HINT: &str =
    r#"segments are made of letters, digits, "_" and "-", separated by ".", and the path ends with "}""#;

impl ConditionError {
    /// The byte offset the error points at, if it points anywhere.
    pub fn position(&self) -> Option<usize> {
        use ConditionError as E;
        match self {
            E::Empty | E::TooLong { .. } => None,
            E::TooDeep { at }
            | E::UnterminatedString { at }
            | E::InvalidEscape { at, .. }
            | E::InvalidNumber { at, .. }
            | E::UnterminatedField { at }
            | E::InvalidFieldChar { at, .. }
            | E::UnknownField { at, .. }
            | E::InvalidField { at, .. }
            | E::UnknownOperator { at, .. }
            | E::UnexpectedChar { at, .. }
            | E::UnexpectedWord { at, .. }
            | E::UnexpectedCloseParen { at }
            | E::Expected { at, .. }
            | E::Unclosed { at, .. } => Some(*at),
        }
    }
}

impl Condition {
    /// Parses a condition; the error says what and where.
    pub fn parse(text: &str) -> Result<Condition, ConditionError> {
        if text.len() > MAX_LEN {
            return Err(ConditionError::TooLong { len: text.len() });
        }
        let mut parser = Parser::new(text)?;
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

    /// Evaluates against an HTTP answer: `code` is the status; `body` the raw body text; `data` the body
    /// parsed as JSON when it is JSON (else None).
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

// ---------------------------------------------------------------------------------------------------
// The syntax tree and its evaluation.

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    /// At least two items, none of them an `Or`.
    Or(Vec<Expr>),
    /// At least two items, none of them an `And`.
    And(Vec<Expr>),
    Cmp(Operand, Op, Operand),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    Field(Field),
    Num(f64),
    Str(String),
    Bool(bool),
    Null,
}

#[derive(Debug, Clone, PartialEq)]
enum Field {
    Code,
    Body,
    Data(Vec<String>),
}

/// A value during evaluation.
#[derive(Debug, Clone, Copy)]
enum Val<'a> {
    Null,
    Bool(bool),
    Num(f64),
    Str(&'a str),
    /// An array or object (or a number `f64` cannot hold).
    Json(&'a Value),
}

impl Expr {
    fn eval(&self, answer: &Answer<'_>) -> bool {
        match self {
            Expr::Or(items) => items.iter().any(|e| e.eval(answer)),
            Expr::And(items) => items.iter().all(|e| e.eval(answer)),
            Expr::Cmp(left, op, right) => {
                let (a, b) = (left.value(answer), right.value(answer));
                match op {
                    Op::Eq => equal(a, b),
                    Op::Ne => !equal(a, b),
                    Op::Lt => order(a, b) == Some(Ordering::Less),
                    Op::Le => matches!(order(a, b), Some(Ordering::Less | Ordering::Equal)),
                    Op::Gt => order(a, b) == Some(Ordering::Greater),
                    Op::Ge => matches!(order(a, b), Some(Ordering::Greater | Ordering::Equal)),
                }
            }
        }
    }

    fn render(&self, compact: bool, out: &mut String) {
        match self {
            Expr::Or(items) | Expr::And(items) => {
                let is_and = matches!(self, Expr::And(_));
                let sep = match (is_and, compact) {
                    (true, false) => " && ",
                    (true, true) => "&&",
                    (false, false) => " || ",
                    (false, true) => "||",
                };
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(sep);
                    }
                    let paren = is_and && matches!(item, Expr::Or(_));
                    if paren {
                        out.push('(');
                    }
                    item.render(compact, out);
                    if paren {
                        out.push(')');
                    }
                }
            }
            Expr::Cmp(left, op, right) => {
                left.render(compact, out);
                if !compact {
                    out.push(' ');
                }
                out.push_str(op.as_str());
                if !compact {
                    out.push(' ');
                }
                right.render(compact, out);
            }
        }
    }
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
}

impl Operand {
    fn value<'a>(&'a self, answer: &Answer<'a>) -> Val<'a> {
        match self {
            Operand::Field(Field::Code) => Val::Num(f64::from(answer.code)),
            Operand::Field(Field::Body) => Val::Str(answer.body),
            Operand::Field(Field::Data(path)) => match answer.data.and_then(|data| lookup(data, path)) {
                None | Some(Value::Null) => Val::Null,
                Some(Value::Bool(b)) => Val::Bool(*b),
                Some(v @ Value::Number(n)) => n.as_f64().map_or(Val::Json(v), Val::Num),
                Some(Value::String(s)) => Val::Str(s),
                Some(v) => Val::Json(v),
            },
            Operand::Num(n) => Val::Num(*n),
            Operand::Str(s) => Val::Str(s),
            Operand::Bool(b) => Val::Bool(*b),
            Operand::Null => Val::Null,
        }
    }

    fn render(&self, compact: bool, out: &mut String) {
        match self {
            Operand::Field(field) => out.push_str(&field.to_string()),
            Operand::Num(n) => out.push_str(&render_number(*n, compact)),
            Operand::Str(s) => render_string(s, out),
            Operand::Bool(true) => out.push_str("true"),
            Operand::Bool(false) => out.push_str("false"),
            Operand::Null => out.push_str("null"),
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Code => f.write_str("{res.code}"),
            Field::Body => f.write_str("{res.body}"),
            Field::Data(path) => {
                f.write_str("{res.data")?;
                for segment in path {
                    write!(f, ".{segment}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// Positional notation for everyday magnitudes, else exponent notation; in the compact form, whichever is
/// shorter. Both give the shortest digits that read back to the same `f64`.
fn render_number(n: f64, compact: bool) -> String {
    let plain = n.to_string();
    let exp = format!("{n:e}");
    let everyday = n == 0.0 || (1e-4..1e16).contains(&n.abs());
    if (compact && exp.len() < plain.len()) || (!compact && !everyday) {
        exp
    } else {
        plain
    }
}

fn render_string(s: &str, out: &mut String) {
    let singles = s.matches('\'').count();
    let doubles = s.matches('"').count();
    let quote = if singles > doubles { '"' } else { '\'' };
    out.push(quote);
    for c in s.chars() {
        if c == quote || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push(quote);
}

/// Follows a path below `res.data`; `None` when it leads nowhere.
fn lookup<'a>(mut value: &'a Value, path: &[String]) -> Option<&'a Value> {
    for segment in path {
        value = match value {
            Value::Object(map) => map.get(segment.as_str())?,
            Value::Array(items) if segment.bytes().all(|b| b.is_ascii_digit()) => {
                items.get(segment.parse::<usize>().ok()?)?
            }
            _ => return None,
        };
    }
    Some(value)
}

/// The number a string holds, if the whole string is a finite decimal number.
fn numeric(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let int_digits = count_digits(b, &mut i);
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = count_digits(b, &mut i);
    }
    if int_digits + frac_digits == 0 {
        return None;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if count_digits(b, &mut i) == 0 {
            return None;
        }
    }
    if i != b.len() {
        return None;
    }
    s.parse::<f64>().ok().filter(|n| n.is_finite())
}

fn count_digits(b: &[u8], i: &mut usize) -> usize {
    let start = *i;
    while b.get(*i).is_some_and(u8::is_ascii_digit) {
        *i += 1;
    }
    *i - start
}

fn as_number(v: Val<'_>) -> Option<f64> {
    match v {
        Val::Num(n) => Some(n),
        Val::Str(s) => numeric(s),
        _ => None,
    }
}

fn equal(a: Val<'_>, b: Val<'_>) -> bool {
    match (a, b) {
        (Val::Null, Val::Null) => true,
        (Val::Num(x), Val::Num(y)) => x == y,
        (Val::Num(x), Val::Str(s)) | (Val::Str(s), Val::Num(x)) => numeric(s) == Some(x),
        (Val::Str(x), Val::Str(y)) => x == y,
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Json(x), Val::Json(y)) => x == y,
        _ => false,
    }
}

fn order(a: Val<'_>, b: Val<'_>) -> Option<Ordering> {
    if let (Val::Str(x), Val::Str(y)) = (a, b)
        && numeric(x).is_none()
        && numeric(y).is_none()
    {
        return Some(x.cmp(y));
    }
    as_number(a)?.partial_cmp(&as_number(b)?)
}

// ---------------------------------------------------------------------------------------------------
// Lexer and parser.

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    LParen,
    RParen,
    And,
    Or,
    Op(Op),
    Operand(Operand),
    Eof,
}

#[derive(Debug, Clone, PartialEq)]
struct Token {
    tok: Tok,
    start: usize,
    end: usize,
}

/// Produces tokens on demand, so that the first error in the text is the one reported.
struct Lexer<'t> {
    text: &'t str,
    pos: usize,
}

impl Lexer<'_> {
    fn next_token(&mut self) -> Result<Token, ConditionError> {
        let b = self.text.as_bytes();
        while b.get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
        let start = self.pos;
        let Some(&c) = b.get(start) else {
            return Ok(Token {
                tok: Tok::Eof,
                start,
                end: start,
            });
        };
        let next = b.get(start + 1).copied();
        let unknown = |op, hint| ConditionError::UnknownOperator { at: start, op, hint };
        let (tok, end) = match (c, next) {
            (b'(', _) => (Tok::LParen, start + 1),
            (b')', _) => (Tok::RParen, start + 1),
            (b'&', Some(b'&')) => (Tok::And, start + 2),
            (b'&', _) => return Err(unknown("&", r#"did you mean "&&"?"#)),
            (b'|', Some(b'|')) => (Tok::Or, start + 2),
            (b'|', _) => return Err(unknown("|", r#"did you mean "||"?"#)),
            (b'=', Some(b'=')) => (Tok::Op(Op::Eq), start + 2),
            (b'=', _) => return Err(unknown("=", r#"did you mean "=="?"#)),
            (b'!', Some(b'=')) => (Tok::Op(Op::Ne), start + 2),
            (b'!', _) => {
                return Err(unknown(
                    "!",
                    r#"there is no negation; use "!=" or the opposite comparison"#,
                ));
            }
            (b'<', Some(b'=')) => (Tok::Op(Op::Le), start + 2),
            (b'<', _) => (Tok::Op(Op::Lt), start + 1),
            (b'>', Some(b'=')) => (Tok::Op(Op::Ge), start + 2),
            (b'>', _) => (Tok::Op(Op::Gt), start + 1),
            (b'\'' | b'"', _) => {
                let (s, end) = self.string(start)?;
                (Tok::Operand(Operand::Str(s)), end)
            }
            (b'{', _) => {
                let (field, end) = self.field(start)?;
                (Tok::Operand(Operand::Field(field)), end)
            }
            (b'0'..=b'9', _) | (b'-', Some(b'0'..=b'9')) => {
                let (n, end) = self.number(start)?;
                (Tok::Operand(Operand::Num(n)), end)
            }
            (c, _) if c.is_ascii_alphabetic() || c == b'_' => self.word(start)?,
            _ => {
                let found = self.text[start..].chars().next().unwrap_or_default();
                return Err(ConditionError::UnexpectedChar { at: start, found });
            }
        };
        self.pos = end;
        Ok(Token { tok, start, end })
    }

    /// A quoted string starting at `start`; returns its value and the offset after the closing quote.
    fn string(&self, start: usize) -> Result<(String, usize), ConditionError> {
        let quote = char::from(self.text.as_bytes()[start]);
        let mut value = String::new();
        let mut chars = self.text[start + 1..].char_indices().map(|(i, c)| (start + 1 + i, c));
        while let Some((i, c)) = chars.next() {
            if c == quote {
                return Ok((value, i + 1));
            }
            if c == '\\' {
                match chars.next() {
                    Some((_, e @ ('\\' | '\'' | '"'))) => value.push(e),
                    Some((_, found)) => return Err(ConditionError::InvalidEscape { at: i, found }),
                    None => break,
                }
            } else {
                value.push(c);
            }
        }
        Err(ConditionError::UnterminatedString { at: start })
    }

    /// A field path `{res…}` starting at `start`.
    fn field(&self, start: usize) -> Result<(Field, usize), ConditionError> {
        let b = self.text.as_bytes();
        let mut i = start + 1;
        while b
            .get(i)
            .is_some_and(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
        {
            i += 1;
        }
        match b.get(i) {
            None => return Err(ConditionError::UnterminatedField { at: start }),
            Some(b'}') => {}
            Some(_) => {
                let found = self.text[i..].chars().next().unwrap_or_default();
                return Err(ConditionError::InvalidFieldChar { at: i, start, found });
            }
        }
        let inner = &self.text[start + 1..i];
        let path = || self.text[start..=i].to_string();
        let invalid = |reason| ConditionError::InvalidField {
            at: start,
            path: path(),
            reason,
        };
        if inner.is_empty() {
            return Err(invalid("the path is empty"));
        }
        let segments: Vec<&str> = inner.split('.').collect();
        if segments.iter().any(|s| s.is_empty()) {
            return Err(invalid("empty segment"));
        }
        let field = match segments[..] {
            ["res", "code"] => Field::Code,
            ["res", "body"] => Field::Body,
            ["res", "code" | "body", ..] => return Err(invalid("res.code and res.body have no sub-fields")),
            ["res", "data", ref rest @ ..] => Field::Data(rest.iter().map(|s| s.to_string()).collect()),
            _ => {
                return Err(ConditionError::UnknownField {
                    at: start,
                    path: path(),
                });
            }
        };
        Ok((field, i + 1))
    }

    /// A number starting at `start` (a digit, or `-` followed by a digit).
    fn number(&self, start: usize) -> Result<(f64, usize), ConditionError> {
        let b = self.text.as_bytes();
        let mut i = start;
        if b[i] == b'-' {
            i += 1;
        }
        count_digits(b, &mut i);
        let mut well_formed = true;
        if b.get(i) == Some(&b'.') {
            i += 1;
            well_formed &= count_digits(b, &mut i) > 0;
        }
        if well_formed && matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            well_formed &= count_digits(b, &mut i) > 0;
        }
        let mut end = i;
        while b
            .get(end)
            .is_some_and(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.'))
        {
            end += 1;
        }
        let invalid = |reason| ConditionError::InvalidNumber {
            at: start,
            text: self.text[start..end].into(),
            reason,
        };
        if !well_formed || end != i {
            return Err(invalid("numbers look like -3, 2, 2.5 or 1e3"));
        }
        match self.text[start..end].parse::<f64>() {
            Ok(n) if n.is_finite() => Ok((n, end)),
            _ => Err(invalid("out of range")),
        }
    }

    /// `true`, `false` or `null`; any other word is an error.
    fn word(&self, start: usize) -> Result<(Tok, usize), ConditionError> {
        let b = self.text.as_bytes();
        let mut end = start;
        while b.get(end).is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_') {
            end += 1;
        }
        let word = &self.text[start..end];
        let operand = match word {
            "true" => Operand::Bool(true),
            "false" => Operand::Bool(false),
            "null" => Operand::Null,
            _ => {
                let hint = match word.to_ascii_lowercase().as_str() {
                    "and" => r#"use "&&""#,
                    "or" => r#"use "||""#,
                    "not" => r#"there is no negation; use "!=" or the opposite comparison"#,
                    "true" | "false" | "null" => "true, false and null are lowercase",
                    _ => "strings need quotes ('text') and fields need braces ({res.data.x})",
                };
                return Err(ConditionError::UnexpectedWord {
                    at: start,
                    word: word.into(),
                    hint,
                });
            }
        };
        Ok((Tok::Operand(operand), end))
    }
}

struct Parser<'t> {
    lexer: Lexer<'t>,
    /// The current (next unconsumed) token.
    cur: Token,
    /// Parentheses open around the current token.
    depth: usize,
}

impl<'t> Parser<'t> {
    fn new(text: &'t str) -> Result<Self, ConditionError> {
        let mut lexer = Lexer { text, pos: 0 };
        let cur = lexer.next_token()?;
        Ok(Parser { lexer, cur, depth: 0 })
    }

    /// Consumes the current token and returns it.
    fn advance(&mut self) -> Result<Token, ConditionError> {
        let next = self.lexer.next_token()?;
        Ok(std::mem::replace(&mut self.cur, next))
    }

    /// How the current token is named in errors.
    fn found(&self) -> String {
        let text = &self.lexer.text[self.cur.start..self.cur.end];
        match &self.cur.tok {
            Tok::Eof => "end of condition".into(),
            Tok::Operand(Operand::Field(_) | Operand::Num(_) | Operand::Bool(_) | Operand::Null) => text.into(),
            Tok::Operand(Operand::Str(_)) if text.len() <= 40 && !text.chars().any(char::is_control) => text.into(),
            Tok::Operand(Operand::Str(_)) => "a string".into(),
            _ => format!("\"{text}\""),
        }
    }

    fn expected(&self, expected: &'static str) -> ConditionError {
        ConditionError::Expected {
            at: self.cur.start,
            expected,
            found: self.found(),
        }
    }

    /// `and ("||" and)*`
    fn parse_or(&mut self) -> Result<Expr, ConditionError> {
        let mut items = Vec::new();
        loop {
            match self.parse_and()? {
                Expr::Or(inner) => items.extend(inner),
                e => items.push(e),
            }
            if self.cur.tok != Tok::Or {
                break;
            }
            self.advance()?;
        }
        Ok(if items.len() == 1 {
            items.swap_remove(0)
        } else {
            Expr::Or(items)
        })
    }

    /// `primary ("&&" primary)*`
    fn parse_and(&mut self) -> Result<Expr, ConditionError> {
        let mut items = Vec::new();
        loop {
            match self.parse_primary()? {
                Expr::And(inner) => items.extend(inner),
                e => items.push(e),
            }
            if self.cur.tok != Tok::And {
                break;
            }
            self.advance()?;
        }
        Ok(if items.len() == 1 {
            items.swap_remove(0)
        } else {
            Expr::And(items)
        })
    }

    /// `"(" expr ")" | operand op operand`
    fn parse_primary(&mut self) -> Result<Expr, ConditionError> {
        if self.cur.tok == Tok::LParen {
            let open = self.cur.start;
            if self.depth >= MAX_DEPTH {
                return Err(ConditionError::TooDeep { at: open });
            }
            self.depth += 1;
            self.advance()?;
            let expr = self.parse_or()?;
            return match self.cur.tok {
                Tok::RParen => {
                    self.depth -= 1;
                    self.advance()?;
                    Ok(expr)
                }
                Tok::Eof => Err(ConditionError::Unclosed {
                    at: self.cur.start,
                    open,
                    found: self.found(),
                }),
                _ => Err(self.expected(r#""&&", "||" or ")""#)),
            };
        }
        let left = self.operand(r#"a field, a value or "(""#)?;
        let Tok::Op(op) = self.cur.tok else {
            return Err(self.expected("a comparison operator"));
        };
        self.advance()?;
        let right = self.operand("a field or a value")?;
        Ok(Expr::Cmp(left, op, right))
    }

    fn operand(&mut self, expected: &'static str) -> Result<Operand, ConditionError> {
        if !matches!(self.cur.tok, Tok::Operand(_)) {
            return Err(self.expected(expected));
        }
        match self.advance()?.tok {
            Tok::Operand(operand) => Ok(operand),
            _ => unreachable!("checked above"),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cond(text: &str) -> Condition {
        Condition::parse(text).unwrap_or_else(|e| panic!("{text:?} should parse: {e}"))
    }

    /// Evaluates `text` against a status and a body, parsing the body as JSON when it is JSON.
    fn check(text: &str, code: u16, body: &str) -> bool {
        let data = serde_json::from_str::<Value>(body).ok();
        cond(text).eval(&Answer {
            code,
            body,
            data: data.as_ref(),
        })
    }

    fn err(text: &str) -> String {
        match Condition::parse(text) {
            Ok(c) => panic!("{text:?} should not parse, got {c}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn examples_from_the_docs() {
        let a = "{res.code} != 200 && {res.data.status} != 2";
        assert!(!check(a, 200, r#"{"status": 2, "msg": "ok"}"#));
        assert!(!check(a, 200, r#"{"status": "2"}"#), "numeric strings count as numbers");
        assert!(!check(a, 500, r#"{"status": 2}"#), "both sides must hold");
        assert!(!check(a, 200, r#"{"status": 1}"#));
        assert!(
            check(a, 503, "<html>Service Unavailable</html>"),
            "not JSON: status is null, != 2"
        );
        assert!(check(a, 404, r#"{"error": "not found"}"#));

        let b = "{res.code} == 200 || {res.data.msg} == 'fail'";
        assert!(check(b, 200, r#"{"msg": "ok"}"#));
        assert!(check(b, 201, r#"{"msg": "fail"}"#));
        assert!(!check(b, 201, r#"{"msg": "ok"}"#));
        assert!(!check(b, 204, ""));
        assert!(!check(b, 500, "fail"), "res.data is null when the body is not JSON");

        let c = r#"({res.data.retry} == true || {res.code} >= 500) && {res.data.code} != "OK""#;
        assert!(check(c, 200, r#"{"retry": true, "code": "BUSY"}"#));
        assert!(!check(c, 200, r#"{"retry": true, "code": "OK"}"#));
        assert!(!check(c, 200, r#"{"retry": false, "code": "BUSY"}"#));
        assert!(check(c, 502, "Bad Gateway"));
        assert!(!check(c, 502, r#"{"code": "OK"}"#));
    }

    #[test]
    fn and_binds_tighter_than_or() {
        // a || b && c with a true, b false, c false: true only if it groups as a || (b && c).
        let text = "{res.code} == 1 || {res.code} == 2 && {res.code} == 3";
        assert!(check(text, 1, ""));
        assert!(!check(text, 2, ""));
        assert_eq!(
            cond(text),
            cond("{res.code} == 1 || ({res.code} == 2 && {res.code} == 3)")
        );
        assert_ne!(
            cond(text),
            cond("({res.code} == 1 || {res.code} == 2) && {res.code} == 3")
        );
        // Parentheses override: (a || b) && c is false when c is false.
        let grouped = "({res.code} == 1 || {res.code} == 2) && {res.code} == 3";
        assert!(!check(grouped, 1, ""));
        assert!(!check(grouped, 2, ""));
        // b && c || a
        let text = "{res.code} == 2 && {res.code} == 3 || {res.code} == 1";
        assert!(check(text, 1, ""));
        assert!(!check(text, 2, ""));
        // Chains group either way to the same condition; redundant parentheses vanish.
        let x = "{res.code} == 1";
        assert_eq!(
            cond(&format!("({x} && {x}) && {x}")),
            cond(&format!("{x} && ({x} && {x})"))
        );
        assert_eq!(cond(&format!("(({x}))")), cond(x));
    }

    #[test]
    fn short_circuit_values() {
        let t = "{res.code} == 200";
        let f = "{res.code} != 200";
        for (text, want) in [
            (format!("{t} && {t}"), true),
            (format!("{t} && {f}"), false),
            (format!("{f} && {t}"), false),
            (format!("{t} || {f}"), true),
            (format!("{f} || {t}"), true),
            (format!("{f} || {f}"), false),
            (format!("{f} || {f} || {f} || {t}"), true),
            (format!("{t} && {t} && {t} && {f}"), false),
        ] {
            assert_eq!(check(&text, 200, ""), want, "{text}");
        }
    }

    #[test]
    fn operators_on_numbers() {
        let body = r#"{"n": 2, "f": 2.5, "neg": -3, "big": 1000}"#;
        for (text, want) in [
            ("{res.data.n} == 2", true),
            ("{res.data.n} == 2.0", true),
            ("{res.data.n} != 2", false),
            ("{res.data.n} != 3", true),
            ("{res.data.n} < 3", true),
            ("{res.data.n} < 2", false),
            ("{res.data.n} <= 2", true),
            ("{res.data.n} > 2", false),
            ("{res.data.n} >= 2", true),
            ("{res.data.f} > {res.data.n}", true),
            ("{res.data.neg} == -3", true),
            ("{res.data.neg} < -2.5", true),
            ("{res.data.big} == 1e3", true),
            ("{res.data.big} == 1E+3", true),
            ("{res.data.f} == 25e-1", true),
            ("{res.code} >= 500", false),
            ("{res.code} < 300", true),
            ("2 < 10", true),
        ] {
            assert_eq!(check(text, 200, body), want, "{text}");
        }
    }

    #[test]
    fn operators_on_strings() {
        let body = r#"{"s": "abc", "e": ""}"#;
        for (text, want) in [
            ("{res.data.s} == 'abc'", true),
            ("{res.data.s} == \"abc\"", true),
            ("{res.data.s} == 'ABC'", false),
            ("{res.data.s} != 'abd'", true),
            ("{res.data.s} < 'abd'", true),
            ("{res.data.s} <= 'abc'", true),
            ("{res.data.s} > 'ab'", true),
            ("{res.data.s} >= 'b'", false),
            ("{res.data.e} == ''", true),
            ("{res.data.e} < 'a'", true),
            ("{res.data.s} == 0", false),
            ("{res.data.s} < 1", false),
            ("{res.data.s} > 1", false),
            ("{res.data.s} == true", false),
            ("{res.data.s} == null", false),
        ] {
            assert_eq!(check(text, 200, body), want, "{text}");
        }
    }

    #[test]
    fn operators_on_bools_and_null() {
        let body = r#"{"t": true, "f": false, "z": null}"#;
        for (text, want) in [
            ("{res.data.t} == true", true),
            ("{res.data.t} != false", true),
            ("{res.data.f} == false", true),
            ("{res.data.t} == {res.data.f}", false),
            ("{res.data.t} == 'true'", false),
            ("{res.data.t} == 1", false),
            ("{res.data.t} > false", false),
            ("{res.data.t} >= true", false),
            ("{res.data.z} == null", true),
            ("{res.data.z} != null", false),
            ("{res.data.z} == 0", false),
            ("{res.data.z} == ''", false),
            ("{res.data.z} == false", false),
            ("{res.data.z} <= null", false),
            ("{res.data.z} < 1", false),
            ("null == null", true),
        ] {
            assert_eq!(check(text, 200, body), want, "{text}");
        }
    }

    #[test]
    fn missing_paths_are_null() {
        let body = r#"{"a": {"b": 1}, "list": [1, 2], "s": "x"}"#;
        for (text, want) in [
            ("{res.data.nope} == null", true),
            ("{res.data.nope} != 2", true),
            ("{res.data.nope} == 2", false),
            ("{res.data.nope} < 2", false),
            ("{res.data.nope} >= 2", false),
            ("{res.data.nope.deeper} == null", true),
            ("{res.data.a.b.c} == null", true),
            ("{res.data.a.c} == null", true),
            ("{res.data.s.x} == null", true),
            ("{res.data.list.5} == null", true),
            ("{res.data.list.x} == null", true),
            ("{res.data.list.99999999999999999999999} == null", true),
            ("{res.data.a.b} == 1", true),
        ] {
            assert_eq!(check(text, 200, body), want, "{text}");
        }
    }

    #[test]
    fn non_json_body() {
        let body = "Internal Server Error";
        assert!(check("{res.data} == null", 500, body));
        assert!(check("{res.data.status} == null", 500, body));
        assert!(check("{res.data.status} != 0", 500, body));
        assert!(!check("{res.data.status} == 0", 500, body));
        assert!(check("{res.body} == 'Internal Server Error'", 500, body));
        assert!(check("{res.body} > 'I'", 500, body));
        assert!(check("{res.body} == ''", 204, ""));
        // A body that is JSON but not an object.
        assert!(check("{res.data} == 'ok'", 200, r#""ok""#));
        assert!(check("{res.data} == 3", 200, "3"));
        assert!(check("{res.body} == 3", 200, "3"), "the raw body is a numeric string");
        assert!(check("{res.data.x} == null", 200, "3"));
        // The answer can say data is absent even for a JSON-looking body.
        let c = cond("{res.data.ok} == true");
        assert!(!c.eval(&Answer {
            code: 200,
            body: r#"{"ok": true}"#,
            data: None
        }));
    }

    #[test]
    fn arrays_and_objects() {
        let body = r#"{"items": [{"id": 7, "tags": ["a", "b"]}, {"id": 8}], "obj": {"0": "zero", "k-1": 1, "a_b": 2}}"#;
        for (text, want) in [
            ("{res.data.items.0.id} == 7", true),
            ("{res.data.items.1.id} == 8", true),
            ("{res.data.items.0.tags.1} == 'b'", true),
            ("{res.data.items.2.id} == null", true),
            ("{res.data.obj.0} == 'zero'", true),
            ("{res.data.obj.k-1} == 1", true),
            ("{res.data.obj.a_b} == 2", true),
            // Arrays and objects: equal only to an identical value, never ordered.
            ("{res.data.items} == {res.data.items}", true),
            ("{res.data.items.0.tags} == {res.data.items.0.tags}", true),
            ("{res.data.items.0} == {res.data.items.1}", false),
            ("{res.data.items} != null", true),
            ("{res.data.items} == null", false),
            ("{res.data.items} == 'a'", false),
            ("{res.data.items} >= {res.data.items}", false),
            ("{res.data.obj} <= {res.data.obj}", false),
            ("{res.data.obj} > 0", false),
        ] {
            assert_eq!(check(text, 200, body), want, "{text}");
        }
        let top = r#"[10, 20]"#;
        assert!(check("{res.data.1} == 20", 200, top));
    }

    #[test]
    fn numeric_strings() {
        let body = concat!(
            r#"{"s": "2", "f": "2.50", "neg": "-3", "exp": "1e3", "plus": "+4", "sp": " 2", "word": "two", "#,
            r#""inf": "inf", "nan": "NaN", "ten": "10", "nine": "9"}"#
        );
        for (text, want) in [
            ("{res.data.s} == 2", true),
            ("2 == {res.data.s}", true),
            ("{res.data.s} == 2.0", true),
            ("{res.data.s} != 2", false),
            ("{res.data.f} == 2.5", true),
            ("{res.data.neg} == -3", true),
            ("{res.data.exp} == 1000", true),
            ("{res.data.plus} == 4", true),
            ("{res.data.sp} == 2", false),
            ("{res.data.word} == 2", false),
            ("{res.data.inf} > 0", false),
            ("{res.data.nan} == {res.data.nan}", true),
            ("{res.data.nan} > 0", false),
            // Two strings compare as strings for ==, as numbers for ordering when both are numeric.
            ("{res.data.s} == '2'", true),
            ("{res.data.f} == '2.5'", false),
            ("{res.data.ten} > {res.data.nine}", true),
            ("{res.data.ten} > '9'", true),
            ("'10' < '9'", false),
            ("{res.data.s} < 3", true),
            ("{res.data.s} >= 2", true),
            // A numeric string against a non-numeric one: no order.
            ("{res.data.s} < 'a'", false),
            ("{res.data.s} > 'a'", false),
            ("{res.code} == '200'", true),
        ] {
            assert_eq!(check(text, 200, body), want, "{text}");
        }
    }

    #[test]
    fn quotes_and_escapes() {
        let body = r#"{"q": "it's", "dq": "say \"hi\"", "bs": "a\\b", "u": "héllo ✓"}"#;
        for (text, want) in [
            (r#"{res.data.q} == "it's""#, true),
            (r#"{res.data.q} == 'it\'s'"#, true),
            (r#"{res.data.dq} == 'say "hi"'"#, true),
            (r#"{res.data.dq} == "say \"hi\"""#, true),
            (r#"{res.data.bs} == 'a\\b'"#, true),
            (r#"{res.data.bs} == "a\\b""#, true),
            (r#"{res.data.u} == 'héllo ✓'"#, true),
            (r#"{res.data.q} == 'it\"s'"#, false),
            ("'&& || ( ) {res.code}' == '&& || ( ) {res.code}'", true),
        ] {
            assert_eq!(check(text, 200, body), want, "{text}");
        }
        assert_eq!(cond(r#"{res.body} == 'it\'s'"#), cond(r#"{res.body} == "it's""#));
        assert_eq!(cond(r#"{res.body} == '\"'"#), cond(r#"{res.body} == '"'"#));
    }

    #[test]
    fn whitespace_anywhere() {
        let tight = cond("({res.code}>=500||{res.data.x}!='a')&&{res.data.y}==-1");
        let loose = cond(" \t( {res.code}\n>=  500 ||{res.data.x} != 'a' )\r\n&&\t{res.data.y}   ==   -1 \n");
        assert_eq!(tight, loose);
        assert_eq!(
            tight.to_string(),
            "({res.code} >= 500 || {res.data.x} != 'a') && {res.data.y} == -1"
        );
    }

    #[test]
    fn display_round_trips() {
        for (text, canonical) in [
            (
                "{res.code}!=200&&{res.data.status}!=2",
                "{res.code} != 200 && {res.data.status} != 2",
            ),
            (
                "{res.code} == 200 || {res.data.msg} == 'fail'",
                "{res.code} == 200 || {res.data.msg} == 'fail'",
            ),
            (
                r#"({res.data.retry} == true || {res.code} >= 500) && {res.data.code} != "OK""#,
                "({res.data.retry} == true || {res.code} >= 500) && {res.data.code} != 'OK'",
            ),
            (
                "{res.code} == 1 || ({res.code} == 2 && {res.code} == 3)",
                "{res.code} == 1 || {res.code} == 2 && {res.code} == 3",
            ),
            ("(({res.code} < 1))", "{res.code} < 1"),
            ("{res.data.a.0.b-c_d} <= -2.5", "{res.data.a.0.b-c_d} <= -2.5"),
            ("{res.data} == null", "{res.data} == null"),
            ("{res.body} > \"it's\"", "{res.body} > \"it's\""),
            (r#"{res.body} == 'a\\b\'c"d'"#, r#"{res.body} == 'a\\b\'c"d'"#),
            (r#"{res.body} == "\"\"'""#, r#"{res.body} == '""\''"#),
            ("1e3 == 1000.0", "1000 == 1000"),
            ("{res.code} == 1e21", "{res.code} == 1e21"),
            ("{res.code} == 0.0000001", "{res.code} == 1e-7"),
            ("{res.code} == 123.456", "{res.code} == 123.456"),
            ("{res.code} == 12345678901234567", "{res.code} == 1.2345678901234568e16"),
            ("{res.code} == 0.0001", "{res.code} == 0.0001"),
            ("{res.code} == -0", "{res.code} == -0"),
            ("false != true", "false != true"),
            (
                "({res.code} == 1 || {res.code} == 2) && ({res.code} == 3 || ({res.code} == 4 && {res.code} == 5))",
                "({res.code} == 1 || {res.code} == 2) && ({res.code} == 3 || {res.code} == 4 && {res.code} == 5)",
            ),
            (
                "(({res.code} == 1 && {res.code} == 2) || {res.code} == 3) && {res.code} == 4",
                "({res.code} == 1 && {res.code} == 2 || {res.code} == 3) && {res.code} == 4",
            ),
        ] {
            let parsed = cond(text);
            let printed = parsed.to_string();
            assert_eq!(printed, canonical, "{text}");
            assert_eq!(cond(&printed), parsed, "{text}");
            assert_eq!(printed.parse::<Condition>(), Ok(parsed), "{text}");
        }
    }

    #[test]
    fn display_of_a_long_condition_still_parses() {
        // Close to the limit without spaces: the spaced form would be longer than the limit.
        let text = vec!["{res.code}==1"; 68].join("||");
        assert!(text.len() <= MAX_LEN && text.len() > MAX_LEN - 10);
        let parsed = cond(&text);
        let printed = parsed.to_string();
        assert!(printed.len() <= MAX_LEN, "{}", printed.len());
        assert_eq!(cond(&printed), parsed);
        assert!(!printed.contains(' '));
        // Numbers take their shortest form there too.
        let text = format!("{}||{{res.code}}==1000", vec!["{res.code}==1"; 67].join("||"));
        assert_eq!(
            cond(&text).to_string(),
            format!("{}||{{res.code}}==1e3", vec!["{res.code}==1"; 67].join("||"))
        );
        // A short one keeps its spaces.
        assert_eq!(cond("{res.code}==1").to_string(), "{res.code} == 1");
    }

    #[test]
    fn errors_with_positions() {
        for (text, want) in [
            ("", "empty condition"),
            ("   \n\t", "empty condition"),
            (
                "{res.code} == 1 &&",
                "expected a field, a value or \"(\" at 18, found end of condition",
            ),
            (
                "{res.code} == 1 && || {res.code} == 2",
                "expected a field, a value or \"(\" at 19, found \"||\"",
            ),
            (
                "&& {res.code} == 1",
                "expected a field, a value or \"(\" at 0, found \"&&\"",
            ),
            (
                "{res.code} ==",
                "expected a field or a value at 13, found end of condition",
            ),
            (
                "{res.code} == && {res.code} == 1",
                "expected a field or a value at 14, found \"&&\"",
            ),
            ("== 1", "expected a field, a value or \"(\" at 0, found \"==\""),
            ("{res.code} = 200", "unknown operator \"=\" at 11: did you mean \"==\"?"),
            (
                "{res.code} == 1 & {res.code} == 2",
                "unknown operator \"&\" at 16: did you mean \"&&\"?",
            ),
            (
                "{res.code} == 1 | {res.code} == 2",
                "unknown operator \"|\" at 16: did you mean \"||\"?",
            ),
            (
                "!({res.code} == 1)",
                "unknown operator \"!\" at 0: there is no negation; use \"!=\" or the opposite comparison",
            ),
            (
                "{res.code} == 1 and {res.code} == 2",
                "unexpected word \"and\" at 16: use \"&&\"",
            ),
            (
                "{res.data.ok} == TRUE",
                "unexpected word \"TRUE\" at 17: true, false and null are lowercase",
            ),
            (
                "{res.data.ok} == yes",
                "unexpected word \"yes\" at 17: strings need quotes ('text') and fields need braces ({res.data.x})",
            ),
            (
                "{res.code} == 1 == 2",
                "expected \"&&\", \"||\" or end of condition at 16, found \"==\"",
            ),
            ("{res.data.msg} == 'abc", "unterminated string starting at 18"),
            ("{res.data.msg} == \"abc'", "unterminated string starting at 18"),
            ("{res.data.msg} == 'abc\\'", "unterminated string starting at 18"),
            (
                "{res.data.msg} == 'a\\nb'",
                "invalid escape at 20: a backslash in a string may only be followed by \\, ' or \", found 'n'",
            ),
            (
                "({res.code} == 1",
                "expected \")\" at 16 to close the \"(\" at 0, found end of condition",
            ),
            (
                "(({res.code} == 1) && {res.code} == 2",
                "expected \")\" at 37 to close the \"(\" at 0, found end of condition",
            ),
            (
                "({res.code} == 1 {res.code}",
                "expected \"&&\", \"||\" or \")\" at 17, found {res.code}",
            ),
            ("{res.code} == 1)", "unexpected \")\" at 15"),
            ("({res.code} == 1)) && {res.code} == 2", "unexpected \")\" at 17"),
            ("()", "expected a field, a value or \"(\" at 1, found \")\""),
            ("({res.code}) == 1", "expected a comparison operator at 11, found \")\""),
            (
                "{req.code} == 1",
                "unknown field {req.code} at 0: paths start with res.code, res.data or res.body",
            ),
            (
                "{res.code} == 1 && {res} == 2",
                "unknown field {res} at 19: paths start with res.code, res.data or res.body",
            ),
            (
                "{res.headers.x} == 1",
                "unknown field {res.headers.x} at 0: paths start with res.code, res.data or res.body",
            ),
            (
                "{res.code.x} == 1",
                "invalid field {res.code.x} at 0: res.code and res.body have no sub-fields",
            ),
            ("{res.data..x} == 1", "invalid field {res.data..x} at 0: empty segment"),
            ("{res.data.} == 1", "invalid field {res.data.} at 0: empty segment"),
            ("{} == 1", "invalid field {} at 0: the path is empty"),
            ("{res.code", "unterminated field path starting at 0: missing \"}\""),
            (
                "{res.code == 1",
                "invalid character ' ' at 9 in the field path starting at 0: segments are made of letters, digits, \
                 \"_\" and \"-\", separated by \".\", and the path ends with \"}\"",
            ),
            (
                "{res.code} == 2x",
                "invalid number 2x at 14: numbers look like -3, 2, 2.5 or 1e3",
            ),
            (
                "{res.code} == 1.2.3",
                "invalid number 1.2.3 at 14: numbers look like -3, 2, 2.5 or 1e3",
            ),
            (
                "{res.code} == 1.",
                "invalid number 1. at 14: numbers look like -3, 2, 2.5 or 1e3",
            ),
            (
                "{res.code} == 1e",
                "invalid number 1e at 14: numbers look like -3, 2, 2.5 or 1e3",
            ),
            ("{res.code} == 1e999", "invalid number 1e999 at 14: out of range"),
            ("{res.code} == - 1", "unexpected character '-' at 14"),
            ("{res.code} == #", "unexpected character '#' at 14"),
            ("{res.code} == é", "unexpected character 'é' at 14"),
            (
                "{res.data.x}",
                "expected a comparison operator at 12, found end of condition",
            ),
            (
                "{res.data.x} && {res.code} == 1",
                "expected a comparison operator at 13, found \"&&\"",
            ),
            (
                "{res.code} == 1 || 'x'",
                "expected a comparison operator at 22, found end of condition",
            ),
            (
                "{res.code} == 1 || {res.data.ok}",
                "expected a comparison operator at 32, found end of condition",
            ),
            ("true", "expected a comparison operator at 4, found end of condition"),
            ("{res.data.a} 'x'", "expected a comparison operator at 13, found 'x'"),
        ] {
            assert_eq!(err(text), want, "{text:?}");
        }
        // The spec's own example.
        assert_eq!(
            err("{res.data.ok} && {res.code} == 1"),
            "expected a comparison operator at 14, found \"&&\""
        );
    }

    #[test]
    fn first_error_in_the_text_wins() {
        assert_eq!(
            err("&& {res.code} == 'abc"),
            "expected a field, a value or \"(\" at 0, found \"&&\""
        );
        assert_eq!(
            err("{res.code} == 'abc' || {req.x} = 1"),
            err("{res.code} == 'abc' || {req.x} == 1")
        );
    }

    #[test]
    fn limits() {
        // Too long.
        let leaf = "{res.code} == 1 || ";
        let long = format!("{}{{res.code}} == 1", leaf.repeat(60));
        assert!(long.len() > MAX_LEN);
        assert_eq!(
            err(&long),
            format!("condition too long: {} bytes, the limit is 1024", long.len())
        );
        assert_eq!(Condition::parse(&long).unwrap_err().position(), None);
        let spaces = format!("{{res.code}} == 1{}", " ".repeat(MAX_LEN - 15));
        assert_eq!(spaces.len(), MAX_LEN);
        assert!(Condition::parse(&spaces).is_ok());
        assert!(Condition::parse(&format!("{spaces} ")).is_err());

        // Too deep: 32 levels are fine, 33 are not.
        let nest = |n: usize| format!("{}{{res.code}} == 1{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(cond(&nest(MAX_DEPTH)), cond("{res.code} == 1"));
        assert_eq!(err(&nest(MAX_DEPTH + 1)), "parentheses nested deeper than 32 at 32");
        assert_eq!(Condition::parse(&nest(MAX_DEPTH + 1)).unwrap_err().position(), Some(32));
        // Depth counts open parentheses, not how many groups there are.
        let siblings = vec![nest(20); 5].join(" && ");
        assert!(Condition::parse(&siblings).is_ok());
        // Unbalanced deep input fails on depth or on balance, never by overflowing the stack.
        assert!(Condition::parse(&"(".repeat(1000)).is_err());
        assert!(Condition::parse(&")".repeat(1000)).is_err());
    }

    #[test]
    fn from_str_and_answer_copy() {
        let c: Condition = "{res.code} >= 500".parse().unwrap();
        let answer = Answer {
            code: 503,
            body: "",
            data: None,
        };
        let copy = answer;
        assert!(c.eval(&answer) && c.eval(&copy));
        assert!("{res.code} >".parse::<Condition>().is_err());
        let data = json!({"a": [1, {"b": "2"}]});
        let answer = Answer {
            code: 200,
            body: "",
            data: Some(&data),
        };
        assert!(cond("{res.data.a.1.b} == 2").eval(&answer));
    }
}
