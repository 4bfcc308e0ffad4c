//! One trace from the producer's span through dq, with the real processes and a real OTLP receiver: a
//! job pushed with a `traceparent` shows up, in the producer's trace, as dq-server's push span (a child
//! of the producer's), dq-timer's promotion and dq-consumer's delivery attempts (children of the push),
//! exported over OTLP/HTTP in protobuf and decoded here with the `opentelemetry-proto` definitions; the
//! callback receives a `traceparent` of the same trace naming the attempt's span. Jobs without a trace
//! context, or in an unsampled trace, make no span; the latter's callback gets its `traceparent` as sent.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use common::{env, start_on};
use dq_harness::{HookSink, RedisServer, eventually, free_port};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use serde_json::{Value, json};

/// The producer's trace, and its span the push hangs from.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";

/// A span as the receiver decoded it.
#[derive(Debug, Clone)]
struct Received {
    /// The exporting binary (`service.name`).
    service: String,
    name: String,
    trace: String,
    id: String,
    parent: String,
    attributes: HashMap<String, Value>,
}

fn value(v: &Option<AnyValue>) -> Value {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        other => json!(format!("{other:?}")),
    }
}

fn attributes(kvs: &[KeyValue]) -> HashMap<String, Value> {
    kvs.iter().map(|kv| (kv.key.clone(), value(&kv.value))).collect()
}

/// An OTLP/HTTP receiver (`POST /v1/traces`, protobuf) keeping every span it decodes.
async fn receiver() -> (String, Arc<Mutex<Vec<Received>>>) {
    let spans: Arc<Mutex<Vec<Received>>> = Arc::default();
    let kept = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let kept = kept.clone();
            async move {
                let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                    return (StatusCode::BAD_REQUEST, Vec::new());
                };
                let mut got = kept.lock().unwrap();
                for rs in request.resource_spans {
                    let resource = attributes(&rs.resource.map(|r| r.attributes).unwrap_or_default());
                    let service = resource["service.name"].as_str().unwrap_or("").to_string();
                    for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                        got.push(Received {
                            service: service.clone(),
                            name: span.name,
                            trace: hex(&span.trace_id),
                            id: hex(&span.span_id),
                            parent: hex(&span.parent_span_id),
                            attributes: attributes(&span.attributes),
                        });
                    }
                }
                (StatusCode::OK, ExportTraceServiceResponse::default().encode_to_vec())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, spans)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The spans received for job `id`.
fn of_job(spans: &Arc<Mutex<Vec<Received>>>, id: &str) -> Vec<Received> {
    let spans = spans.lock().unwrap();
    spans
        .iter()
        .filter(|s| s.attributes.get("dq.job.id") == Some(&json!(id)))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_job_is_one_trace_from_push_to_callback() {
    let redis = RedisServer::start();
    let (otlp, spans) = receiver().await;
    let vars = |port: u16| {
        let mut v = env(&[&redis], port);
        v.push(("DQ__TELEMETRY__OTLP_ENDPOINT", otlp.clone()));
        v.push(("DQ__TOPICS__REFRESH_MS", "100".into()));
        // Export every 100 ms rather than 5 s, so the test waits less.
        v.push(("OTEL_BSP_SCHEDULE_DELAY", "100".into()));
        v
    };
    let (sp, tp, cp) = (free_port(), free_port(), free_port());
    let mut server = start_on("dq-server", sp, vars(sp)).await;
    let mut timer = start_on("dq-timer", tp, vars(tp)).await;
    let mut consumer = start_on("dq-consumer", cp, vars(cp)).await;
    let base = format!("http://127.0.0.1:{sp}");
    let http = reqwest::Client::new();

    // The traced topic's callback fails once, so the job has two attempts.
    let traced_sink = HookSink::start_failing(1).await;
    let plain_sink = HookSink::start_failing(0).await;
    for (topic, sink) in [("traced", &traced_sink), ("plain", &plain_sink)] {
        let resp = http
            .put(format!("{base}/v1/topics/{topic}"))
            .json(&json!({"callback": {"url": sink.url}, "retry": {"backoff_ms": [200]}}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    }
    let push = |body: Value, headers: Vec<(&'static str, String)>| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let mut req = http.post(format!("{base}/v1/jobs")).json(&body);
            for (k, v) in headers {
                req = req.header(k, v);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 201);
            resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string()
        }
    };
    let producer = format!("00-{TRACE}-{PRODUCER_SPAN}-01");
    // Due in a second: the timer promotes it (or hands it to the waiting consumer).
    let traced = push(
        json!({"topic": "traced", "body": {"order": 42}, "delay_ms": 1000}),
        vec![
            ("traceparent", producer.clone()),
            ("tracestate", "congo=t61rcWkgMzE".into()),
        ],
    )
    .await;
    let unsampled_tp = format!("00-{TRACE}-{PRODUCER_SPAN}-00");
    let unsampled = push(
        json!({"topic": "plain", "body": 1, "traceparent": unsampled_tp}),
        vec![],
    )
    .await;
    let untraced = push(json!({"topic": "plain", "body": 2, "delay_ms": 500}), vec![]).await;

    // The callback's two requests, and the spans of push, promotion and both attempts.
    eventually(Duration::from_secs(60), "two deliveries of the traced job", || async {
        traced_sink.received().len() >= 2
    })
    .await;
    eventually(Duration::from_secs(60), "the traced job's spans", || async {
        let got = of_job(&spans, &traced);
        ["push traced", "promote traced"]
            .iter()
            .all(|n| got.iter().any(|s| s.name == *n))
            && got.iter().filter(|s| s.name == "deliver traced").count() >= 2
    })
    .await;
    eventually(Duration::from_secs(60), "the plain jobs' deliveries", || async {
        plain_sink.accepted().len() >= 2
    })
    .await;

    let lookup = || async {
        let resp = http.get(format!("{base}/v1/jobs/{traced}")).send().await.unwrap();
        resp.json::<Value>().await.unwrap()
    };
    eventually(Duration::from_secs(60), "the traced job is done", || async {
        lookup().await["state"] == "done"
    })
    .await;
    let job = lookup().await;
    // Stopping flushes what is queued: then every span is in.
    for p in [&mut consumer, &mut timer, &mut server] {
        p.process.signal("TERM");
        assert!(p.process.wait(Duration::from_secs(30)).is_some_and(|s| s.success()));
    }
    let got = of_job(&spans, &traced);
    assert!(
        got.iter().all(|s| s.trace == TRACE),
        "all in the producer's trace: {got:#?}"
    );
    let named = |name: &str| -> Vec<Received> {
        let mut found: Vec<_> = got.iter().filter(|s| s.name == name).cloned().collect();
        found.sort_by_key(|s| s.attributes.get("dq.attempt").and_then(Value::as_i64));
        found
    };
    let pushes = named("push traced");
    assert_eq!(pushes.len(), 1, "{got:#?}");
    let push_span = &pushes[0];
    assert_eq!(
        (push_span.service.as_str(), push_span.parent.as_str()),
        ("dq-server", PRODUCER_SPAN)
    );
    assert_eq!(push_span.attributes["dq.topic"], "traced");
    assert_eq!(push_span.attributes["http.response.status_code"], 201);
    // Promoted twice: when first due, and after the failed attempt's backoff.
    let promotions = named("promote traced");
    assert_eq!(promotions.len(), 2, "{got:#?}");
    for p in &promotions {
        assert_eq!(
            (p.service.as_str(), p.parent.as_str()),
            ("dq-timer", push_span.id.as_str())
        );
        assert!(p.attributes["dq.lateness_ms"].as_i64().unwrap() >= 0);
    }
    let deliveries = named("deliver traced");
    assert_eq!(deliveries.len(), 2, "{got:#?}");
    for (n, (d, status)) in deliveries.iter().zip([500, 200]).enumerate() {
        assert_eq!(
            (d.service.as_str(), d.parent.as_str()),
            ("dq-consumer", push_span.id.as_str())
        );
        assert_eq!(d.attributes["dq.attempt"], n as i64 + 1);
        assert_eq!(d.attributes["http.response.status_code"], status);
    }
    assert_eq!(deliveries[0].attributes["dq.outcome"], "http_error");
    assert_eq!(deliveries[1].attributes["dq.outcome"], "ok");

    // Each callback request names its attempt's span, in the same trace, with the tracestate.
    let requests = traced_sink.received();
    for (r, d) in requests.iter().zip(&deliveries) {
        assert_eq!(r.header("traceparent"), format!("00-{TRACE}-{}-01", d.id));
        assert_eq!(r.header("tracestate"), "congo=t61rcWkgMzE");
    }
    // The job stores the push span's context: what follows hangs from the push.
    assert_eq!(job["traceparent"], format!("00-{TRACE}-{}-01", push_span.id));

    // Nothing was exported for the other two jobs.
    assert!(of_job(&spans, &unsampled).is_empty() && of_job(&spans, &untraced).is_empty());
    let sent = plain_sink.accepted();
    let unsampled_request = sent.iter().find(|r| r.json()["id"] == unsampled.as_str()).unwrap();
    assert_eq!(
        unsampled_request.header("traceparent"),
        unsampled_tp,
        "as the producer sent it"
    );
    let untraced_request = sent.iter().find(|r| r.json()["id"] == untraced.as_str()).unwrap();
    assert_eq!(untraced_request.header("traceparent"), "");
}

/// A collector that is down costs spans, never a job: the traced job is delivered all the same, the
/// failure is logged once (not once per batch) and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_spans_not_jobs() {
    let redis = RedisServer::start();
    // A port nothing listens on.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let vars = |port: u16| {
        let mut v = env(&[&redis], port);
        v.push(("DQ__TELEMETRY__OTLP_ENDPOINT", nowhere.clone()));
        v.push(("DQ__TOPICS__REFRESH_MS", "100".into()));
        v.push(("OTEL_BSP_SCHEDULE_DELAY", "100".into()));
        v
    };
    let (sp, cp) = (free_port(), free_port());
    let server = start_on("dq-server", sp, vars(sp)).await;
    let consumer = start_on("dq-consumer", cp, vars(cp)).await;
    let base = format!("http://127.0.0.1:{sp}");
    let http = reqwest::Client::new();
    let sink = HookSink::start_failing(0).await;
    let resp = http
        .put(format!("{base}/v1/topics/t"))
        .json(&json!({"callback": {"url": sink.url}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    for i in 0..5 {
        let resp = http
            .post(format!("{base}/v1/jobs"))
            .header("traceparent", format!("00-{TRACE}-{PRODUCER_SPAN}-01"))
            .json(&json!({"topic": "t", "body": i}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
        // Batches apart, so that several exports fail.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eventually(Duration::from_secs(60), "every job is delivered", || async {
        sink.accepted().len() == 5
    })
    .await;
    eventually(Duration::from_secs(60), "the failures are counted", || async {
        common::metric_sum(cp, "dq_spans_export_failed_total").await >= 2.0
    })
    .await;
    for p in [&server, &consumer] {
        eventually(Duration::from_secs(60), "the failure is logged", || async {
            p.process.log().contains("cannot export spans")
        })
        .await;
        let warned = p.process.log().matches("cannot export spans").count();
        assert_eq!(warned, 1, "logged once a minute at most:\n{}", p.process.log());
    }
}
