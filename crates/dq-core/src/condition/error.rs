//! Why a condition did not parse, and where.

use super::{MAX_DEPTH, MAX_LEN};

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
    /// A field path is not `{http.status}`, `{http.body}`, or `{res}` and a path below it.
    #[error(
        "unknown field {path} at {at}: a field is {{res}} or a path below it ({{res.code}}, {{res.data.status}}: the JSON answer), {{http.status}} or {{http.body}}"
    )]
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
pub(super) const FIELD_HINT: &str =
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
