//! Tokens, produced on demand so that the first error in the text is the one reported.

use super::ConditionError;
use super::eval::{Field, Op, Operand, count_digits};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    LParen,
    RParen,
    And,
    Or,
    Op(Op),
    Operand(Operand),
    Eof,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token {
    pub(super) tok: Tok,
    pub(super) start: usize,
    pub(super) end: usize,
}

/// Produces tokens on demand, so that the first error in the text is the one reported.
pub(super) struct Lexer<'t> {
    pub(super) text: &'t str,
    pub(super) pos: usize,
    /// Read field paths with the meaning dq gave them before conditions followed the seed (see
    /// [`super::Condition::parse_legacy`]).
    pub(super) legacy: bool,
}

impl Lexer<'_> {
    pub(super) fn next_token(&mut self) -> Result<Token, ConditionError> {
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
    pub(super) fn string(&self, start: usize) -> Result<(String, usize), ConditionError> {
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
    pub(super) fn field(&self, start: usize) -> Result<(Field, usize), ConditionError> {
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
        let path_of = |rest: &[&str]| rest.iter().map(|s| s.to_string()).collect();
        let field = match segments[..] {
            ["http", "status"] => Field::HttpStatus,
            ["http", "body"] => Field::HttpBody,
            ["http", "status" | "body", ..] => return Err(invalid("http.status and http.body have no sub-fields")),
            ["res", "code"] if self.legacy => Field::HttpStatus,
            ["res", "body"] if self.legacy => Field::HttpBody,
            ["res", "code" | "body", ..] if self.legacy => {
                return Err(invalid("res.code and res.body have no sub-fields"));
            }
            ["res", "data", ref rest @ ..] if self.legacy => Field::Res(path_of(rest)),
            ["res", ref rest @ ..] if !self.legacy => Field::Res(path_of(rest)),
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
    pub(super) fn number(&self, start: usize) -> Result<(f64, usize), ConditionError> {
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
    pub(super) fn word(&self, start: usize) -> Result<(Tok, usize), ConditionError> {
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
