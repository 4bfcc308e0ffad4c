//! dq-server: the HTTP API v1 over the queue.
//!
//! - [`error`]: the JSON error answer every failure turns into.
//! - [`body`]: the JSON body extractor that refuses bad input with those errors.
//! - [`jobs`]: push, push many, look up, cancel, reschedule.
//! - [`reserve`]: reserve (with long poll), ack, nack, touch; [`long_polls`]: the cap on waiting ones.
//! - [`topics`]: the topic registry, pause and resume, dead letters.
//! - [`schedules`]: schedules (cron), pause and resume.
//! - [`probes`]: stats, `/healthz`, `/readyz`, `/metrics`.
//! - [`admin`]: the web admin pages over the same API.
//! - [`auth`]: tokens, scopes and the admin login.
//! - [`browser`]: cross-site state changes refused, frame headers.
//! - [`listener`]: connections under a header timeout and a cap, in clear or over TLS.
//! - [`routes`]: the router, from the documented API routes and the pages for people.
//! - [`spec`]: the OpenAPI document (`/openapi.json`) and Swagger UI (`/docs`).
//! - [`trace`]: a push's trace context from its headers, and the span of each traced push.
//! - [`beanstalkd`]: the beanstalkd protocol listener (`beanstalkd.listen`).

pub mod admin;
pub mod auth;
pub mod beanstalkd;
pub mod body;
pub mod browse;
pub mod browser;
pub mod error;
pub mod flows;
pub mod jobs;
pub mod listener;
pub mod long_polls;
pub mod probes;
pub mod reserve;
pub mod routes;
pub mod schedules;
pub mod spec;
pub mod topics;
pub mod trace;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use dq_core::admin::topics::TopicCache;
use dq_core::{Queue, Settings};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// What every handler shares: one `Arc` of its parts, since axum clones the state for every request
/// (cloning the parts one by one was a dozen reference counts and a lock, about 2% of a push's CPU).
#[derive(Debug, Clone)]
pub struct AppState(Arc<AppParts>);

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

/// The parts of [`AppState`].
#[derive(Debug)]
pub struct AppParts {
    /// The queue over every partition.
    pub queue: Arc<Queue>,
    /// The topic registry as last read (defaults for pushes, paused topics for reserve).
    pub topics: Arc<TopicCache>,
    /// Cancelled when the server drains: long polls answer at once.
    pub shutdown: CancellationToken,
    /// The tokens in force.
    pub auth: Arc<auth::Auth>,
    /// Allowed hosts and cross-site refusal.
    pub guard: Arc<browser::Guard>,
    /// One permit per long poll allowed to wait at once (`server.max_long_polls`).
    pub long_polls: Arc<long_polls::LongPolls>,
    /// The OpenAPI document, made for this server's limits at start and at each SIGHUP
    /// (`GET /openapi.json`).
    pub openapi: std::sync::RwLock<Bytes>,
}

/// Binds `server.listen` and serves until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let listener = TcpListener::bind(&settings.server.listen)
        .await
        .with_context(|| format!("cannot listen on {} (server.listen)", settings.server.listen))?;
    serve(listener, settings, shutdown).await
}

/// Serves the API on `listener` until `shutdown`, then lets in-flight requests finish for at most
/// `shutdown.grace_ms`.
pub async fn serve(listener: TcpListener, settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    auth::check_listen(&settings.auth, listener.local_addr()?)?;
    let tls = listener::Tls::from_settings(&settings.server)?;
    let auth = Arc::new(auth::Auth::new(&settings.auth)?);
    let queue = Queue::connect(&settings)
        .await
        .context("cannot open the queue in Redis")?;
    if !queue.seals() {
        tracing::warn!(
            "callback secrets and header values are stored in Redis in clear: set secrets.keys (docs/security.md)"
        );
    }
    dq_core::telemetry::prometheus();
    // Served from the start (at 0), so a dashboard tells "none" from "not measured".
    dq_core::series::serve_from_start(dq_core::series::QUEUE);
    dq_core::series::serve_from_start(&[auth::REFUSALS]);
    if settings.beanstalkd.listen.is_some() {
        dq_core::series::serve_from_start(&[beanstalkd::counters::COMMANDS]);
    }
    dq_core::series::serve_per_topic(dq_core::series::QUEUE_PER_TOPIC);
    let listener_task = dq_core::wake::follow_ready(&queue, shutdown.clone());
    // Timers hand due jobs straight to long polls that wait for their topic.
    let handoffs = dq_core::wake::serve_long_polls(&queue, shutdown.clone());
    let refresh = Duration::from_millis(settings.topics.refresh_ms);
    let topics = TopicCache::start(queue.clone(), refresh, shutdown.clone()).await;
    let state = AppState(Arc::new(AppParts {
        queue: Arc::new(queue),
        topics,
        shutdown: shutdown.clone(),
        guard: Arc::new(browser::Guard {
            auth: auth.clone(),
            allowed_hosts: Arc::new(
                settings
                    .server
                    .allowed_hosts
                    .iter()
                    .map(|h| h.trim().to_ascii_lowercase())
                    .collect(),
            ),
            max_body: settings.limits.max_request_bytes().into(),
            admin_read_only: settings.server.admin_read_only,
        }),
        auth,
        long_polls: Arc::new(long_polls::LongPolls::new(settings.server.max_long_polls)),
        openapi: spec::served(&settings.limits).into(),
    }));
    reload(&settings, &state, tls.clone()).start(shutdown.clone())?;
    let beanstalkd = match &settings.beanstalkd.listen {
        Some(listen) => {
            let listener = beanstalkd::bind(listen).await?;
            let (queue, topics, shutdown) = (state.queue.clone(), state.topics.clone(), shutdown.clone());
            let (config, grace) = (
                settings.beanstalkd.clone(),
                Duration::from_millis(settings.shutdown.grace_ms),
            );
            Some(tokio::spawn(async move {
                beanstalkd::serve(listener, queue, topics, &config, grace, shutdown).await
            }))
        }
        None => None,
    };
    state.queue.spawn_health_probe(Duration::from_secs(5), shutdown.clone());
    // Stopped after the requests of the drain finished, so their acks and nacks are counted too.
    let activity_stop = CancellationToken::new();
    let activity = state.queue.spawn_activity_flush(activity_stop.clone());
    let state_partitions = state.queue.partitions().count();
    let app = app(state);

    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(addr = %listener.local_addr()?, scheme, mode = ?settings.redis.mode, partitions = state_partitions, "dq-server listening");
    dq_core::systemd::ready(&shutdown);
    let limits = listener::ConnectionLimits {
        header_timeout: Duration::from_millis(settings.server.header_timeout_ms),
        max_connections: settings.server.max_connections,
        grace: Duration::from_millis(settings.shutdown.grace_ms),
    };
    let served = listener::serve(listener, app, limits, tls, shutdown).await;
    if let Some(beanstalkd) = beanstalkd {
        let _ = beanstalkd.await;
    }
    activity_stop.cancel();
    let _ = activity.await;
    let _ = handoffs.await;
    served?;
    listener_task.abort();
    tracing::info!("dq-server stopped");
    Ok(())
}

/// What SIGHUP applies without a restart: the log level, the tokens, the limits (with the request size
/// and the OpenAPI document made from them), the egress lists registrations are checked against, and
/// the TLS files read again (their paths are taken at start).
fn reload(settings: &Settings, state: &AppState, tls: Option<listener::Tls>) -> dq_core::reload::Reload {
    let (auth, app) = (state.auth.clone(), state.clone());
    let egress_queue = state.queue.clone();
    let reload = dq_core::reload::Reload::new(settings)
        .unused(&[
            "checker",
            "timer",
            "metrics",
            "egress.max_answer_bytes",
            "egress.excerpt_bytes",
        ])
        .apply("tokens", &["auth.admin_token", "auth.tokens"], move |s| {
            auth.reload(&s.auth)
        })
        .apply("limits", &["limits"], move |s| {
            app.queue.set_limits(s.limits.clone());
            app.guard
                .max_body
                .store(s.limits.max_request_bytes(), std::sync::atomic::Ordering::Relaxed);
            *app.openapi.write().unwrap_or_else(|e| e.into_inner()) = spec::served(&s.limits);
        })
        .apply("egress policy", &["egress.deny", "egress.allow"], move |s| {
            egress_queue.set_egress(s.egress.clone())
        });
    match tls {
        Some(tls) => reload.apply("TLS certificate", &[], move |_| tls.reload()),
        None => reload,
    }
}

/// What the listener serves: every route (the API v1 and the pages for people, see [`routes::router`])
/// behind the guard, which also limits the body (axum's own limit is off: it is fixed when the router is
/// made, and `limits` change on SIGHUP). Both wrap the router once rather than each route
/// (`Router::layer`), which would add a boxed service that axum clones for every request. There is no
/// way to serve the routes without the guard.
pub fn app(state: AppState) -> App {
    let guard = browser::GuardLayer(state.guard.clone());
    tower::Layer::layer(
        &guard,
        tower::Layer::layer(&DefaultBodyLimit::disable(), routes::router(state)),
    )
}

/// The service [`app`] makes.
pub type App = browser::Guarded<<DefaultBodyLimit as tower::Layer<Router>>::Service>;
