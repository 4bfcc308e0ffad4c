//! Trace context on a push: the request's W3C `traceparent` and `tracestate` headers (for a push, and
//! for each entry of a batch, that gives no fields of its own), and dq-server's span of each traced push
//! (`push <topic>`, see [`dq_core::telemetry::spans`]), whose context the job stores.

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use dq_core::telemetry::spans::{self, JobSpan};
use dq_core::trace::TraceContext;
use dq_core::{NewJob, PushRequest};

use crate::error::ApiError;

/// The push routes' trace headers, as the OpenAPI document describes them ([`TraceHeaders`] reads them).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // read by TraceHeaders; this is their description
pub struct TraceParams {
    /// W3C trace context, `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>` (lower case): the
    /// job joins this trace (each entry of a batch without a `traceparent` or `tracestate` field of its
    /// own). A field of the push wins over it; a malformed one is a 400, an empty one none.
    traceparent: Option<String>,
    /// W3C `tracestate` (at most 512 characters, the list syntax), with `traceparent` (alone, it is
    /// checked and ignored); several headers are one list.
    tracestate: Option<String>,
}

/// The trace context of the request's headers, checked: a malformed `traceparent` or `tracestate`
/// header (or two `traceparent`s) is a 400 and nothing is written; an empty one counts as none. A `tracestate` header without a
/// `traceparent` is ignored, as W3C says a receiver does (several `tracestate` headers are one list).
#[derive(Debug, Default)]
pub struct TraceHeaders(Option<TraceContext>);

impl<S: Send + Sync> FromRequestParts<S> for TraceHeaders {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let headers = &parts.headers;
        // An empty header carries no context: as if it were not sent.
        let mut parents = headers.get_all("traceparent").iter().filter(|v| !v.is_empty());
        let Some(parent) = parents.next() else {
            // Ignored, but not when it is malformed: what a request sends is checked.
            for v in headers.get_all("tracestate") {
                dq_core::trace::check_tracestate(text(v, "tracestate")?)
                    .map_err(|e| ApiError::invalid(format!("header: {e}")))?;
            }
            return Ok(TraceHeaders(None));
        };
        if parents.next().is_some() {
            return Err(ApiError::invalid("the `traceparent` header is given more than once"));
        }
        fn text<'a>(v: &'a axum::http::HeaderValue, name: &str) -> Result<&'a str, ApiError> {
            v.to_str()
                .map_err(|_| ApiError::invalid(format!("the `{name}` header is not ASCII text")))
        }
        let parent = text(parent, "traceparent")?;
        let states = headers
            .get_all("tracestate")
            .iter()
            .map(|v| text(v, "tracestate"))
            .collect::<Result<Vec<_>, _>>()?;
        let state = (!states.is_empty()).then(|| states.join(","));
        TraceContext::parse(parent, state.as_deref())
            .map(|tc| TraceHeaders(Some(tc)))
            .map_err(|e| ApiError::invalid(format!("header: {e}")))
    }
}

impl TraceHeaders {
    /// Gives `req` the headers' context when it has no `traceparent` or `tracestate` field of its own
    /// (a field wins over the headers).
    pub fn fill(&self, req: &mut PushRequest) {
        if let Some(tc) = &self.0
            && req.traceparent.is_none()
            && req.tracestate.is_none()
        {
            req.traceparent = Some(tc.traceparent.clone());
            req.tracestate = tc.tracestate.clone();
        }
    }
}

/// Starts the span of a traced push (when this process exports spans), and gives the job the span's
/// context to store in place of the producer's: same trace, the push as parent of what follows (a
/// fan-out's children too: they are this push's).
pub fn start_push(job: &mut NewJob) -> Option<JobSpan> {
    let span = spans::push(&job.topic, job.trace.as_ref()?)?;
    job.trace = Some(span.context().clone());
    for child in &mut job.fanout {
        child.trace = job.trace.clone();
    }
    Some(span)
}

/// Ends a push's span with what became of the push: the job's id and the answer's status, or the error.
pub fn end_push(span: Option<JobSpan>, outcome: Result<(&str, StatusCode), &ApiError>) {
    let Some(mut span) = span else { return };
    match outcome {
        Ok((id, status)) => {
            span.set(spans::JOB_ID, id.to_string());
            span.set(spans::HTTP_STATUS, i64::from(status.as_u16()));
        }
        Err(e) => {
            span.set(spans::HTTP_STATUS, i64::from(e.status.as_u16()));
            span.fail(e.message.clone());
        }
    }
    span.end();
}
