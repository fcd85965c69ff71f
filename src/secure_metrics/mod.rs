//! `/metrics` over HTTPS for callers the API server vouches for, as upstream serves
//! its metrics (port 8443 on a Service): a bearer token that TokenReview accepts and
//! whose user SubjectAccessReview allows `get` on `/metrics`. The plain-HTTP
//! `/metrics` on `BMO_HEALTH_ADDR` stays for systemd installs.

mod auth;
mod cert;
mod expiry;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use auth::{Authorizer, Verdict};
pub use cert::CertError;

use crate::metrics::Metrics;

/// Settings of the secured metrics endpoint; off unless an address is given.
#[derive(Debug, Clone, clap::Args)]
pub struct SecureMetricsSettings {
    /// Serve `/metrics` over HTTPS here, to bearer tokens the API server authorises
    /// for `get` on `/metrics` (upstream's metrics Service uses port 8443).
    #[arg(long, env = "BMO_METRICS_SECURE_ADDR")]
    pub metrics_secure_addr: Option<SocketAddr>,
    /// Directory holding `tls.crt` and `tls.key` for it; a self-signed certificate
    /// is made when unset.
    #[arg(long, env = "BMO_METRICS_CERT_DIR")]
    pub metrics_cert_dir: Option<PathBuf>,
}

/// Why the secured endpoint cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SecureMetricsError {
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("BMO_METRICS_SECURE_ADDR={addr}: cannot listen: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Connections served at once; a scraper needs one.
const MAX_CONNECTIONS: usize = 64;
/// A client that has not finished its TLS handshake and request headers by then is
/// dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
struct Endpoint {
    metrics: Arc<Metrics>,
    authorizer: Arc<Authorizer>,
}

impl SecureMetricsSettings {
    /// Starts serving when an address is set; the task ends when `stop` resolves.
    pub async fn serve(
        &self,
        client: kube::Client,
        metrics: Arc<Metrics>,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<Option<tokio::task::JoinHandle<()>>, SecureMetricsError> {
        let Some(addr) = self.metrics_secure_addr else {
            return Ok(None);
        };
        let names = vec!["localhost".to_owned(), addr.ip().to_string()];
        let (tls, not_after) = cert::server_config(self.metrics_cert_dir.as_deref(), &names)?;
        if let Some(not_after) = not_after {
            metrics.set_certificate_not_after(not_after);
        }
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| SecureMetricsError::Listen { addr, source })?;
        let bound = listener.local_addr().unwrap_or(addr);
        let self_signed = self.metrics_cert_dir.is_none();
        tracing::info!(addr = %bound, self_signed, "serving /metrics over HTTPS to authorised tokens");
        let endpoint = Endpoint {
            metrics,
            authorizer: Arc::new(Authorizer::new(client, "/metrics")),
        };
        let app = Router::new()
            .route("/metrics", get(secured_metrics))
            .with_state(endpoint);
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        Ok(Some(tokio::spawn(async move {
            tokio::select! {
                () = accept_loop(listener, acceptor, app) => {}
                () = stop => {}
            }
        })))
    }
}

async fn accept_loop(listener: TcpListener, acceptor: tokio_rustls::TlsAcceptor, app: Router) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "secured /metrics: over the connection cap; dropped");
            continue;
        };
        let (acceptor, service) = (acceptor.clone(), TowerToHyperService::new(app.clone()));
        tokio::spawn(async move {
            let _slot = slot;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "secured /metrics: TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT);
            if let Err(e) = builder.serve_connection(TokioIo::new(tls), service).await {
                tracing::debug!(%peer, error = %e, "secured /metrics: connection closed");
            }
        });
    }
}

async fn secured_metrics(State(endpoint): State<Endpoint>, headers: HeaderMap) -> Response {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match endpoint.authorizer.check(authorization).await {
        Verdict::Allowed => (
            [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
            endpoint.metrics.render(),
        )
            .into_response(),
        Verdict::Unauthenticated => (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response(),
        Verdict::Forbidden => (StatusCode::FORBIDDEN, "Forbidden\n").into_response(),
    }
}
