//! Framing of the beanstalkd protocol: command lines, and `put`'s body after its line.
//!
//! A command line ends with `\r\n` and is at most 224 bytes with it (beanstalkd's `LINE_BUF_SIZE`); a
//! longer one is thrown away up to its end and answered `BAD_FORMAT`. A `put` line whose numbers read
//! is followed by the body and `\r\n`: the frame carries both, or `JOB_TOO_BIG` after the body was
//! thrown away, as beanstalkd does. Every other line goes to [`super::command`] as it is.

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::Decoder;

use super::command::{self, PutLine};

/// Longest command line, `\r\n` included.
pub const LINE_MAX: usize = 224;

/// What the client sent.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A command line, without its `\r\n`.
    Line(Bytes),
    /// A `put` with its body; `crlf` is false when the body was not followed by `\r\n`.
    Put {
        /// The line's numbers.
        line: PutLine,
        /// The body.
        body: Bytes,
        /// Whether `\r\n` followed the body.
        crlf: bool,
    },
    /// A line longer than [`LINE_MAX`] (thrown away).
    TooLong,
    /// A `put` whose body was larger than allowed (thrown away).
    TooBig,
    /// A `put` line with text after its numbers (no body read).
    PutTrailing,
}

/// The decoder's state between frames.
#[derive(Debug)]
enum State {
    /// Reading a command line.
    Line,
    /// Throwing away a line that was too long, up to its end.
    DiscardLine,
    /// Reading `need` bytes of a put's body (with its `\r\n`).
    Body { line: PutLine, need: usize },
    /// Throwing away `left` bytes of a body that was too big.
    Skip { left: usize },
}

/// The protocol's decoder (see the module's doc).
#[derive(Debug)]
pub struct Codec {
    state: State,
    max_job_size: usize,
}

impl Codec {
    /// A decoder that takes bodies up to `max_job_size` bytes.
    pub fn new(max_job_size: usize) -> Self {
        Codec {
            state: State::Line,
            max_job_size,
        }
    }
}

/// Length of the line at the start of `buf` with its `\r\n`, if it is all there.
fn line_end(buf: &[u8]) -> Option<usize> {
    // beanstalkd looks for the first `\r` and takes the line only if `\n` follows it.
    let cr = buf.iter().position(|&b| b == b'\r')?;
    (buf.get(cr + 1) == Some(&b'\n')).then_some(cr + 2)
}

impl Decoder for Codec {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        loop {
            match &mut self.state {
                State::Line => {
                    let window = &buf[..buf.len().min(LINE_MAX)];
                    let Some(end) = line_end(window) else {
                        if buf.len() >= LINE_MAX {
                            buf.advance(LINE_MAX);
                            self.state = State::DiscardLine;
                            continue;
                        }
                        return Ok(None);
                    };
                    let line = buf.split_to(end).freeze().slice(..end - 2);
                    if line.starts_with(b"put ") && !line.contains(&0) {
                        match command::put_line(&line, self.max_job_size) {
                            Ok(put) => {
                                self.state = State::Body {
                                    need: put.size as usize + 2,
                                    line: put,
                                };
                                continue;
                            }
                            Err(command::PutError::TooBig(size)) => {
                                self.state = State::Skip {
                                    left: size as usize + 2,
                                };
                                continue;
                            }
                            Err(command::PutError::Trailing) => return Ok(Some(Frame::PutTrailing)),
                            Err(command::PutError::BadFormat) => {}
                        }
                    }
                    return Ok(Some(Frame::Line(line)));
                }
                State::DiscardLine => {
                    let window = &buf[..buf.len().min(LINE_MAX)];
                    match line_end(window) {
                        Some(end) => {
                            buf.advance(end);
                            self.state = State::Line;
                            return Ok(Some(Frame::TooLong));
                        }
                        None if buf.len() >= LINE_MAX => buf.advance(LINE_MAX),
                        None => {
                            // Keep a trailing `\r`: its `\n` may come next.
                            let keep = usize::from(buf.last() == Some(&b'\r'));
                            buf.advance(buf.len() - keep);
                            return Ok(None);
                        }
                    }
                }
                State::Body { need, .. } => {
                    if buf.len() < *need {
                        buf.reserve(*need - buf.len());
                        return Ok(None);
                    }
                    let need = *need;
                    let State::Body { line, .. } = std::mem::replace(&mut self.state, State::Line) else {
                        unreachable!("matched above")
                    };
                    let mut body = buf.split_to(need).freeze();
                    let crlf = body.ends_with(b"\r\n");
                    body.truncate(need - 2);
                    return Ok(Some(Frame::Put { line, body, crlf }));
                }
                State::Skip { left } => {
                    let n = (*left).min(buf.len());
                    buf.advance(n);
                    *left -= n;
                    if *left > 0 {
                        return Ok(None);
                    }
                    self.state = State::Line;
                    return Ok(Some(Frame::TooBig));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8], max: usize) -> Vec<Frame> {
        let mut codec = Codec::new(max);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        // Byte by byte: framing must not depend on how reads split the stream.
        for &b in input {
            buf.extend_from_slice(&[b]);
            while let Some(f) = codec.decode(&mut buf).unwrap() {
                out.push(f);
            }
        }
        out
    }

    #[test]
    fn lines_puts_and_limits() {
        let got = frames(
            b"use a\r\nput 1 0 5 3\r\nx\0y\r\nput 1 0 5 2\r\nabcd\r\nput 1 0 1 9\r\n123456789\r\nstats\r\n",
            8,
        );
        assert_eq!(got[0], Frame::Line(Bytes::from_static(b"use a")));
        assert!(matches!(&got[1], Frame::Put { body, crlf: true, line } if &body[..] == b"x\0y" && line.priority == 1));
        assert!(matches!(&got[2], Frame::Put { crlf: false, .. }));
        // The body's size was 2, so `abcd` was read as the body and its end; what follows is an empty
        // line (beanstalkd reads it the same way).
        assert_eq!(got[3], Frame::Line(Bytes::new()));
        assert_eq!(got[4], Frame::TooBig);
        assert_eq!(got[5], Frame::Line(Bytes::from_static(b"stats")));
        let mut long = vec![b'a'; 300];
        long.extend_from_slice(b"\r\nstats\r\n");
        assert_eq!(
            frames(&long, 8),
            vec![Frame::TooLong, Frame::Line(Bytes::from_static(b"stats"))]
        );
        // A put line that does not read is a line (answered BAD_FORMAT), its body then read as lines.
        assert_eq!(
            frames(b"put 1 x\r\n", 8),
            vec![Frame::Line(Bytes::from_static(b"put 1 x"))]
        );
    }
}
