//! The client: its settings, how a request is sent and tried again, and the job verbs but push (`push.rs`).

use std::path::PathBuf;
use std::time::Duration;

use dq_api::{
    AckEntry, AckManyAnswer, AckManyRequest, AckRequest, AckResult, Attempts, ErrorBody, RescheduleRequest,
    ReserveAnswer, ReserveRequest, TouchRequest, Touched,
};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use url::Url;

use crate::error::{ApiError, Error};
use crate::jobs::{Job, Nack, Reservation, When};
use crate::retry::{Idempotence, RetryPolicy};

/// How long a request may take, unless it is a long poll (which gets its wait on top).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// What a long poll may take beyond its wait before the client gives up on the answer.
const LONG_POLL_SLACK: Duration = Duration::from_secs(10);

/// A client of one dq-server (or of a load balancer in front of several). Cheap to clone: clones share
/// one connection pool.
#[derive(Debug, Clone)]
pub struct Client {
    /// The pooled HTTP client.
    http: reqwest::Client,
    /// The server's base URL, e.g. `http://127.0.0.1:6789/`.
    base: Url,
    /// The bearer token, if the server has tokens configured.
    token: Option<String>,
    /// When a failed call is sent again.
    retry: RetryPolicy,
    /// How long one request may take.
    timeout: Duration,
    /// The name sent with acks and nacks, for the jobs' attempts.
    pub(crate) consumer: Option<String>,
}

/// Builds a [`Client`].
#[derive(Debug)]
pub struct ClientBuilder {
    base: String,
    token: Option<String>,
    retry: RetryPolicy,
    timeout: Duration,
    ca_file: Option<PathBuf>,
    consumer: Option<String>,
}

impl ClientBuilder {
    /// Sends `Authorization: Bearer <token>` with every request (`None`: no token).
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// Sets when failed calls are tried again (default: [`RetryPolicy::default`]).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets how long one request may take (default 30 s; a long poll gets its wait on top).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Names this worker in the attempts of the jobs it acks and nacks (their `consumer`, at most 128
    /// bytes; `None`: none).
    pub fn consumer(mut self, consumer: Option<String>) -> Self {
        self.consumer = consumer.filter(|c| !c.is_empty());
        self
    }

    /// Trusts the CA certificates in this PEM file for `https://` URLs, besides the system's: for a
    /// dq-server whose certificate a private CA signed (`None`: the system's alone). Read by
    /// [`build`](Self::build).
    pub fn ca_file(mut self, ca_file: Option<PathBuf>) -> Self {
        self.ca_file = ca_file;
        self
    }

    /// Builds the client.
    pub fn build(self) -> Result<Client, Error> {
        let mut base = Url::parse(&self.base).map_err(|e| Error::Usage(format!("bad dq URL `{}`: {e}", self.base)))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(Error::Usage(format!(
                "bad dq URL `{}`: not an http or https URL",
                self.base
            )));
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let mut http = reqwest::Client::builder().user_agent(concat!("dq-client/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &self.ca_file {
            http = http.tls_certs_merge(read_ca_file(path)?);
        }
        let http = http.build().map_err(|e| Error::Usage(e.to_string()))?;
        Ok(Client {
            http,
            base,
            token: self.token,
            retry: self.retry,
            timeout: self.timeout,
            consumer: self.consumer,
        })
    }
}

/// The certificates of a PEM file, or an error naming it.
fn read_ca_file(path: &std::path::Path) -> Result<Vec<reqwest::Certificate>, Error> {
    let bad = |why: String| Error::Usage(format!("CA file {}: {why}", path.display()));
    let pem = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into()));
    }
    Ok(certs)
}

/// What came back from a call that dq answered with a success.
pub(crate) struct Sent {
    /// The status.
    status: StatusCode,
    /// The body.
    body: Vec<u8>,
}

/// The outcome of a call with its tries: the answer or the last error, and whether an earlier try's
/// outcome was unknown (so a conflict or a stale receipt may be the earlier try's doing).
pub(crate) struct Tried {
    pub result: Result<Sent, Error>,
    pub after_unknown: bool,
}

impl Client {
    /// A client of the server at `base` (e.g. `http://127.0.0.1:6789`), without a token.
    pub fn new(base: &str) -> Result<Client, Error> {
        Client::builder(base).build()
    }

    /// A builder for a client of the server at `base`.
    pub fn builder(base: &str) -> ClientBuilder {
        ClientBuilder {
            base: base.to_string(),
            token: None,
            retry: RetryPolicy::default(),
            timeout: DEFAULT_TIMEOUT,
            ca_file: None,
            consumer: None,
        }
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &Url {
        &self.base
    }

    /// The URL of `segments` below the base, each segment percent-encoded as needed.
    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        {
            let mut path = url.path_segments_mut().expect("checked in build");
            path.pop_if_empty();
            path.extend(segments);
        }
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (k, v.as_str())));
        }
        url
    }

    /// Sends one request once.
    async fn send_once(
        &self,
        method: &Method,
        url: &Url,
        body: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Sent, Error> {
        let mut request = self.http.request(method.clone(), url.clone()).timeout(timeout);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_vec());
        }
        let answer = request.send().await.map_err(Error::from_reqwest)?;
        let status = answer.status();
        let body = answer.bytes().await.map_err(Error::from_reqwest)?.to_vec();
        if status.is_success() {
            return Ok(Sent { status, body });
        }
        match serde_json::from_slice::<ErrorBody>(&body) {
            Ok(e) => Err(Error::Api(ApiError::from_detail(e.error, status.as_u16()))),
            // A code this client does not know yet (a newer server's) is still dq's error answer.
            Err(_) if let Some(e) = ApiError::from_unknown_code(&body, status.as_u16()) => Err(Error::Api(e)),
            Err(_) => Err(Error::Decode {
                status: status.as_u16(),
                detail: format!(
                    "not dq's error shape: {}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ),
            }),
        }
    }

    /// Sends a request, trying again by the retry policy and the verb's idempotence.
    pub(crate) async fn send<B: Serialize + ?Sized>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
        idempotence: Idempotence,
        timeout: Option<Duration>,
    ) -> Tried {
        let body = match body.map(serde_json::to_vec).transpose() {
            Ok(b) => b,
            Err(e) => {
                return Tried {
                    result: Err(Error::Usage(format!("cannot encode the request: {e}"))),
                    after_unknown: false,
                };
            }
        };
        let timeout = timeout.unwrap_or(self.timeout);
        let mut after_unknown = false;
        let mut try_no = 1;
        loop {
            let result = self.send_once(&method, &url, body.as_deref(), timeout).await;
            let again = match &result {
                Ok(_) => false,
                Err(e) => {
                    try_no < self.retry.tries
                        && (e.nothing_done() || (idempotence == Idempotence::Safe && e.is_transient()))
                }
            };
            if !again {
                return Tried { result, after_unknown };
            }
            let e = result.err().expect("an error is tried again");
            after_unknown |= !e.nothing_done();
            tracing::debug!(%url, try_no, cause = %e, "dq call failed; trying again");
            tokio::time::sleep(self.retry.backoff(try_no)).await;
            try_no += 1;
        }
    }

    /// Sends a request and decodes its JSON answer.
    pub(crate) async fn json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
        idempotence: Idempotence,
    ) -> Result<T, Error> {
        decode(self.send(method, url, body, idempotence, None).await.result?)
    }

    /// `GET` of a path below the base, its JSON answer decoded.
    pub(crate) async fn read<T: DeserializeOwned>(&self, segments: &[&str]) -> Result<T, Error> {
        self.json::<(), _>(Method::GET, self.at(segments), None, Idempotence::Safe)
            .await
    }

    /// `PUT` of a JSON body (a registration, which replaces the stored one), its JSON answer decoded.
    pub(crate) async fn put<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        segments: &[&str],
        body: &B,
    ) -> Result<T, Error> {
        self.json(Method::PUT, self.at(segments), Some(body), Idempotence::Safe)
            .await
    }

    /// `POST` without a body (pause, resume), its JSON answer decoded.
    pub(crate) async fn post_empty<T: DeserializeOwned>(&self, segments: &[&str]) -> Result<T, Error> {
        self.json::<(), _>(Method::POST, self.at(segments), None, Idempotence::Safe)
            .await
    }

    /// `DELETE` of a path below the base: a try again after an unknown outcome that finds nothing counts
    /// as done.
    pub(crate) async fn delete_path(&self, segments: &[&str]) -> Result<(), Error> {
        gone_is_done(
            self.send::<()>(Method::DELETE, self.at(segments), None, Idempotence::Safe, None)
                .await,
        )
    }

    pub(crate) fn at(&self, segments: &[&str]) -> Url {
        self.url(segments, &[])
    }

    pub(crate) fn at_query(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        self.url(segments, query)
    }

    /// `GET /v1/jobs/{id}`.
    pub async fn get(&self, id: &str) -> Result<Job, Error> {
        self.read(&["v1", "jobs", id]).await
    }

    /// `GET /v1/jobs/{id}/attempts`: the job's deliveries so far and its newest 20 attempts, newest
    /// first, each with how it ended and who made it: what to read when a job keeps failing, since
    /// `last_error` holds only the latest failure.
    pub async fn attempts(&self, id: &str) -> Result<Attempts, Error> {
        self.read(&["v1", "jobs", id, "attempts"]).await
    }

    /// `DELETE /v1/jobs/{id}`: removes the job in any state. A try again that finds it gone counts as
    /// done.
    pub async fn cancel(&self, id: &str) -> Result<(), Error> {
        self.delete_path(&["v1", "jobs", id]).await
    }

    /// `PATCH /v1/jobs/{id}`: a delayed or ready job is due again at `when`.
    pub async fn reschedule(&self, id: &str, when: When) -> Result<Job, Error> {
        self.patch(id, &RescheduleRequest::from(when)).await
    }

    /// `PATCH /v1/jobs/{id}` with `priority`: a delayed or ready job takes its new place in line (lower
    /// is more urgent), its due time kept.
    pub async fn set_priority(&self, id: &str, priority: u32) -> Result<Job, Error> {
        let request = RescheduleRequest {
            priority: Some(priority.into()),
            ..RescheduleRequest::default()
        };
        self.patch(id, &request).await
    }

    /// `PATCH /v1/jobs/{id}` with any of its fields: a new due time, a new priority, or both at once.
    pub async fn patch(&self, id: &str, request: &RescheduleRequest) -> Result<Job, Error> {
        self.json(
            Method::PATCH,
            self.at(&["v1", "jobs", id]),
            Some(request),
            Idempotence::Safe,
        )
        .await
    }

    /// `POST /v1/reserve`. Sent again only when the first try surely reserved nothing: a reserve whose
    /// answer was lost holds its jobs until their TTR ends, and they are then handed out again.
    pub async fn reserve(&self, request: &ReserveRequest) -> Result<Vec<Reservation>, Error> {
        let timeout = self
            .timeout
            .max(Duration::from_millis(request.wait()) + LONG_POLL_SLACK);
        let tried = self
            .send(
                Method::POST,
                self.at(&["v1", "reserve"]),
                Some(request),
                Idempotence::Unsafe,
                Some(timeout),
            )
            .await;
        Ok(decode::<ReserveAnswer<Value>>(tried.result?)?.jobs)
    }

    /// `POST /v1/jobs/{id}/ack`: the job is done.
    pub async fn ack(&self, id: &str, receipt: &str) -> Result<(), Error> {
        let tried = self
            .send(
                Method::POST,
                self.at(&["v1", "jobs", id, "ack"]),
                Some(&AckRequest {
                    receipt: receipt.to_string(),
                    consumer: self.consumer.clone(),
                    push: None,
                }),
                Idempotence::Safe,
                None,
            )
            .await;
        match tried.result {
            Ok(_) => Ok(()),
            Err(e) if tried.after_unknown && e.is_code("stale_receipt") => {
                self.acked_before(id).await.then_some(()).ok_or(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the job is done or gone: what an ack tried again after an unknown outcome, that found
    /// its receipt stale, learns from a look-up.
    async fn acked_before(&self, id: &str) -> bool {
        match self.get(id).await {
            Ok(job) => job.state == "done",
            Err(e) => e.is_code("not_found"),
        }
    }

    /// `POST /v1/jobs/ack`: settles many reservations in one request; one result per entry, in order.
    pub async fn ack_many<S: AsRef<str>>(&self, acks: &[(S, S)]) -> Result<Vec<Result<(), ApiError>>, Error> {
        let body = AckManyRequest {
            acks: acks
                .iter()
                .map(|(id, receipt)| AckEntry {
                    id: id.as_ref().to_string(),
                    receipt: receipt.as_ref().to_string(),
                    consumer: self.consumer.clone(),
                })
                .collect(),
        };
        let tried = self
            .send(
                Method::POST,
                self.at(&["v1", "jobs", "ack"]),
                Some(&body),
                Idempotence::Safe,
                None,
            )
            .await;
        let results = decode::<AckManyAnswer>(tried.result?)?.results;
        let mut out = Vec::with_capacity(results.len());
        for (entry, (id, _)) in results.into_iter().zip(acks) {
            let entry = match entry {
                AckResult::Acked(_) => Ok(()),
                AckResult::Failed(ErrorBody { error }) => Err(ApiError::from_detail(error, 200)),
            };
            out.push(match entry {
                Ok(()) => Ok(()),
                Err(e) if tried.after_unknown && e.code == "stale_receipt" && self.acked_before(id.as_ref()).await => {
                    Ok(())
                }
                Err(e) => Err(e),
            });
        }
        Ok(out)
    }

    /// `POST /v1/jobs/{id}/nack`: the delivery failed; the job is retried (or goes dead). Sent again only
    /// when the first try surely did nothing.
    pub async fn nack(&self, id: &str, receipt: &str, nack: &Nack) -> Result<(), Error> {
        self.send(
            Method::POST,
            self.at(&["v1", "jobs", id, "nack"]),
            Some(&nack.request(receipt, self.consumer.clone())),
            Idempotence::Unsafe,
            None,
        )
        .await
        .result
        .map(drop)
    }

    /// `POST /v1/jobs/{id}/touch`: the reservation lasts `ttr_ms` (or the job's TTR) from now; answers
    /// the new deadline.
    pub async fn touch(&self, id: &str, receipt: &str, ttr_ms: Option<u64>) -> Result<i64, Error> {
        let body = TouchRequest {
            receipt: receipt.to_string(),
            ttr_ms: ttr_ms.map(|t| i64::try_from(t).unwrap_or(i64::MAX)),
        };
        let d: Touched = self
            .json(
                Method::POST,
                self.at(&["v1", "jobs", id, "touch"]),
                Some(&body),
                Idempotence::Safe,
            )
            .await?;
        Ok(d.deadline)
    }
}

/// Decodes a success's JSON body.
pub(crate) fn decode<T: DeserializeOwned>(sent: Sent) -> Result<T, Error> {
    serde_json::from_slice(&sent.body).map_err(|e| Error::Decode {
        status: sent.status.as_u16(),
        detail: e.to_string(),
    })
}

/// The outcome of a delete: a try again after an unknown outcome that finds nothing counts as done.
fn gone_is_done(tried: Tried) -> Result<(), Error> {
    match tried.result {
        Ok(_) => Ok(()),
        Err(e) if tried.after_unknown && e.is_code("not_found") => Ok(()),
        Err(e) => Err(e),
    }
}
