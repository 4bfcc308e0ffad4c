//! Which counter series a process serves: every counter from the start, at 0, and a topic's counters
//! from the moment the topic is registered, so a dashboard tells "none" from "not measured" and an
//! alert rule's series exists before its first event (`increase()` cannot see a series' first value);
//! and the counters of a topic whose registration was deleted left out of `/metrics` until the topic
//! is registered again or counts something again, so topics used once are not carried forever.
//!
//! metrics-exporter-prometheus cannot remove a series, so [`render`] leaves a forgotten topic's
//! counter and histogram lines out of what it renders. Gauges are never left out: they say what is
//! (dq-checker's depths), not what happened.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

/// A counter and the values each of its labels (other than `topic`) takes; served at 0 for every
/// combination.
#[derive(Debug, Clone, Copy)]
pub struct Counter {
    /// The metric's name.
    pub name: &'static str,
    /// Each label with every value it takes.
    pub labels: &'static [(&'static str, &'static [&'static str])],
}

impl Counter {
    /// A counter without labels.
    pub const fn plain(name: &'static str) -> Counter {
        Counter { name, labels: &[] }
    }

    /// A counter with `labels`.
    pub const fn labelled(name: &'static str, labels: &'static [(&'static str, &'static [&'static str])]) -> Counter {
        Counter { name, labels }
    }

    /// Every combination of label values, each with `extra` (a topic) first.
    fn series(&self, extra: &[(&'static str, String)]) -> Vec<Vec<metrics::Label>> {
        let mut all: Vec<Vec<metrics::Label>> =
            vec![extra.iter().map(|(k, v)| metrics::Label::new(*k, v.clone())).collect()];
        for (key, values) in self.labels {
            all = all
                .into_iter()
                .flat_map(|base| {
                    values.iter().map(move |v| {
                        let mut labels = base.clone();
                        labels.push(metrics::Label::new(*key, *v));
                        labels
                    })
                })
                .collect();
        }
        all
    }

    /// Serves every combination at 0 (with `extra` labels), in the process's recorder (installed now if
    /// it is not yet: a counter touched before that would go nowhere).
    fn zero(&self, extra: &[(&'static str, String)]) {
        crate::telemetry::prometheus();
        for labels in self.series(extra) {
            metrics::counter!(self.name, labels).increment(0);
        }
    }
}

/// What the queue's verbs count, in whichever process calls them.
pub const QUEUE: &[Counter] = &[
    Counter::plain("dq_jobs_acked_total"),
    Counter::plain("dq_jobs_nacked_total"),
    Counter::plain("dq_jobs_dead_total"),
    Counter::plain("dq_writes_not_replicated_total"),
];

/// What the queue's verbs count per topic: pushes (dq-server) and reservations (dq-server, and
/// dq-consumer for its topics).
pub const QUEUE_PER_TOPIC: &[Counter] = &[
    Counter::plain("dq_jobs_pushed_total"),
    Counter::plain("dq_jobs_deduplicated_total"),
    Counter::labelled("dq_jobs_coalesced_total", &[("mode", &["last", "merge"])]),
    Counter::plain("dq_jobs_reserved_total"),
];

/// Serves `counters` at 0: call at start with every counter the process may count.
pub fn serve_from_start(counters: &[Counter]) {
    for c in counters {
        c.zero(&[]);
    }
}

/// Serves `counters` at 0 for `topic` alone (what a process counts only for some topics: dq-consumer's
/// deliveries for the topics it delivers).
pub fn serve_for_topic(topic: &str, counters: &[Counter]) {
    for c in counters {
        c.zero(&[("topic", topic.to_string())]);
    }
}

/// What the process knows of topics.
#[derive(Default)]
struct Topics {
    /// Counters served per registered topic.
    per_topic: Vec<Counter>,
    /// The registered topics, as last told.
    registered: BTreeSet<String>,
    /// Topics whose registration went, with what their counter lines were then (series → value): left
    /// out of `/metrics` while they stay so.
    forgotten: HashMap<String, HashMap<String, String>>,
}

static TOPICS: Mutex<Option<Topics>> = Mutex::new(None);

fn with_topics<T>(f: impl FnOnce(&mut Topics) -> T) -> T {
    let mut guard = TOPICS.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(Topics::default))
}

/// Serves `counters` at 0 for every registered topic, now and as topics are registered: the
/// counters this process counts per topic.
pub fn serve_per_topic(counters: &[Counter]) {
    let topics: Vec<String> = with_topics(|t| {
        t.per_topic.extend_from_slice(counters);
        t.registered.iter().cloned().collect()
    });
    for topic in topics {
        for c in counters {
            c.zero(&[("topic", topic.clone())]);
        }
    }
}

/// The registered topics now (the whole registry, as read): a new one gets its counters at 0, and one
/// whose registration went has its counters left out of `/metrics` from now on.
pub fn registered<'a>(topics: impl IntoIterator<Item = &'a String>) {
    let now: BTreeSet<String> = topics.into_iter().cloned().collect();
    let (added, gone, per_topic) = with_topics(|t| {
        let added: Vec<String> = now.difference(&t.registered).cloned().collect();
        let gone: Vec<String> = t.registered.difference(&now).cloned().collect();
        for topic in &added {
            t.forgotten.remove(topic);
        }
        t.registered = now;
        (added, gone, t.per_topic.clone())
    });
    for topic in &added {
        for c in &per_topic {
            c.zero(&[("topic", topic.clone())]);
        }
    }
    if !gone.is_empty() {
        let text = crate::telemetry::prometheus().render();
        let snapshot = counter_lines(&text);
        with_topics(|t| {
            for topic in gone {
                let lines = snapshot
                    .iter()
                    .filter(|l| l.topic == topic)
                    .map(|l| (l.series.to_string(), l.value.to_string()))
                    .collect();
                t.forgotten.insert(topic, lines);
            }
        });
    }
}

/// What `/metrics` serves: the recorder's text without the counters of forgotten topics. A forgotten
/// topic that counted something since (a line that changed, or a new one) is served again.
pub fn render() -> String {
    let text = crate::telemetry::prometheus().render();
    let hidden: BTreeSet<String> = with_topics(|t| {
        if t.forgotten.is_empty() {
            return BTreeSet::new();
        }
        let lines = counter_lines(&text);
        let active: BTreeSet<&str> = lines
            .iter()
            .filter(|l| {
                t.forgotten
                    .get(l.topic)
                    .is_some_and(|then| then.get(l.series).map(String::as_str) != Some(l.value))
            })
            .map(|l| l.topic)
            .collect();
        for topic in &active {
            t.forgotten.remove(*topic);
        }
        t.forgotten.keys().cloned().collect()
    });
    if hidden.is_empty() {
        return text;
    }
    let dropped: BTreeSet<usize> = counter_lines(&text)
        .iter()
        .filter(|l| hidden.contains(l.topic))
        .map(|l| l.at)
        .collect();
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.lines().enumerate() {
        if !dropped.contains(&i) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A sample line of a counter or histogram that has a `topic` label.
struct Line<'a> {
    /// Its index among the text's lines.
    at: usize,
    /// Its name and labels.
    series: &'a str,
    /// Its value.
    value: &'a str,
    /// The `topic` label's value.
    topic: &'a str,
}

/// The counter and histogram sample lines of a Prometheus text that carry a `topic` label (topic
/// names need no escaping: `[A-Za-z0-9_.-]`).
fn counter_lines(text: &str) -> Vec<Line<'_>> {
    let mut kind = "";
    let mut out = Vec::new();
    for (at, line) in text.lines().enumerate() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            kind = rest.rsplit(' ').next().unwrap_or("");
            continue;
        }
        if line.starts_with('#') || !matches!(kind, "counter" | "histogram") {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some(start) = series.find("topic=\"").map(|i| i + 7) else {
            continue;
        };
        // `topic=` must start a label, not end another's name (`subtopic=`).
        if !matches!(series.as_bytes().get(start - 8), Some(b'{' | b',')) {
            continue;
        }
        let Some(len) = series[start..].find('"') else { continue };
        out.push(Line {
            at,
            series,
            value,
            topic: &series[start..start + len],
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE dq_jobs_pushed_total counter\n\
dq_jobs_pushed_total{topic=\"a\"} 3\n\
dq_jobs_pushed_total{topic=\"b\"} 0\n\
# TYPE dq_queue_depth gauge\n\
dq_queue_depth{topic=\"a\",state=\"ready\"} 1\n\
# TYPE dq_callback_duration_seconds histogram\n\
dq_callback_duration_seconds_bucket{topic=\"a\",le=\"0.5\"} 2\n\
dq_callback_duration_seconds_sum{topic=\"a\"} 0.2\n\
# TYPE dq_alerts_total counter\n\
dq_alerts_total{kind=\"backlog\",subtopic=\"a\"} 1\n";

    #[test]
    fn counter_and_histogram_lines_with_a_topic_are_found() {
        let lines = counter_lines(TEXT);
        let found: Vec<(usize, &str, &str)> = lines.iter().map(|l| (l.at, l.topic, l.value)).collect();
        assert_eq!(
            found,
            vec![(1, "a", "3"), (2, "b", "0"), (6, "a", "2"), (7, "a", "0.2")]
        );
    }

    #[test]
    fn every_combination_of_label_values_is_a_series() {
        let c = Counter::labelled("x", &[("a", &["1", "2"]), ("b", &["y", "z"])]);
        let series = c.series(&[("topic", "t".into())]);
        assert_eq!(series.len(), 4);
        assert!(series.iter().all(|s| s[0].key() == "topic" && s.len() == 3));
        assert_eq!(Counter::plain("y").series(&[]), vec![Vec::<metrics::Label>::new()]);
    }
}
