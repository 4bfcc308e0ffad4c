//! Span export over OTLP/HTTP in protobuf (`telemetry.otlp_endpoint`), with the OpenTelemetry SDK: its
//! batch processor queues finished spans (2,048 at most; more are dropped) and exports them from a
//! thread of its own, every 5 s or per 512 (the `OTEL_BSP_*` variables change that), through reqwest's
//! blocking client. So an export never runs on the tokio runtime, never holds a job up, and a collector
//! that is down or slow costs dropped spans, never a failed or late job. Export failures are logged at
//! most once a minute, with how many spans were lost since the last line, and counted
//! (`dq_spans_export_failed_total`).
//!
//! Without an endpoint nothing is installed: [`tracer`] is `None` and [`super::spans`] makes no span,
//! so a job's trace context costs no more than its bytes in Redis.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use opentelemetry::InstrumentationScope;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, SpanData, SpanExporter};

use crate::config::{TelemetrySettings, traces_url};

/// The tracer of this process, once [`install`] set one up.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// The tracer spans are made with; `None` when this process exports none.
pub fn tracer() -> Option<&'static SdkTracer> {
    TRACER.get()
}

/// Why span export could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// `telemetry.otlp_endpoint` is not an http(s) URL (the settings' check says so first).
    #[error("telemetry.otlp_endpoint: {0}")]
    Endpoint(String),
    /// The OTLP exporter could not be built.
    #[error("cannot set up the OTLP span exporter")]
    Build(#[source] opentelemetry_otlp::ExporterBuildError),
}

/// The span export of this process: dropped at the end of `main` (after the drain), it exports what is
/// still queued, waiting 5 s at most.
pub struct SpanExport {
    /// Owns the batch processor and its thread.
    provider: SdkTracerProvider,
}

impl Drop for SpanExport {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(cause = %e, "the last spans could not be exported");
        }
    }
}

/// Sets up span export to `telemetry.otlp_endpoint` for the binary `service` (`service.name`); `None`
/// when no endpoint is set. Once per process: a second call (tests running several services in one
/// process) exports through the first one's tracer.
pub fn install(service: &'static str, settings: &TelemetrySettings) -> Result<Option<SpanExport>, ExportError> {
    let Some(endpoint) = &settings.otlp_endpoint else {
        return Ok(None);
    };
    let url = traces_url(endpoint).map_err(ExportError::Endpoint)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(&url)
        .build()
        .map_err(ExportError::Build)?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Logged::new(exporter, url.clone()))
        // dq makes spans only in a trace a producer records (see spans.rs): never a root of its own.
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOff)))
        .with_resource(
            Resource::builder()
                .with_service_name(service)
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        )
        .build();
    let scope = InstrumentationScope::builder("dq")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let _ = TRACER.set(provider.tracer_with_scope(scope));
    crate::series::serve_from_start(&[crate::series::Counter::plain(EXPORT_FAILED)]);
    tracing::info!(endpoint = %url, "exporting spans over OTLP/HTTP");
    Ok(Some(SpanExport { provider }))
}

/// Spans an export failed to deliver (served from the start, at 0, when an endpoint is set).
const EXPORT_FAILED: &str = "dq_spans_export_failed_total";

/// How often at most an export failure is logged.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// The OTLP exporter, with its failures logged (rate-limited) and counted.
#[derive(Debug)]
struct Logged {
    /// Does the work.
    inner: opentelemetry_otlp::SpanExporter,
    /// Where it sends, for the log line.
    url: String,
    /// When a failure was last logged.
    logged: Mutex<Option<Instant>>,
    /// Spans lost since the last line.
    lost: AtomicU64,
}

impl Logged {
    fn new(inner: opentelemetry_otlp::SpanExporter, url: String) -> Self {
        Logged {
            inner,
            url,
            logged: Mutex::new(None),
            lost: AtomicU64::new(0),
        }
    }

    /// Counts a failed export of `spans` spans, and logs it unless a line went out within [`LOG_EVERY`].
    fn failed(&self, spans: usize, cause: &dyn std::fmt::Display) {
        metrics::counter!(EXPORT_FAILED).increment(spans as u64);
        let lost = self.lost.fetch_add(spans as u64, Ordering::Relaxed) + spans as u64;
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        if logged.is_some_and(|at| at.elapsed() < LOG_EVERY) {
            return;
        }
        *logged = Some(Instant::now());
        self.lost.store(0, Ordering::Relaxed);
        tracing::warn!(endpoint = %self.url, cause = %cause, lost, "cannot export spans (logged at most once a minute)");
    }
}

impl SpanExporter for Logged {
    fn export(&self, batch: Vec<SpanData>) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let spans = batch.len();
        let sent = self.inner.export(batch);
        async move {
            let result = sent.await;
            if let Err(e) = &result {
                self.failed(spans, e);
            }
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
