//! The connection to Ironic: microversion negotiation, authentication, retries of
//! busy answers and the memory of recent node writes. The typed calls live in
//! [`super::nodes`], [`super::node_details`] and [`super::ports`].

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hyper::body::Bytes;
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use url::Url;

use super::config::{ClientConfig, IronicAuth};
use super::error::{IronicError, fault_string, without_credentials};
use super::types::Microversion;

/// The oldest Ironic API bmo talks to (the same floor as upstream metal3).
pub const MIN_MICROVERSION: Microversion = Microversion::new(1, 89);
/// The newest microversion bmo knows the behaviour of; it asks for no more than this.
const MAX_MICROVERSION: Microversion = Microversion::new(1, 95);
const VERSION_HEADER: &str = "X-OpenStack-Ironic-API-Version";

/// A connected Ironic API client with a negotiated microversion.
#[derive(Debug, Clone)]
pub struct IronicClient {
    http: reqwest::Client,
    endpoint: Url,
    auth: IronicAuth,
    microversion: Microversion,
    max_attempts: u32,
    retry_base_delay: Duration,
    /// Requests answered "node locked" (409) or 503 and sent again, for tests and metrics.
    busy_retries: Arc<AtomicU64>,
    /// When each node (by the UUID or name a request used) was last written to
    /// through this client (or its clones): a list taken before that is out of date
    /// for the node.
    node_writes: Arc<Mutex<HashMap<String, Instant>>>,
}

/// How long a write is remembered for [`IronicClient::last_write`]; lists older
/// than this are not used.
const NODE_WRITE_MEMORY: Duration = Duration::from_secs(120);

#[derive(serde::Deserialize)]
struct VersionDoc {
    version: VersionInfo,
}

#[derive(serde::Deserialize)]
struct VersionInfo {
    version: String,
}

/// How long an idle connection to Ironic is kept for the next request: under the
/// time after which Ironic's servers close one (cheroot, Ironic's own: 10 s; Apache
/// httpd's default: 5 s). A request sent on a connection as the server closes it
/// fails ("connection closed before message completed") and costs a retry.
const IDLE_CONNECTION: Duration = Duration::from_secs(4);

impl IronicClient {
    /// Builds the HTTP client, negotiates the microversion with Ironic and checks that
    /// Ironic accepts the credentials.
    pub async fn connect(config: ClientConfig) -> Result<Self, IronicError> {
        let mut endpoint = config.endpoint.clone();
        if !endpoint.path().ends_with('/') {
            endpoint.set_path(&format!("{}/", endpoint.path()));
        }
        let mut builder = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .pool_idle_timeout(IDLE_CONNECTION)
            .user_agent(concat!("bmo/", env!("CARGO_PKG_VERSION")));
        // Trust: the CA file alone when one is given (as upstream uses it), none for
        // plain HTTP, else the system's roots. Only the last needs a CA bundle on the
        // machine, which an appliance or an air-gapped node may not have.
        if let Some(ca) = &config.ca_file {
            let pem = std::fs::read(ca).map_err(|e| {
                IronicError::Setup(format!("cannot read Ironic CA file {}: {e}", ca.display()))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                IronicError::Setup(format!("Ironic CA file {} is not PEM: {e}", ca.display()))
            })?;
            builder = builder.tls_certs_only(certs);
        } else if endpoint.scheme() == "http" {
            builder = builder.tls_certs_only([]);
        }
        if config.insecure {
            builder = builder.danger_accept_invalid_certs(true);
        }
        let http = builder.build().map_err(|e| {
            IronicError::Setup(format!(
                "{} (for an https IRONIC_ENDPOINT without IRONIC_CACERT_FILE, the system's CA \
                 certificates are used: install them, e.g. Debian's ca-certificates, or set \
                 IRONIC_CACERT_FILE)",
                crate::telemetry::with_causes(&e)
            ))
        })?;
        let mut client = Self {
            http,
            endpoint,
            auth: config.auth,
            microversion: MIN_MICROVERSION,
            max_attempts: config.max_attempts.max(1),
            retry_base_delay: config.retry_base_delay,
            busy_retries: Arc::default(),
            node_writes: Arc::default(),
        };
        client.microversion = client.negotiate().await?;
        // The version document is public; a small authenticated read proves the
        // credentials now rather than at the first host.
        client.check().await?;
        Ok(client)
    }

    /// Whether Ironic answers an authenticated read (one node's uuid at most).
    pub async fn check(&self) -> Result<(), IronicError> {
        let query = [("limit", "1"), ("fields", "uuid")];
        self.call_with_query::<Value, ()>(Method::GET, &["nodes"], &query, None)
            .await
            .map(|_| ())
    }

    /// The microversion sent with every request.
    pub fn microversion(&self) -> Microversion {
        self.microversion
    }

    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    /// How many requests this client (and its clones) sent again because Ironic said
    /// the node was locked (409) or it was unavailable (503).
    pub fn busy_retries(&self) -> u64 {
        self.busy_retries.load(Ordering::Relaxed)
    }

    async fn negotiate(&self) -> Result<Microversion, IronicError> {
        let doc: VersionDoc = self
            .get(&[])
            .await?
            .ok_or_else(|| self.decode_error(&Method::GET, "", "empty version document"))?;
        let max: Microversion = doc
            .version
            .version
            .parse()
            .map_err(|e: String| self.decode_error(&Method::GET, "", &e))?;
        if max < MIN_MICROVERSION {
            return Err(IronicError::MicroversionTooOld {
                endpoint: without_credentials(&self.endpoint),
                max,
                needed: MIN_MICROVERSION,
            });
        }
        Ok(max.min(MAX_MICROVERSION))
    }

    pub(super) fn decode_error(&self, method: &Method, path: &str, detail: &str) -> IronicError {
        IronicError::Decode {
            method: method.to_string(),
            path: format!("/{path}"),
            detail: detail.to_owned(),
        }
    }

    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.endpoint.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// Sends one request, retrying 409 and 503 with jittered exponential backoff.
    /// `Ok(None)` is an empty (204) answer.
    pub(super) async fn call<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&B>,
    ) -> Result<Option<T>, IronicError> {
        self.call_with_query(method, segments, &[], body).await
    }

    /// No answer from Ironic; the error names the endpoint without its credentials.
    fn unreachable(&self, source: reqwest::Error) -> IronicError {
        IronicError::Unreachable {
            endpoint: without_credentials(&self.endpoint),
            source: source.without_url(),
        }
    }

    /// A `GET` of a document; `None` when the answer is empty.
    pub(super) async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
    ) -> Result<Option<T>, IronicError> {
        self.get_with_query(segments, &[]).await
    }

    pub(super) async fn get_with_query<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, &str)],
    ) -> Result<Option<T>, IronicError> {
        self.call_with_query(Method::GET, segments, query, Option::<&()>::None)
            .await
    }

    /// A `PUT` whose answer, if any, is not needed.
    pub(super) async fn put<B: Serialize + ?Sized>(
        &self,
        segments: &[&str],
        body: &B,
    ) -> Result<(), IronicError> {
        self.call::<Value, _>(Method::PUT, segments, Some(body))
            .await
            .map(drop)
    }

    /// When a request through this client last wrote to the node `ident` (UUID or
    /// name, as the request named it), if within [`NODE_WRITE_MEMORY`].
    pub fn last_write(&self, ident: &str) -> Option<Instant> {
        let writes = self
            .node_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        writes.get(ident).copied()
    }

    /// Records a write to the node a request to `segments` names, if any.
    fn record_node_write(&self, method: &Method, segments: &[&str]) {
        if *method == Method::GET {
            return;
        }
        let [first, ident, ..] = segments else {
            return;
        };
        if *first != "nodes" {
            return;
        }
        let now = Instant::now();
        let mut writes = self
            .node_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        writes.retain(|_, at| now.duration_since(*at) < NODE_WRITE_MEMORY);
        writes.insert((*ident).to_owned(), now);
    }

    pub(super) async fn call_with_query<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<&B>,
    ) -> Result<Option<T>, IronicError> {
        let answer = self.send(&method, segments, query, body).await;
        // Recorded once the answer is in, whatever it is: a list taken after this
        // shows the write's effect.
        self.record_node_write(&method, segments);
        let Some(bytes) = answer? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| self.decode_error(&method, &segments.join("/"), &e.to_string()))
    }

    /// The body of a successful answer, `None` when empty. Not generic over the
    /// answer's type: the retry loop is compiled once per request body type.
    async fn send<B: Serialize + ?Sized>(
        &self,
        method: &Method,
        segments: &[&str],
        query: &[(&str, &str)],
        body: Option<&B>,
    ) -> Result<Option<Bytes>, IronicError> {
        let url = self.url(segments);
        let path = segments.join("/");
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut req = self
                .http
                .request(method.clone(), url.clone())
                .header(VERSION_HEADER, self.microversion.to_string());
            if !query.is_empty() {
                req = req.query(query);
            }
            if let IronicAuth::Basic(creds) = &self.auth {
                req = req.basic_auth(&creds.username, Some(creds.password.expose()));
            }
            if let Some(body) = body {
                req = req.json(body);
            }
            let resp = req.send().await.map_err(|e| self.unreachable(e))?;
            let status = resp.status();
            if status.is_success() {
                let bytes = resp.bytes().await.map_err(|e| self.unreachable(e))?;
                let empty = status == StatusCode::NO_CONTENT || bytes.is_empty();
                return Ok((!empty).then_some(bytes));
            }
            if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                return Err(IronicError::Unauthorized {
                    endpoint: without_credentials(&self.endpoint),
                    status,
                });
            }
            let text = resp.text().await.unwrap_or_default();
            // 409 also means "wrong state" (InvalidState), which waiting does not fix;
            // only a lock held by a conductor goes away by itself.
            let retryable = status == StatusCode::SERVICE_UNAVAILABLE
                || (status == StatusCode::CONFLICT && is_locked_message(&text));
            if retryable && attempt < self.max_attempts {
                self.busy_retries.fetch_add(1, Ordering::Relaxed);
                let delay = jittered_backoff(self.retry_base_delay, attempt);
                tracing::debug!(%status, attempt, ?delay, path = %path, "Ironic busy, retrying");
                tokio::time::sleep(delay).await;
                continue;
            }
            return Err(IronicError::Api {
                method: method.to_string(),
                path: format!("/{path}"),
                status,
                message: fault_string(&text),
            });
        }
    }
}

/// Whether a 409 body is Ironic's NodeLocked ("Node X is locked by host Y, please
/// retry after the current operation is completed.").
fn is_locked_message(body: &str) -> bool {
    let message = fault_string(body).to_ascii_lowercase();
    message.contains("is locked by") || message.contains("please retry")
}

/// `base * 2^(attempt-1)`, capped at 30 s, scaled by a random factor in [0.5, 1.5) so
/// that many callers retrying the same locked node spread out.
fn jittered_backoff(base: Duration, attempt: u32) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    let capped = exp.min(Duration::from_secs(30));
    let random = std::hash::RandomState::new().build_hasher().finish();
    let factor = 0.5 + (random % 1000) as f64 / 1000.0;
    capped.mul_f64(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_stays_bounded() {
        let base = Duration::from_millis(100);
        for attempt in 1..40 {
            let d = jittered_backoff(base, attempt);
            assert!(d <= Duration::from_secs(45), "attempt {attempt}: {d:?}");
            let nominal = base
                .saturating_mul(1 << (attempt - 1).min(16))
                .min(Duration::from_secs(30));
            assert!(
                d >= nominal / 2,
                "attempt {attempt}: {d:?} < half of {nominal:?}"
            );
        }
    }

    #[test]
    fn only_a_lock_conflict_is_worth_waiting_for() {
        let locked = r#"{"error_message": "{\"faultstring\": \"Node 1be26c0b is locked by host bmo-test-conductor, please retry after the current operation is completed.\", \"faultcode\": \"Client\"}"}"#;
        assert!(is_locked_message(locked));
        let wrong_state = r#"{"error_message": "{\"faultstring\": \"The requested action \\\"deleted\\\" can not be performed on node \\\"x\\\" while it is in state \\\"enroll\\\".\", \"faultcode\": \"Client\"}"}"#;
        assert!(!is_locked_message(wrong_state));
    }
}
