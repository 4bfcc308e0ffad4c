//! Logging (tracing, text or JSON lines), the process's Prometheus recorder, and spans in jobs' traces
//! exported over OTLP ([`otlp`]: the exporter; [`spans`]: dq's spans, one kind per binary).

pub mod otlp;
pub mod spans;

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::LogSettings;

/// Keeps the log writer's thread; dropped at the end of `main`, it writes out what is queued (waiting
/// a second at most).
pub type LogGuard = tracing_appender::non_blocking::WorkerGuard;

/// Installs the tracing subscriber once; later calls (tests running several services) do nothing.
///
/// Lines go to stderr through a thread of their own, and are dropped rather than waited for when stderr
/// does not keep up (a stalled pipe); a write that fails (a closed pipe) is dropped silently, where
/// tracing-subscriber would report it with `eprintln!`, which panics on a closed stderr. So a drain on
/// SIGTERM finishes whatever becomes of stderr.
///
/// The filter sits behind a reload handle, so SIGHUP can change `log.level` ([`set_log_level`]).
pub fn init_logging(settings: &LogSettings) -> Option<LogGuard> {
    let filter = rust_log()
        .and_then(|dirs| EnvFilter::builder().parse(dirs).ok())
        .unwrap_or_else(|| EnvFilter::new(&settings.level));
    let (writer, guard) = tracing_appender::non_blocking(std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .log_internal_errors(false);
    // The two formats are two subscriber types, so their handles are too: each is kept as a closure.
    let installed = if settings.format == "json" {
        let builder = builder.json().with_filter_reloading();
        let handle = builder.reload_handle();
        builder
            .try_init()
            .map(|()| Box::new(move |f: EnvFilter| handle.reload(f).is_ok()) as SetFilter)
    } else {
        let builder = builder.with_filter_reloading();
        let handle = builder.reload_handle();
        builder
            .try_init()
            .map(|()| Box::new(move |f: EnvFilter| handle.reload(f).is_ok()) as SetFilter)
    };
    let set = installed.ok()?;
    let _ = SET_FILTER.set(set);
    Some(guard)
}

/// Replaces the filter of the subscriber [`init_logging`] installed.
type SetFilter = Box<dyn Fn(EnvFilter) -> bool + Send + Sync>;

/// The filter's reload handle, once logging is installed.
static SET_FILTER: OnceLock<SetFilter> = OnceLock::new();

/// `RUST_LOG`, when set and not empty: it wins over `log.level`, at start and on reload.
fn rust_log() -> Option<String> {
    std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty())
}

/// What [`set_log_level`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogLevelSet {
    /// The new filter is in force.
    Applied,
    /// `RUST_LOG` is set and wins: the filter stays.
    RustLogWins,
    /// This process's logging was not installed by [`init_logging`] (a test running services in one
    /// process): nothing to change.
    NotInstalled,
}

/// Puts `level` (a tracing filter, checked when the settings were read) in force for every line from now on.
pub fn set_log_level(level: &str) -> LogLevelSet {
    if rust_log().is_some() {
        return LogLevelSet::RustLogWins;
    }
    let (Some(set), Ok(filter)) = (SET_FILTER.get(), EnvFilter::builder().parse(level)) else {
        return LogLevelSet::NotInstalled;
    };
    if set(filter) {
        LogLevelSet::Applied
    } else {
        LogLevelSet::NotInstalled
    }
}

/// The process-wide Prometheus recorder, installed on first use, so every `metrics::counter!` in dq
/// lands in what `/metrics` renders.
pub fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(&[
                0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ])
            .expect("static buckets are valid")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
        }
        // Histogram samples wait in a buffer until upkeep folds them into their buckets. A scrape
        // does it too, but a process nobody scrapes (dq-consumer's port left unscraped) would keep
        // every sample: the soak test saw dq-consumer's RSS climb 25 MB an hour.
        let upkeep = handle.clone();
        let spawned = std::thread::Builder::new()
            .name("metrics-upkeep".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(UPKEEP_EVERY);
                    upkeep.run_upkeep();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(cause = %e, "cannot start the metrics upkeep thread; histograms grow until scraped");
        }
        handle
    })
}

/// How often histogram samples are folded into their buckets.
const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// [`serve_metrics`] on `metrics.listen` (`listen`), or on the binary's `default` when it is not set. The
/// error names the address and the setting, ready for the binary to print.
pub async fn serve_configured_metrics(
    listen: Option<&str>,
    default: &str,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    let listen = listen.unwrap_or(default);
    serve_metrics(listen, shutdown).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot serve metrics on {listen} (metrics.listen): {e}"),
        )
    })
}

/// Serves `/metrics` (and `/healthz`) on `listen` until `shutdown`: the HTTP face of the binaries that
/// have no API of their own (timer, consumer, checker). Returns the bound address.
pub async fn serve_metrics(
    listen: &str,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    use axum::routing::get;
    prometheus();
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || async move {
                (
                    [(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    crate::series::render(),
                )
            }),
        )
        .route("/healthz", get(|| async { "ok" }));
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(async move { shutdown.cancelled().await });
        if let Err(e) = served.await {
            tracing::error!(cause = %e, "metrics listener failed");
        }
    });
    tracing::info!(%addr, "serving /metrics");
    Ok((addr, task))
}
