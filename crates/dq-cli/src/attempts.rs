//! A job's delivery attempts for people (`dq get ID --attempts`): one line each, newest first, so that a
//! job that keeps failing shows how each try ended and who made it, not only its last error.

use dq_client::{Attempt, Attempts};

use crate::output::{duration, one_line, table, time};

/// The longest error or answer a line shows (characters); `--json` shows them whole.
const TEXT_CHARS: usize = 60;

/// The attempts as a table, newest first, or a sentence when there is none to show.
pub fn attempts_table(attempts: &Attempts) -> String {
    let history = &attempts.history;
    if history.is_empty() {
        return match attempts.attempts {
            0 => "no delivery yet".into(),
            1 => "1 delivery, not on record (see `jobs.attempt_history`)".into(),
            n => format!("{n} deliveries, none on record (see `jobs.attempt_history`)"),
        };
    }
    let rows = history.iter().map(row).collect();
    let table = table(
        &[
            "#",
            "outcome",
            "started",
            "duration",
            "status",
            "consumer",
            "error / answer",
        ],
        &["#", "duration", "status"],
        rows,
    );
    // Older attempts than the kept ones are counted by the job only.
    if (history.len() as u64) < u64::from(attempts.attempts) {
        format!(
            "{table}\nthe newest {} of {} attempts",
            history.len(),
            attempts.attempts
        )
    } else {
        table
    }
}

/// One attempt's cells. A failure's error comes before the callback's answer: for a failed callback it
/// already holds the answer's start.
fn row(a: &Attempt) -> Vec<String> {
    let dash = || "-".to_string();
    vec![
        a.attempt.to_string(),
        a.outcome.as_str().into(),
        time(a.started_at),
        duration(a.duration_ms),
        a.status.map_or_else(dash, |s| s.to_string()),
        a.consumer.clone().unwrap_or_else(dash),
        a.error
            .as_deref()
            .or(a.answer.as_deref())
            .map_or_else(dash, |t| one_line(t, TEXT_CHARS)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use dq_client::Outcome;

    fn attempt(n: u32, outcome: Outcome) -> Attempt {
        Attempt {
            attempt: n,
            started_at: 1_735_689_600_000,
            duration_ms: 1500,
            outcome,
            status: None,
            error: None,
            answer: None,
            consumer: None,
        }
    }

    #[test]
    fn a_line_each_the_error_before_the_answer() {
        let mut failed = attempt(2, Outcome::Failed);
        failed.status = Some(500);
        failed.error = Some("HTTP 500: oops\nat line 2".into());
        failed.answer = Some("oops\nat line 2".into());
        failed.consumer = Some("host:42".into());
        let text = attempts_table(&Attempts {
            id: "j".into(),
            attempts: 3,
            history: vec![failed, attempt(1, Outcome::Expired)],
        });
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("2025-01-01")).collect();
        assert_eq!(lines.len(), 2, "{text}");
        for (line, want) in lines.iter().zip([
            ["2", "failed", "1.5s", "500", "host:42", "HTTP 500: oops at line 2"],
            ["1", "expired", "1.5s", "-", "-", "-"],
        ]) {
            for w in want {
                assert!(line.contains(w), "{w}: {line}");
            }
        }
        assert!(text.ends_with("the newest 2 of 3 attempts"), "{text}");
    }

    #[test]
    fn no_attempt_says_why() {
        let none = |attempts| Attempts {
            id: "j".into(),
            attempts,
            history: Vec::new(),
        };
        assert_eq!(attempts_table(&none(0)), "no delivery yet");
        assert!(attempts_table(&none(4)).contains("none on record"));
    }
}
