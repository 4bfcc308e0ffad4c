//! The Grafana dashboard `deploy/grafana/dq.json`, and the metric names its PromQL queries read.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

/// The dashboard, parsed.
pub fn load() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/dq.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every panel, those inside collapsed rows included.
pub fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        out.push(panel);
        if let Some(inner) = panel["panels"].as_array() {
            out.extend(inner);
        }
    }
    out
}

/// Every PromQL query of the dashboard: each target's `expr`, and each query variable's query, with
/// where it is (for messages).
pub fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in panels(dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default();
            out.push((
                format!("panel {:?} {}", panel["title"], target["refId"]),
                expr.to_string(),
            ));
        }
    }
    for var in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if var["type"] == "query" {
            let query = var["query"]["query"]
                .as_str()
                .or(var["query"].as_str())
                .unwrap_or_default();
            out.push((format!("variable {}", var["name"]), query.to_string()));
        }
    }
    out
}

/// Every metric the dashboard reads, as written (`…_bucket` included).
pub fn metric_names(dashboard: &Value) -> BTreeSet<String> {
    queries(dashboard).iter().flat_map(|(_, q)| metrics_in(q)).collect()
}

/// PromQL words that are not metric names when not followed by `(`.
const KEYWORDS: [&str; 11] = [
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
];

/// Aggregation operators, which may be followed by `by (…)` or `without (…)` before their `(`.
const AGGREGATIONS: [&str; 12] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

/// Words whose parenthesised list that follows is of label names, not expressions.
const LABEL_LISTS: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The metric names in a PromQL query (and in Grafana's `label_values(metric, label)`): every name that is
/// neither a function or aggregation (followed by `(`, or an aggregation's `by`), nor a keyword, nor inside a label matcher `{…}`, a
/// range `[…]`, a label list `by (…)`, a string, a number or duration, or a Grafana `$variable`.
pub fn metrics_in(query: &str) -> Vec<String> {
    let chars: Vec<char> = query.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let skip_to = |from: usize, close: char| -> usize {
        let mut j = from + 1;
        while j < chars.len() && chars[j] != close {
            if matches!(chars[j], '"' | '\'' | '`') {
                let quote = chars[j];
                j += 1;
                while j < chars.len() && chars[j] != quote {
                    j += if chars[j] == '\\' { 2 } else { 1 };
                }
            }
            j += 1;
        }
        j + 1
    };
    let next_non_blank = |from: usize| chars[from..].iter().position(|c| !c.is_whitespace()).map(|p| from + p);
    let is_label_values = query.trim_start().starts_with("label_values(");
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = skip_to(i, c),
            '{' => i = skip_to(i, '}'),
            '[' => i = skip_to(i, ']'),
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    i = skip_to(i, '}');
                } else {
                    while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) => {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let followed_by_paren = next_non_blank(i).is_some_and(|j| chars[j] == '(');
                if LABEL_LISTS.contains(&word.as_str()) && followed_by_paren {
                    i = skip_to(next_non_blank(i).unwrap(), ')');
                } else if followed_by_paren
                    || KEYWORDS.contains(&word.as_str())
                    || AGGREGATIONS.contains(&word.as_str())
                    || word.eq_ignore_ascii_case("inf")
                    || word.eq_ignore_ascii_case("nan")
                {
                } else {
                    names.push(word);
                    if is_label_values {
                        // label_values(metric, label): the second argument is a label.
                        break;
                    }
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// `name` without a histogram's series suffix, and whether it had one.
pub fn base_name(name: &str) -> (&str, bool) {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .map_or((name, false), |base| (base, true))
}
