//! What the handlers check by hand, written into the document: name patterns, the limits of this
//! server's settings, the rules between fields (`delay_ms` xor `run_at`, `dedup_key` with `dedup_ms`),
//! the custom formats (a callback URL, a retry condition, a cron pattern, a time zone) and the error
//! answers every route shares (the guard's, Redis's).
//!
//! Each rule names the schema and field it constrains; [`apply`] panics on a name the document does
//! not have, so a renamed field cannot leave its rule behind silently (`tests/openapi.rs` makes the
//! document).

use dq_core::config::Limits;
use serde_json::{Value, json};

/// A topic name, and a schedule name (`dq_core::job::validate_topic`).
pub const TOPIC: &str = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$";
/// A deduplication, coalescing or flow key (`dq_core::job::validate_key`).
pub const KEY: &str = "^[A-Za-z0-9_.:-]{1,128}$";
/// A job id: a key, or a derived id, `<parent>~<suffix>` (a job another started), at most 512 bytes
/// (`dq_core::job::validate_id`).
pub const ID: &str = "^[A-Za-z0-9_.:-]{1,128}(~[A-Za-z0-9_.:-]{1,128})*$";
/// The id a push gives: the id rule, but not `ack` or `batch`, which name routes
/// (`dq_core::job::validate_new_id`).
const NEW_ID: &str = "^(?!(ack|batch)$)[A-Za-z0-9_.:-]{1,128}$";
/// A job id in a path: `.` and `..` are valid ids, but a URL cannot carry them as a segment (clients
/// remove dot segments), so such a job is reached by push and reserve only; `ack` and `batch` are
/// routes of their own, and no push may give them.
const PATH_ID: &str = "^(?!(\\.\\.?|ack|batch)$)[A-Za-z0-9_.:-]{1,128}(~[A-Za-z0-9_.:-]{1,128})*$";

/// Writes the rules into `doc` (the document as utoipa made it).
pub fn apply(doc: &mut Value, limits: &Limits, now_ms: i64) {
    let max_delay = limits.max_delay_ms;
    let ttr = (limits.min_ttr_ms, limits.max_ttr_ms);
    let _ = now_ms;
    let schemas = &mut doc["components"]["schemas"];

    let job_fields = |s: &mut Value| {
        int(s, "ttr_ms", ttr.0, ttr.1);
        int(s, "max_attempts", 0, limits.max_attempts as u64);
        int(s, "priority", 0, u32::MAX as u64);
    };

    let push = schema(schemas, "PushRequest");
    string(push, "topic", TOPIC);
    string(push, "id", NEW_ID);
    string(push, "dedup_key", KEY);
    string(push, "coalesce_key", KEY);
    string(push, "flow_key", KEY);
    string(push, "traceparent", dq_core::trace::TRACEPARENT_PATTERN);
    tracestate(field(push, "tracestate"));
    int(push, "delay_ms", 0, max_delay);
    run_at(push, max_delay);
    job_fields(push);
    int(push, "dedup_ms", 1, max_delay);
    int(push, "max_age_ms", 1, max_delay);
    backoff(push, "backoff_ms", max_delay);
    any_json(push, "body", limits.max_body_bytes, "413 `payload_too_large`");
    push["allOf"] = json!([
        {"not": given(&["delay_ms", "run_at"]), "description": "at most one of `delay_ms` and `run_at`"},
        {"anyOf": [given(&["dedup_key", "dedup_ms"]), absent(&["dedup_key", "dedup_ms"])],
         "description": "`dedup_key` and `dedup_ms` go together"},
        {"not": given(&["id", "dedup_key"]), "description": "not both `id` and `dedup_key`"},
        {"anyOf": [given(&["coalesce_key", "coalesce"]), absent(&["coalesce_key", "coalesce"])],
         "description": "`coalesce_key` and `coalesce` go together"},
        {"not": given(&["dedup_key", "coalesce_key"]), "description": "not both `dedup_key` and `coalesce_key`"},
        {"not": {"allOf": [given(&["id", "flow_key"]), {"not": mode_is(&["last", "merge"])}]},
         "description": "not both `id` and `flow_key` (but the id an earlier answer named for the key: dq makes the ids of a key's jobs in its place)"},
        {"not": {"allOf": [given(&["id"]), mode_is(&["first"])]},
         "description": "not both `id` and a `first` coalescing key (its window is the idempotency)"},
        {"not": {"allOf": [{"anyOf": [given(&["delay_ms"]), given(&["run_at"])]}, mode_is(&["last", "merge"])]},
         "description": "a `last` or `merge` push is due by its window: no `delay_ms` or `run_at`"},
        {"anyOf": [{"not": given(&["tracestate"])}, given(&["traceparent"])],
         "description": "`tracestate` needs `traceparent`"},
    ]);
    note(
        push,
        "body",
        &format!(
            "With a `merge` coalescing key, at most {} bytes (each item goes into `{{\"items\":[…]}}`).",
            limits.max_body_bytes - dq_core::coalesce::MERGE_FRAME_BYTES
        ),
    );
    let coalesce = schema(schemas, "Coalesce");
    int(coalesce, "window_ms", 1, max_delay);
    int(coalesce, "max_wait_ms", 1, max_delay);
    int(coalesce, "max_items", 1, dq_core::coalesce::MAX_ITEMS as u64);
    coalesce["allOf"] = json!([
        {"anyOf": [{"properties": {"mode": {"const": "last"}}}, absent(&["max_wait_ms"])],
         "description": "`max_wait_ms` with mode `last` only"},
        {"anyOf": [{"properties": {"mode": {"const": "merge"}}}, absent(&["max_items"])],
         "description": "`max_items` with mode `merge` only"},
    ]);

    let batch = schema(schemas, "BatchRequest");
    items(batch, "jobs", 1, limits.max_batch);

    let reschedule = schema(schemas, "RescheduleRequest");
    int(reschedule, "delay_ms", 0, max_delay);
    run_at(reschedule, max_delay);
    int(reschedule, "priority", 0, u32::MAX as u64);
    // Rules between fields go in `allOf`: a generated client (openapi-python-client) reads a top-level
    // `oneOf`/`anyOf` as a union of other types, and loses the object's own fields.
    reschedule["allOf"] = json!([
        {"oneOf": [given(&["delay_ms"]), given(&["run_at"]),
                   {"allOf": [given(&["priority"]), absent(&["delay_ms", "run_at"])]}],
         "description": "a new due time (`delay_ms` or `run_at`, not both), a new `priority`, or both"},
    ]);

    let reserve = schema(schemas, "ReserveRequest");
    items(reserve, "topics", 1, limits.max_reserve_topics);
    reserve["properties"]["topics"]["items"]["pattern"] = TOPIC.into();
    int(reserve, "count", 1, limits.max_reserve_count as u64);
    int(reserve, "timeout_ms", 0, limits.max_reserve_timeout_ms);

    for name in ["AckRequest", "AckEntry", "NackRequest", "TouchRequest"] {
        length(schema(schemas, name), "receipt", 1, 128);
    }
    for name in ["AckRequest", "AckEntry", "NackRequest"] {
        let s = schema(schemas, name);
        length(s, "consumer", 1, dq_core::attempt::MAX_CONSUMER_CHARS as u64);
        field(s, "consumer")["pattern"] = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$".into();
    }
    string(schema(schemas, "AckEntry"), "id", ID);
    let ack = schema(schemas, "AckRequest");
    items(ack, "push", 0, dq_core::graph::MAX_PUSHES);
    ack["properties"]["push"]["items"] = json!({
        "allOf": [{"$ref": "#/components/schemas/PushRequest"},
                  {"not": {"anyOf": [given(&["id"]), given(&["dedup_key"]), given(&["coalesce_key"]), given(&["flow_key"])]}}],
        "description": "A push without `id` (the job's is `<acked id>~<index>`), `dedup_key`, `coalesce_key` or `flow_key`."
    });
    items(schema(schemas, "AckManyRequest"), "acks", 1, limits.max_batch);
    let nack = schema(schemas, "NackRequest");
    int(nack, "delay_ms", 0, max_delay);
    // `limits.max_error_bytes` counts bytes; a schema counts characters, of up to 4 bytes each.
    length(nack, "error", 0, (limits.max_error_bytes / 4) as u64);
    note(
        nack,
        "error",
        &format!("At most {} bytes of UTF-8.", limits.max_error_bytes),
    );
    int(schema(schemas, "TouchRequest"), "ttr_ms", ttr.0, ttr.1);

    let dead = schema(schemas, "DeadIds");
    items(dead, "ids", 1, 1000);
    dead["properties"]["ids"]["items"]["pattern"] = ID.into();

    let callback = schema(schemas, "Callback");
    format(callback, "url", "dq-callback-url");
    format(callback, "on_dead_url", "dq-callback-url");
    format(callback, "on_success_url", "dq-callback-url");
    items(callback, "on_success_headers", 0, 32);
    callback["properties"]["on_success_headers"]["items"]["pattern"] = "^[A-Za-z0-9_-]+$".into();
    items(callback, "allow_push", 0, dq_core::graph::MAX_ALLOW_PUSH);
    callback["properties"]["allow_push"]["items"]["format"] = "dq-topic-glob".into();
    int(callback, "timeout_ms", 1, 300_000);
    int(callback, "concurrency", 1, 4096);
    callback["properties"]["rate_per_s"]["exclusiveMinimum"] = 0.into();
    callback["properties"]["rate_per_s"]["maximum"] = 1_000_000.into();
    int(callback, "burst", 1, 1_000_000);
    callback["allOf"] = json!([
        {"anyOf": [{"not": given(&["burst"])}, given(&["rate_per_s"])], "description": "`burst` needs `rate_per_s`"},
    ]);
    callback["description"] = json!("Where and how dq-consumer POSTs the topic's jobs. `burst` needs `rate_per_s`.");
    callback["properties"]["headers"]["propertyNames"] = json!({
        "pattern": "^[A-Za-z0-9_-]+$",
        "not": {"pattern": "^([Cc][Oo][Nn][Tt][Ee][Nn][Tt]-([Tt][Yy][Pp][Ee]|[Ll][Ee][Nn][Gg][Tt][Hh])|[Hh][Oo][Ss][Tt]|[Ii][Dd][Ee][Mm][Pp][Oo][Tt][Ee][Nn][Cc][Yy]-[Kk][Ee][Yy]|[Tt][Rr][Aa][Cc][Ee]([Pp][Aa][Rr][Ee][Nn][Tt]|[Ss][Tt][Aa][Tt][Ee])|[Xx]-[Dd][Qq]-.*)$"},
        "description": "dq sets Content-Type, Content-Length, Host, Idempotency-Key, traceparent, tracestate and X-DQ-* itself"
    });
    callback["properties"]["headers"]["additionalProperties"] =
        json!({"type": "string", "pattern": "^[^\\u0000-\\u0008\\u000a-\\u001f\\u007f]*$"});
    length(callback, "secret", 1, u64::MAX);

    let retry = schema(schemas, "Retry");
    int(retry, "max_attempts", 0, limits.max_attempts as u64);
    backoff(retry, "backoff_ms", max_delay);
    int(retry, "max_age_ms", 1, max_delay);
    format(retry, "condition", "dq-condition");
    let defaults = schema(schemas, "TopicDefaults");
    int(defaults, "ttr_ms", ttr.0, ttr.1);
    int(defaults, "delay_ms", 0, max_delay);
    let topic = schema(schemas, "TopicConfig");
    int(topic, "backlog_threshold", 0, u64::MAX);
    items(topic, "fanout", 0, dq_core::graph::MAX_FANOUT);
    topic["properties"]["fanout"]["uniqueItems"] = true.into();
    topic["properties"]["fanout"]["items"]["pattern"] = TOPIC.into();
    topic["allOf"] = json!([
        {"not": {"allOf": [{"required": ["fanout"], "properties": {"fanout": {"minItems": 1}}},
                           {"anyOf": [given(&["callback"]), given(&["flow"])]}]},
         "description": "a `fanout` topic has no `callback` or `flow`"},
    ]);

    let flow = schema(schemas, "Flow");
    int(flow, "concurrency", 1, dq_core::topic::MAX_FLOW_CONCURRENCY as u64);
    flow["properties"]["rate_per_s"]["exclusiveMinimum"] = 0.into();
    flow["properties"]["rate_per_s"]["maximum"] = 1_000_000.into();
    int(flow, "burst", 1, 1_000_000);
    flow["allOf"] = json!([
        {"anyOf": [{"not": given(&["burst"])}, given(&["rate_per_s"])], "description": "`burst` needs `rate_per_s`"},
    ]);

    let sched = schema(schemas, "ScheduleConfig");
    format(sched, "cron", "dq-cron");
    format(sched, "timezone", "dq-timezone");
    string(sched, "topic", TOPIC);
    job_fields(sched);
    any_json(sched, "body", limits.max_body_bytes, "400 `invalid_argument`");

    // `{}`, and nothing else: an ack many entry that is not an error.
    schema(schemas, "Acked")["maxProperties"] = 0.into();

    let query_limits: [(&str, u64, u64); 2] = [("offset", 0, 1_000_000), ("limit", 1, 1000)];
    for_each_operation(doc, |path, _, op| {
        // The busiest flow keys: up to 100.
        let flows = op["operationId"].as_str() == Some("list_flow_keys");
        for p in op
            .get_mut("parameters")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let name = p["name"].as_str().map(str::to_string);
            let s = &mut p["schema"];
            match name.as_deref() {
                Some("id") => s["pattern"] = PATH_ID.into(),
                Some("topic") | Some("name") => s["pattern"] = TOPIC.into(),
                // `state` of the job lists is an enum in its schema already.
                Some("state") => {}
                // The push routes' trace headers: optional, and a string when given (a header has no
                // `null`, where utoipa writes an `Option`'s schema as nullable); an empty one counts as
                // none.
                Some("traceparent") => {
                    s["type"] = "string".into();
                    s["pattern"] = format!("^$|{}", dq_core::trace::TRACEPARENT_PATTERN).into();
                }
                Some("tracestate") => {
                    s["type"] = "string".into();
                    tracestate(s);
                }
                Some("limit") if flows => {
                    s["minimum"] = 1.into();
                    s["maximum"] = 100.into();
                }
                Some(q) => {
                    let &(_, lo, hi) = query_limits.iter().find(|(n, ..)| *n == q).expect("a known parameter");
                    s["minimum"] = lo.into();
                    s["maximum"] = hi.into();
                }
                None => {}
            }
        }
        if matches!(op["operationId"].as_str(), Some("requeue_dead" | "delete_dead")) {
            let body = &mut op["requestBody"];
            body["required"] = false.into();
            body["content"]["application/json"]["schema"] = json!({"$ref": "#/components/schemas/DeadIds"});
        }
        shared_errors(path, op);
    });
}

/// The answers the guard and Redis give on top of each route's own: 401 (no valid token) where a token
/// is needed, 403 (scope, topic, cross-site or host) everywhere, 400 and 413 where a body is taken,
/// 500 and 503 where Redis is read.
fn shared_errors(path: &str, op: &mut Value) {
    let public = crate::auth::public(path);
    if public {
        op["security"] = json!([]);
    }
    let takes_body = op.get("requestBody").is_some();
    let mut add = |status: &str, why: &str| {
        let responses = op["responses"].as_object_mut().expect("an operation has answers");
        responses.entry(status).or_insert_with(|| {
            json!({"description": why,
                   "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}})
        });
    };
    if !public {
        add("401", "`unauthorized`: no token, or not a valid one.");
    }
    add(
        "403",
        "`forbidden`: the token lacks the scope or the topic; a state change from another site; a host not allowed.",
    );
    if takes_body {
        add(
            "400",
            "`invalid_argument`: the body is not a JSON object of this shape, or a value breaks a rule or limit.",
        );
        add(
            "413",
            "`payload_too_large`: the request body (or a job body) is over its limit.",
        );
    }
    if path.starts_with("/v1/") {
        add(
            "503",
            "`unavailable`: Redis does not answer, refuses writes, or a write's outcome is unknown; `overloaded`: too many waiting long polls.",
        );
        add("500", "`internal`: Redis answered something unexpected (a bug).");
    }
}

/// A W3C `tracestate`: its list syntax (members `key=value`, at most 32, keys unique) is the format
/// `dq-tracestate`, which JSON Schema cannot state; its length is.
fn tracestate(s: &mut Value) {
    s["format"] = "dq-tracestate".into();
    s["maxLength"] = dq_core::trace::MAX_TRACESTATE.into();
}

fn for_each_operation(doc: &mut Value, mut f: impl FnMut(&str, &str, &mut Value)) {
    for (path, item) in doc["paths"].as_object_mut().expect("paths").iter_mut() {
        for (method, op) in item.as_object_mut().expect("a path item").iter_mut() {
            f(path, method, op);
        }
    }
}

fn schema<'a>(schemas: &'a mut Value, name: &str) -> &'a mut Value {
    let s = &mut schemas[name];
    assert!(s.is_object(), "no schema `{name}` in the document");
    s
}

fn field<'a>(schema: &'a mut Value, name: &str) -> &'a mut Value {
    assert!(schema["properties"][name].is_object(), "no field `{name}` in {schema}");
    &mut schema["properties"][name]
}

fn int(schema: &mut Value, name: &str, min: u64, max: u64) {
    let f = field(schema, name);
    f["minimum"] = min.into();
    f["maximum"] = max.into();
    // utoipa writes `int32` for a u32 and `int64` for a u64, whose ranges differ; the bounds say it.
    if let Some(m) = f.as_object_mut() {
        m.remove("format");
    }
}

/// A due time: Unix ms, at most the server's now plus `limits.max_delay_ms` when the request comes. The
/// bound moves with the clock, so the document states it in words, not as a `maximum`.
fn run_at(schema: &mut Value, max_delay: u64) {
    let f = field(schema, "run_at");
    f["minimum"] = 0.into();
    note(
        schema,
        "run_at",
        &format!("At most the server's now + {max_delay} ms (`limits.max_delay_ms`); a past time means due now."),
    );
}

fn string(schema: &mut Value, name: &str, pattern: &str) {
    field(schema, name)["pattern"] = pattern.into();
}

fn length(schema: &mut Value, name: &str, min: u64, max: u64) {
    let f = field(schema, name);
    f["minLength"] = min.into();
    if max != u64::MAX {
        f["maxLength"] = max.into();
    }
}

fn format(schema: &mut Value, name: &str, format: &str) {
    field(schema, name)["format"] = format.into();
}

fn note(schema: &mut Value, name: &str, text: &str) {
    let f = field(schema, name);
    let before = f["description"].as_str().unwrap_or("").to_string();
    f["description"] = format!("{before} {text}").trim().into();
}

fn items(schema: &mut Value, name: &str, min: usize, max: usize) {
    let f = field(schema, name);
    f["minItems"] = min.into();
    f["maxItems"] = max.into();
}

fn backoff(schema: &mut Value, name: &str, max_delay: u64) {
    items(schema, name, 1, 100);
    let f = &mut schema["properties"][name]["items"];
    f["minimum"] = 0.into();
    f["maximum"] = max_delay.into();
}

fn any_json(schema: &mut Value, name: &str, max_bytes: usize, over: &str) {
    note(
        schema,
        name,
        &format!(
            "Any JSON value, kept as sent; its JSON text at most {max_bytes} bytes (else {over}), nested at most 128 deep."
        ),
    );
}

/// Each of `fields` is present and not `null` (a `null` counts as absent).
fn given(fields: &[&str]) -> Value {
    let properties: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| (f.to_string(), json!({"not": {"type": "null"}})))
        .collect();
    json!({"required": fields, "properties": properties})
}

/// A push whose `coalesce` is present with one of `modes`.
fn mode_is(modes: &[&str]) -> Value {
    json!({"required": ["coalesce"],
           "properties": {"coalesce": {"type": "object", "required": ["mode"], "properties": {"mode": {"enum": modes}}}}})
}

/// None of `fields` is present but as `null`.
fn absent(fields: &[&str]) -> Value {
    let properties: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| (f.to_string(), json!({"type": "null"})))
        .collect();
    json!({"properties": properties})
}
