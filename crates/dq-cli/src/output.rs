//! How answers are printed: a table or a list of fields for people, the API's JSON with `--json`.

use comfy_table::presets::UTF8_BORDERS_ONLY;
use comfy_table::{CellAlignment, Table};
use serde::Serialize;

/// Where and how to print.
pub struct Output {
    /// Print JSON instead of tables.
    pub json: bool,
}

impl Output {
    /// Prints `value` as JSON (pretty), whatever the mode: for answers that are JSON by nature.
    pub fn json<T: Serialize>(&self, value: &T) {
        println!("{}", serde_json::to_string_pretty(value).expect("answers are JSON"));
    }

    /// Prints `value` as JSON with `--json`, and `human()` otherwise.
    pub fn either<T: Serialize>(&self, value: &T, human: impl FnOnce()) {
        if self.json { self.json(value) } else { human() }
    }
}

/// A table with `headers`; columns named in `numeric` are right-aligned.
pub fn table(headers: &[&str], numeric: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY).set_header(headers.to_vec());
    for row in rows {
        t.add_row(row);
    }
    for (i, h) in headers.iter().enumerate() {
        if numeric.contains(h)
            && let Some(c) = t.column_mut(i)
        {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t.to_string()
}

/// `name: value` lines, the names aligned.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{k:<width$}  {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A Unix ms time as UTC, to the millisecond.
pub fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// An optional time, `-` when absent.
pub fn maybe_time(ms: Option<i64>) -> String {
    ms.map(time).unwrap_or_else(|| "-".into())
}

/// A duration in ms for people: `350ms`, `1.5s`, `2m05s`, `3h10m` (cut, not rounded).
pub fn duration(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{}.{}s", ms / 1000, ms % 1000 / 100),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// A JSON value on one line, cut to `max` characters for a table cell.
pub fn short(value: &serde_json::Value, max: usize) -> String {
    cut(value.to_string(), max)
}

/// Text from elsewhere (an error, a callback's answer) on one line, every run of whitespace or control
/// characters a space, cut to `max` characters: a table row stays one line.
pub fn one_line(text: &str, max: usize) -> String {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect();
    cut(words.join(" "), max)
}

/// `text` cut to `max` characters, `…` the last when cut.
fn cut(text: String, max: usize) -> String {
    if text.chars().count() <= max {
        return text;
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_in_utc() {
        assert_eq!(time(1_735_689_600_123), "2025-01-01 00:00:00.123Z");
        assert_eq!(maybe_time(None), "-");
    }

    #[test]
    fn long_values_are_cut() {
        let v = serde_json::json!({"order": 42, "note": "a long note about the order"});
        assert_eq!(short(&v, 12).chars().count(), 12);
        assert!(short(&v, 12).ends_with('…'));
        assert_eq!(short(&serde_json::json!(1), 12), "1");
    }

    #[test]
    fn durations_print_in_their_unit() {
        let shown: Vec<String> = [0, 350, 1500, 59_999, 125_000, 11_400_000]
            .into_iter()
            .map(duration)
            .collect();
        assert_eq!(shown, ["0ms", "350ms", "1.5s", "59.9s", "2m05s", "3h10m"]);
    }

    #[test]
    fn other_systems_text_is_one_line() {
        assert_eq!(
            one_line("  HTTP 500:\n<h1>Bad\tgateway</h1>\r\n", 80),
            "HTTP 500: <h1>Bad gateway</h1>"
        );
        assert_eq!(one_line("abcdef", 4), "abc…");
    }

    #[test]
    fn fields_align() {
        assert_eq!(
            fields(&[("id", "x".into()), ("state", "ready".into())]),
            "id     x\nstate  ready"
        );
    }
}
