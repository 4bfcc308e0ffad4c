//! The syntax tree, its evaluation against an answer, and its canonical rendering.

use std::cmp::Ordering;
use std::fmt;

use serde_json::Value;

use super::Answer;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Expr {
    /// At least two items, none of them an `Or`.
    Or(Vec<Expr>),
    /// At least two items, none of them an `And`.
    And(Vec<Expr>),
    Cmp(Operand, Op, Operand),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Operand {
    Field(Field),
    Num(f64),
    Str(String),
    Bool(bool),
    Null,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Field {
    /// `{http.status}`.
    HttpStatus,
    /// `{http.body}`.
    HttpBody,
    /// `{res}`, `{res.a.b.0}`: a path into the answer parsed as JSON.
    Res(Vec<String>),
}

/// A value during evaluation.
#[derive(Debug, Clone, Copy)]
pub(super) enum Val<'a> {
    Null,
    Bool(bool),
    Num(f64),
    Str(&'a str),
    /// An array or object (or a number `f64` cannot hold).
    Json(&'a Value),
}

impl Expr {
    pub(super) fn eval(&self, answer: &Answer<'_>) -> bool {
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

    pub(super) fn render(&self, compact: bool, out: &mut String) {
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
    pub(super) fn as_str(self) -> &'static str {
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
            Operand::Field(Field::HttpStatus) => Val::Num(f64::from(answer.status)),
            Operand::Field(Field::HttpBody) => Val::Str(answer.body),
            Operand::Field(Field::Res(path)) => match answer.json.and_then(|json| lookup(json, path)) {
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

    pub(super) fn render(&self, compact: bool, out: &mut String) {
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
            Field::HttpStatus => f.write_str("{http.status}"),
            Field::HttpBody => f.write_str("{http.body}"),
            Field::Res(path) => {
                f.write_str("{res")?;
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
pub(super) fn render_number(n: f64, compact: bool) -> String {
    let plain = n.to_string();
    let exp = format!("{n:e}");
    let everyday = n == 0.0 || (1e-4..1e16).contains(&n.abs());
    if (compact && exp.len() < plain.len()) || (!compact && !everyday) {
        exp
    } else {
        plain
    }
}

pub(super) fn render_string(s: &str, out: &mut String) {
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

/// Follows a path below `res`; `None` when it leads nowhere.
pub(super) fn lookup<'a>(mut value: &'a Value, path: &[String]) -> Option<&'a Value> {
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
pub(super) fn numeric(s: &str) -> Option<f64> {
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

pub(super) fn count_digits(b: &[u8], i: &mut usize) -> usize {
    let start = *i;
    while b.get(*i).is_some_and(u8::is_ascii_digit) {
        *i += 1;
    }
    *i - start
}

pub(super) fn as_number(v: Val<'_>) -> Option<f64> {
    match v {
        Val::Num(n) => Some(n),
        Val::Str(s) => numeric(s),
        _ => None,
    }
}

pub(super) fn equal(a: Val<'_>, b: Val<'_>) -> bool {
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

pub(super) fn order(a: Val<'_>, b: Val<'_>) -> Option<Ordering> {
    if let (Val::Str(x), Val::Str(y)) = (a, b)
        && numeric(x).is_none()
        && numeric(y).is_none()
    {
        return Some(x.cmp(y));
    }
    as_number(a)?.partial_cmp(&as_number(b)?)
}
