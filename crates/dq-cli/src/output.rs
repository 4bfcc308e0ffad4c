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

/// A JSON value on one line, cut to `max` characters for a table cell.
pub fn short(value: &serde_json::Value, max: usize) -> String {
    let text = value.to_string();
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
    fn fields_align() {
        assert_eq!(
            fields(&[("id", "x".into()), ("state", "ready".into())]),
            "id     x\nstate  ready"
        );
    }
}
