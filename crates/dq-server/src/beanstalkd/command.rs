//! Reading a command line as beanstalkd 1.12 does (`prot.c`): the command is found by its prefix, in
//! beanstalkd's order, and numbers and names are read with its rules (leading spaces skipped, trailing
//! text refused where beanstalkd refuses it and ignored where it ignores it), so that every line gets
//! the answer beanstalkd gives it.

use dq_core::beanstalkd::is_tube_name;

/// A command, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `use <tube>`
    Use(String),
    /// `reserve`, or `reserve-with-timeout <seconds>` (`counted` as such; a negative timeout waits
    /// without end, as in beanstalkd 1.12).
    Reserve {
        /// How long to wait; `None`: without end.
        timeout: Option<u32>,
        /// Whether it was `reserve-with-timeout`.
        with_timeout: bool,
    },
    /// `reserve-job <id>`
    ReserveJob(u64),
    /// `delete <id>`
    Delete(u64),
    /// `release <id> <pri> <delay>`
    Release(u64, u32, u32),
    /// `bury <id> <pri>`
    Bury(u64, u32),
    /// `touch <id>`
    Touch(u64),
    /// `watch <tube>`
    Watch(String),
    /// `ignore <tube>`
    Ignore(String),
    /// `peek <id>`
    Peek(u64),
    /// `peek-ready`
    PeekReady,
    /// `peek-delayed`
    PeekDelayed,
    /// `peek-buried`
    PeekBuried,
    /// `kick <bound>`
    Kick(u32),
    /// `kick-job <id>`
    KickJob(u64),
    /// `stats-job <id>`
    StatsJob(u64),
    /// `stats-tube <tube>`
    StatsTube(String),
    /// `stats`
    Stats,
    /// `list-tubes`
    ListTubes,
    /// `list-tube-used`
    ListTubeUsed,
    /// `list-tubes-watched`
    ListTubesWatched,
    /// `pause-tube <tube> <delay>` (the name made of tube-name characters, not yet checked further:
    /// beanstalkd counts the command before it refuses a name that starts with `-` or is too long).
    PauseTube(String, u32),
    /// `quit`
    Quit,
}

/// Why a line is not a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `BAD_FORMAT`
    BadFormat,
    /// `UNKNOWN_COMMAND`
    Unknown,
}

/// The numbers of a `put` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutLine {
    /// Priority, lower first.
    pub priority: u32,
    /// Delay, seconds.
    pub delay: u32,
    /// Time-to-run, seconds (as given; beanstalkd makes 0 into 1).
    pub ttr: u32,
    /// Body size, bytes.
    pub size: u32,
}

/// Why a `put` line does not start a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutError {
    /// The numbers do not read.
    BadFormat,
    /// Text follows the numbers (beanstalkd counts this put in `cmd-put`, then refuses it).
    Trailing,
    /// The body is larger than allowed (its bytes are thrown away).
    TooBig(u32),
}

/// Reads `put <pri> <delay> <ttr> <bytes>` (the line starts with `put `).
pub fn put_line(line: &[u8], max_job_size: usize) -> Result<PutLine, PutError> {
    let rest = &line[4..];
    let (priority, rest) = read_u32(rest).ok_or(PutError::BadFormat)?;
    let (delay, rest) = read_u32(rest).ok_or(PutError::BadFormat)?;
    let (ttr, rest) = read_u32(rest).ok_or(PutError::BadFormat)?;
    let (size, rest) = read_u32(rest).ok_or(PutError::BadFormat)?;
    if size as usize > max_job_size {
        return Err(PutError::TooBig(size));
    }
    if !rest.is_empty() {
        return Err(PutError::Trailing);
    }
    Ok(PutLine {
        priority,
        delay,
        ttr,
        size,
    })
}

/// Reads a command line (without its `\r\n`; a `put` that reached here did not read).
pub fn parse(line: &[u8]) -> Result<Command, Refused> {
    use Refused::BadFormat;
    // beanstalkd reads the line as a C string: a NUL inside it is refused.
    if line.contains(&0) {
        return Err(BadFormat);
    }
    let exact = |cmd: Command, name: &str| {
        if line == name.as_bytes() {
            Ok(cmd)
        } else {
            Err(BadFormat)
        }
    };
    let after = |prefix: &str| &line[prefix.len()..];
    let starts = |prefix: &str| line.starts_with(prefix.as_bytes());
    if starts("put ") {
        return Err(BadFormat);
    }
    if starts("peek ") {
        return Ok(Command::Peek(whole_u64(after("peek "))?));
    }
    if starts("peek-ready") {
        return exact(Command::PeekReady, "peek-ready");
    }
    if starts("peek-delayed") {
        return exact(Command::PeekDelayed, "peek-delayed");
    }
    if starts("peek-buried") {
        return exact(Command::PeekBuried, "peek-buried");
    }
    if starts("reserve-with-timeout ") {
        // beanstalkd 1.12 reads the timeout with strtol into an int: no digits is 0, text after them
        // is ignored, only a value past a long is refused, and a negative one waits without end.
        let t = strtol(after("reserve-with-timeout ")).ok_or(BadFormat)? as i32;
        return Ok(Command::Reserve {
            timeout: u32::try_from(t).ok(),
            with_timeout: true,
        });
    }
    if starts("reserve-job ") {
        return Ok(Command::ReserveJob(whole_u64(after("reserve-job "))?));
    }
    if starts("reserve") {
        return exact(
            Command::Reserve {
                timeout: None,
                with_timeout: false,
            },
            "reserve",
        );
    }
    if starts("delete ") {
        return Ok(Command::Delete(whole_u64(after("delete "))?));
    }
    if starts("release ") {
        let (id, rest) = read_u64(after("release ")).ok_or(BadFormat)?;
        let (pri, rest) = read_u32(rest).ok_or(BadFormat)?;
        let (delay, rest) = read_u32(rest).ok_or(BadFormat)?;
        if !rest.is_empty() {
            return Err(BadFormat);
        }
        return Ok(Command::Release(id, pri, delay));
    }
    if starts("bury ") {
        let (id, rest) = read_u64(after("bury ")).ok_or(BadFormat)?;
        let (pri, rest) = read_u32(rest).ok_or(BadFormat)?;
        if !rest.is_empty() {
            return Err(BadFormat);
        }
        return Ok(Command::Bury(id, pri));
    }
    if starts("kick ") {
        return Ok(Command::Kick(strtoul(after("kick ")).ok_or(BadFormat)?));
    }
    if starts("kick-job ") {
        return Ok(Command::KickJob(whole_u64(after("kick-job "))?));
    }
    if starts("touch ") {
        return Ok(Command::Touch(whole_u64(after("touch "))?));
    }
    if starts("stats-job ") {
        return Ok(Command::StatsJob(whole_u64(after("stats-job "))?));
    }
    if starts("stats-tube ") {
        return Ok(Command::StatsTube(tube(after("stats-tube "))?));
    }
    if starts("stats") {
        return exact(Command::Stats, "stats");
    }
    if starts("use ") {
        return Ok(Command::Use(tube(after("use "))?));
    }
    if starts("watch ") {
        return Ok(Command::Watch(tube(after("watch "))?));
    }
    if starts("ignore ") {
        return Ok(Command::Ignore(tube(after("ignore "))?));
    }
    if starts("list-tubes-watched") {
        return exact(Command::ListTubesWatched, "list-tubes-watched");
    }
    if starts("list-tube-used") {
        return exact(Command::ListTubeUsed, "list-tube-used");
    }
    if starts("list-tubes") {
        return exact(Command::ListTubes, "list-tubes");
    }
    if starts("quit") {
        return Ok(Command::Quit);
    }
    if starts("pause-tube") {
        let rest = skip_spaces(after("pause-tube"));
        let len = rest
            .iter()
            .take_while(|&&c| c.is_ascii_alphanumeric() || b"-+/;.$_()".contains(&c))
            .count();
        if len == 0 {
            return Err(BadFormat);
        }
        let (name, rest) = rest.split_at(len);
        let (delay, rest) = read_u32(rest).ok_or(BadFormat)?;
        if !rest.is_empty() {
            return Err(BadFormat);
        }
        let name = String::from_utf8(name.to_vec()).expect("tube-name characters are ASCII");
        return Ok(Command::PauseTube(name, delay));
    }
    Err(Refused::Unknown)
}

/// A tube name as the whole of `s`.
fn tube(s: &[u8]) -> Result<String, Refused> {
    if !is_tube_name(s) {
        return Err(Refused::BadFormat);
    }
    Ok(String::from_utf8(s.to_vec()).expect("tube names are ASCII"))
}

fn skip_spaces(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&c| c == b' ').count();
    &s[n..]
}

/// beanstalkd's `read_u64`: spaces, then at least one digit; the value must fit. Returns the value and
/// what follows its digits.
fn read_u64(s: &[u8]) -> Option<(u64, &[u8])> {
    let s = skip_spaces(s);
    let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let v = std::str::from_utf8(&s[..digits]).ok()?.parse::<u64>().ok()?;
    Some((v, &s[digits..]))
}

/// `read_u64` for a value that must fit in 32 bits.
fn read_u32(s: &[u8]) -> Option<(u32, &[u8])> {
    let (v, rest) = read_u64(s)?;
    Some((u32::try_from(v).ok()?, rest))
}

/// `read_u64` of the whole of `s`.
fn whole_u64(s: &[u8]) -> Result<u64, Refused> {
    match read_u64(s) {
        Some((v, [])) => Ok(v),
        _ => Err(Refused::BadFormat),
    }
}

/// C's `strtol` (base 10): white space, a sign, digits (none: 0), anything after; `None` when the value
/// is past a 64-bit long (`ERANGE`).
fn strtol(s: &[u8]) -> Option<i64> {
    let n = s.iter().take_while(|c| c.is_ascii_whitespace()).count();
    let mut s = &s[n..];
    let negative = s.first() == Some(&b'-');
    if matches!(s.first(), Some(b'-' | b'+')) {
        s = &s[1..];
    }
    let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return Some(0);
    }
    let v: i128 = std::str::from_utf8(&s[..digits]).ok()?.parse().ok()?;
    let v = if negative { -v } else { v };
    i64::try_from(v).ok()
}

/// C's `strtoul` (base 10) as `kick` reads its bound: white space, a sign, digits, anything after;
/// the value is then cut to 32 bits, as beanstalkd's `uint` count is.
fn strtoul(s: &[u8]) -> Option<u32> {
    let n = s.iter().take_while(|c| c.is_ascii_whitespace()).count();
    let mut s = &s[n..];
    let negative = s.first() == Some(&b'-');
    if matches!(s.first(), Some(b'-' | b'+')) {
        s = &s[1..];
    }
    let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let v = std::str::from_utf8(&s[..digits]).ok()?.parse::<u64>().ok()?;
    let v = if negative { v.wrapping_neg() } else { v };
    Some(v as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_like_beanstalkd() {
        assert_eq!(
            parse(b"reserve"),
            Ok(Command::Reserve {
                timeout: None,
                with_timeout: false
            })
        );
        assert_eq!(parse(b"reserve "), Err(Refused::BadFormat));
        assert_eq!(
            parse(b"reserve-with-timeout 5x"),
            Ok(Command::Reserve {
                timeout: Some(5),
                with_timeout: true
            })
        );
        assert_eq!(
            parse(b"reserve-with-timeout x"),
            Ok(Command::Reserve {
                timeout: Some(0),
                with_timeout: true
            })
        );
        assert_eq!(
            parse(b"reserve-with-timeout -1"),
            Ok(Command::Reserve {
                timeout: None,
                with_timeout: true
            })
        );
        assert_eq!(
            parse(b"reserve-with-timeout 99999999999999999999"),
            Err(Refused::BadFormat)
        );
        assert_eq!(parse(b"delete  7"), Ok(Command::Delete(7)));
        assert_eq!(parse(b"delete 7 "), Err(Refused::BadFormat));
        assert_eq!(parse(b"delete 18446744073709551616"), Err(Refused::BadFormat));
        assert_eq!(parse(b"release 1 2 3"), Ok(Command::Release(1, 2, 3)));
        assert_eq!(parse(b"release 1 4294967296 3"), Err(Refused::BadFormat));
        assert_eq!(parse(b"kick 10 more"), Ok(Command::Kick(10)));
        assert_eq!(parse(b"kick -1"), Ok(Command::Kick(u32::MAX)));
        assert_eq!(parse(b"kick x"), Err(Refused::BadFormat));
        assert_eq!(parse(b"use a+b/c"), Ok(Command::Use("a+b/c".into())));
        assert_eq!(parse(b"use -a"), Err(Refused::BadFormat));
        assert_eq!(parse(b"use  a"), Err(Refused::BadFormat));
        assert_eq!(parse(b"pause-tube a 10"), Ok(Command::PauseTube("a".into(), 10)));
        assert_eq!(parse(b"pause-tube -a 10"), Ok(Command::PauseTube("-a".into(), 10)));
        assert_eq!(parse(b"quitting"), Ok(Command::Quit));
        assert_eq!(parse(b"statsx"), Err(Refused::BadFormat));
        assert_eq!(parse(b"frob"), Err(Refused::Unknown));
        assert_eq!(parse(b"peek 1\0"), Err(Refused::BadFormat));
        assert_eq!(
            put_line(b"put 1 2 3 4", 10),
            Ok(PutLine {
                priority: 1,
                delay: 2,
                ttr: 3,
                size: 4
            })
        );
        assert_eq!(put_line(b"put 1 2 3 11 x", 10), Err(PutError::TooBig(11)));
        assert_eq!(put_line(b"put 1 2 3 4 x", 10), Err(PutError::Trailing));
        assert_eq!(put_line(b"put 1 2 3", 10), Err(PutError::BadFormat));
    }
}
