//! The Grafana dashboard `deploy/grafana/dq.json` is a dashboard Grafana can import (one Prometheus data
//! source variable, panels on its grid) whose queries read only metrics docs/metrics.md documents, each
//! as its type allows: `_bucket` of histograms, `rate` and `increase` of counters and histogram series.
//! That the binaries really serve them is checked by `metrics.rs`, against their scrapes after traffic.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::dashboard::{self, base_name, metrics_in};

/// Metric name → type (`counter`, `gauge`, `histogram`), from the tables of docs/metrics.md.
fn documented() -> BTreeMap<String, String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md");
    let doc = std::fs::read_to_string(path).unwrap();
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `dq_"))
        .filter_map(|rest| {
            let mut cells = rest.split('|');
            let name = cells.next()?.trim().trim_end_matches('`');
            Some((format!("dq_{name}"), cells.next()?.trim().to_string()))
        })
        .collect()
}

/// Prometheus's own per-target series, which the dashboard reads for the scrape jobs of
/// deploy/prometheus/scrape.yml.
const PROMETHEUS_OWN: [&str; 1] = ["up"];

#[test]
fn the_query_lexer_finds_metrics_and_nothing_else() {
    let q = r#"histogram_quantile(0.99, sum by (topic, le) (rate(dq_a_bucket{topic=~"$topic", x="by (y)"}[$__rate_interval])))
        / on (topic) group_left (node) max without (instance) (dq_b offset 1h) > bool 0.5e3
        or vector(0) unless dq_c:rate5m and time() - dq_d > Inf"#;
    assert_eq!(metrics_in(q), ["dq_a_bucket", "dq_b", "dq_c:rate5m", "dq_d"]);
    assert_eq!(metrics_in("label_values(dq_queue_depth, topic)"), ["dq_queue_depth"]);
    assert_eq!(metrics_in(r#"up{job=~"dq-server|dq-timer"}"#), ["up"]);
}

#[test]
fn the_dashboard_reads_only_documented_metrics_as_their_types_allow() {
    let board = dashboard::load();
    let documented = documented();
    assert!(
        documented.len() > 30,
        "read the metrics of docs/metrics.md: {documented:?}"
    );
    let names = dashboard::metric_names(&board);
    for name in &names {
        if PROMETHEUS_OWN.contains(&name.as_str()) {
            continue;
        }
        let (base, suffixed) = base_name(name);
        match documented.get(base).map(String::as_str) {
            Some("histogram") if suffixed => {}
            Some("histogram") => panic!("{name} is a histogram: query its _bucket, _sum or _count series"),
            Some(_) if suffixed => assert!(documented.contains_key(name), "{name} is not documented"),
            Some(_) => {}
            None => panic!("deploy/grafana/dq.json reads {name}, which docs/metrics.md does not document"),
        }
    }
    // rate() and increase() only over what only goes up: counters and histogram series.
    for (place, query) in dashboard::queries(&board) {
        for (at, _) in query.match_indices("rate(").chain(query.match_indices("increase(")) {
            let boundary = query[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            if !boundary {
                continue; // irate( is checked where its own match starts
            }
            let inner = &query[at..];
            let first = metrics_in(&inner[inner.find('(').unwrap() + 1..]);
            let name = first.first().unwrap_or_else(|| panic!("{place}: no metric in {query}"));
            let (base, suffixed) = base_name(name);
            let kind = documented.get(base).map(String::as_str);
            assert!(
                kind == Some("counter") || (kind == Some("histogram") && suffixed),
                "{place}: rate/increase over {name}, a {kind:?}: {query}"
            );
        }
    }
    // It covers what an operator looks at first.
    for wanted in [
        "dq_jobs_pushed_total",
        "dq_jobs_reserved_total",
        "dq_jobs_acked_total",
        "dq_promotion_lateness_seconds_bucket",
        "dq_delivery_lateness_seconds_bucket",
        "dq_queue_depth",
        "dq_oldest_ready_age_seconds",
        "dq_deliveries_total",
        "dq_callback_duration_seconds_bucket",
        "dq_redis_up",
        "dq_redis_latency_seconds",
        "dq_redis_used_memory_bytes",
        "dq_timer_partitions_owned",
    ] {
        assert!(
            names.contains(wanted),
            "the dashboard shows {wanted}: it reads {names:?}"
        );
    }
}

#[test]
fn the_dashboard_is_one_grafana_can_import() {
    let board = dashboard::load();
    assert!(
        board["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "a current dashboard schema"
    );
    assert!(board["uid"].as_str().is_some_and(|u| !u.is_empty() && u.len() <= 40));
    assert!(board["title"].as_str().is_some_and(|t| !t.is_empty()));
    let vars = board["templating"]["list"].as_array().expect("templating.list");
    let datasource = vars
        .iter()
        .find(|v| v["name"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(datasource["type"], "datasource");
    assert_eq!(datasource["query"], "prometheus");

    let mut ids = BTreeSet::new();
    let panels = dashboard::panels(&board);
    assert!(panels.len() > 10, "{} panels", panels.len());
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(!title.is_empty(), "every panel has a title: {panel}");
        assert!(
            ids.insert(panel["id"].as_u64().expect("a numeric id")),
            "panel ids are unique: {title}"
        );
        let grid = &panel["gridPos"];
        let (x, w) = (grid["x"].as_u64().unwrap(), grid["w"].as_u64().unwrap());
        assert!(
            w > 0 && x + w <= 24 && grid["h"].as_u64().unwrap() > 0,
            "{title}: on the 24-column grid"
        );
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{title}: reads the chosen data source"
        );
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: has queries");
        let mut refs = BTreeSet::new();
        for target in targets {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            assert!(
                refs.insert(target["refId"].as_str().unwrap()),
                "{title}: refIds are unique"
            );
            let expr = target["expr"].as_str().unwrap_or_default();
            assert!(!metrics_in(expr).is_empty(), "{title}: {expr:?} reads a metric");
            assert_eq!(
                expr.matches('(').count(),
                expr.matches(')').count(),
                "{title}: balanced parentheses in {expr}"
            );
        }
    }
}
