//! A primary's connections (a standalone Redis, or the primary Sentinel names now): where they come
//! from, bb8's manager that keeps a few multiplexed sockets, and how a broken or demoted one is dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{AsyncConnectionConfig, Client, IntoConnectionInfo};
use tokio::sync::Mutex;

use crate::config::RedisSettings;
use crate::error::{Outcome, outcome};

/// Where a primary's connections come from.
pub(super) enum Target {
    /// A standalone Redis.
    Url(Client),
    /// The primary Sentinel names now, asked again for every new connection.
    Sentinel(Mutex<SentinelClient>),
}

impl Target {
    pub(super) async fn client(&self) -> redis::RedisResult<Client> {
        match self {
            Target::Url(c) => Ok(c.clone()),
            Target::Sentinel(s) => s.lock().await.async_get_client().await,
        }
    }
}

/// bb8's manager for the primary's connections. A checkout only clones the multiplexed connection and
/// gives it straight back, so concurrent requests share the pool's few sockets and redis-rs pipelines
/// them; the pool owns connecting, timeouts and replacing broken sockets.
pub(super) struct PrimaryConnections {
    /// Where to connect.
    pub(super) target: Arc<Target>,
    /// Connect and answer timeouts for each new connection.
    pub(super) config: AsyncConnectionConfig,
    /// Cleared by a successful connect.
    pub(super) last_error: LastError,
}

/// A pooled connection that remembers whether it saw a connection error (or a READONLY: a demoted
/// primary), so the pool drops it and the next one resolves the primary again.
pub(super) struct PrimaryConnection {
    /// The multiplexed connection.
    pub(super) conn: MultiplexedConnection,
    /// Set by whichever clone saw the error.
    pub(super) broken: Arc<AtomicBool>,
}

impl bb8::ManageConnection for PrimaryConnections {
    type Connection = PrimaryConnection;
    type Error = redis::RedisError;

    async fn connect(&self) -> Result<PrimaryConnection, redis::RedisError> {
        let client = self.target.client().await?;
        let conn = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        self.last_error.clear();
        Ok(PrimaryConnection {
            conn,
            broken: Arc::new(AtomicBool::new(false)),
        })
    }

    async fn is_valid(&self, conn: &mut PrimaryConnection) -> Result<(), redis::RedisError> {
        redis::cmd("PING").query_async::<()>(&mut conn.conn).await
    }

    fn has_broken(&self, conn: &mut PrimaryConnection) -> bool {
        conn.broken.load(Ordering::Relaxed)
    }
}

/// bb8 keeps a failed connect to itself and answers callers only "timed out": this remembers the
/// error (a refused connection, an untrusted certificate, a wrong password) so the caller's error has
/// it as its source.
#[derive(Debug, Clone, Default)]
pub(super) struct LastError(Arc<std::sync::Mutex<Option<crate::error::RedisCause>>>);

impl LastError {
    pub(super) fn get(&self) -> Option<crate::error::RedisCause> {
        self.0.lock().expect("last error lock").clone()
    }

    fn clear(&self) {
        *self.0.lock().expect("last error lock") = None;
    }
}

impl bb8::ErrorSink<redis::RedisError> for LastError {
    fn sink(&self, error: redis::RedisError) {
        *self.0.lock().expect("last error lock") = Some(Arc::new(error));
    }

    fn boxed_clone(&self) -> Box<dyn bb8::ErrorSink<redis::RedisError>> {
        Box::new(self.clone())
    }
}

/// A client for `url`, trusting the configured CA and showing the configured client certificate when
/// the URL uses TLS.
pub(super) fn client(url: &str, certs: &Option<redis::TlsCertificates>) -> redis::RedisResult<Client> {
    match certs {
        Some(certs) if url.starts_with("rediss://") => Client::build_with_tls(url, certs.clone()),
        _ => Client::open(url),
    }
}

pub(super) fn sentinel_client(
    settings: &RedisSettings,
    certs: &Option<redis::TlsCertificates>,
) -> redis::RedisResult<SentinelClient> {
    // Sentinel reports only the primary's address: the first URL's user, password and TLS serve the
    // sentinels and the data nodes alike, with the configured CA and client certificate.
    let infos = settings
        .urls
        .iter()
        .map(|u| u.as_str().into_connection_info())
        .collect::<redis::RedisResult<Vec<_>>>()?;
    let first = infos[0].redis_settings().clone();
    let tls = match infos[0].addr() {
        redis::ConnectionAddr::TcpTls { insecure: true, .. } => Some(redis::TlsMode::Insecure),
        redis::ConnectionAddr::TcpTls { .. } => Some(redis::TlsMode::Secure),
        _ => None,
    };
    let mut builder = SentinelClientBuilder::new(
        infos.iter().map(|i| i.addr().clone()),
        settings.sentinel_master.clone(),
        SentinelServerType::Master,
    )?;
    if let Some(user) = first.username() {
        builder = builder
            .set_client_to_sentinel_username(user)
            .set_client_to_redis_username(user);
    }
    if let Some(password) = first.password() {
        builder = builder
            .set_client_to_sentinel_password(password)
            .set_client_to_redis_password(password);
    }
    if let Some(mode) = tls {
        builder = builder.set_client_to_redis_tls_mode(mode);
        if let Some(certs) = certs {
            builder = builder
                .set_client_to_sentinel_certificates(certs.clone())
                .set_client_to_redis_certificates(certs.clone());
        }
    }
    builder.build()
}

/// Marks a pooled connection broken when it may be (a call sent and not answered, a refused connect),
/// or after READONLY (the primary was demoted: the next connection resolves the new one).
pub(super) fn mark<T>(broken: &AtomicBool, r: redis::RedisResult<T>) -> redis::RedisResult<T> {
    if let Err(e) = &r
        && (outcome(e) == Outcome::Unknown || e.is_connection_refusal() || e.code() == Some("READONLY"))
    {
        broken.store(true, Ordering::Relaxed);
    }
    r
}
