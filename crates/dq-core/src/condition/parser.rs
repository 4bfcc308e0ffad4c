//! A recursive-descent parser over the lexer's tokens.

use super::eval::{Expr, Operand};
use super::lexer::{Lexer, Tok, Token};
use super::{ConditionError, MAX_DEPTH};

pub(super) struct Parser<'t> {
    pub(super) lexer: Lexer<'t>,
    /// The current (next unconsumed) token.
    pub(super) cur: Token,
    /// Parentheses open around the current token.
    pub(super) depth: usize,
}

impl<'t> Parser<'t> {
    pub(super) fn new(text: &'t str, legacy: bool) -> Result<Self, ConditionError> {
        let mut lexer = Lexer { text, pos: 0, legacy };
        let cur = lexer.next_token()?;
        Ok(Parser { lexer, cur, depth: 0 })
    }

    /// Consumes the current token and returns it.
    pub(super) fn advance(&mut self) -> Result<Token, ConditionError> {
        let next = self.lexer.next_token()?;
        Ok(std::mem::replace(&mut self.cur, next))
    }

    /// How the current token is named in errors.
    pub(super) fn found(&self) -> String {
        let text = &self.lexer.text[self.cur.start..self.cur.end];
        match &self.cur.tok {
            Tok::Eof => "end of condition".into(),
            Tok::Operand(Operand::Field(_) | Operand::Num(_) | Operand::Bool(_) | Operand::Null) => text.into(),
            Tok::Operand(Operand::Str(_)) if text.len() <= 40 && !text.chars().any(char::is_control) => text.into(),
            Tok::Operand(Operand::Str(_)) => "a string".into(),
            _ => format!("\"{text}\""),
        }
    }

    pub(super) fn expected(&self, expected: &'static str) -> ConditionError {
        ConditionError::Expected {
            at: self.cur.start,
            expected,
            found: self.found(),
        }
    }

    /// `and ("||" and)*`
    pub(super) fn parse_or(&mut self) -> Result<Expr, ConditionError> {
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
    pub(super) fn parse_and(&mut self) -> Result<Expr, ConditionError> {
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
    pub(super) fn parse_primary(&mut self) -> Result<Expr, ConditionError> {
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

    pub(super) fn operand(&mut self, expected: &'static str) -> Result<Operand, ConditionError> {
        if !matches!(self.cur.tok, Tok::Operand(_)) {
            return Err(self.expected(expected));
        }
        match self.advance()?.tok {
            Tok::Operand(operand) => Ok(operand),
            _ => unreachable!("checked above"),
        }
    }
}
