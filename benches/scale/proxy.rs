//! The counting proxies bmo talks to Ironic and the kube-apiserver through: plain HTTP
//! on loopback, forwarded upstream (the kube-apiserver over TLS), every request counted
//! once by its kind (verb and resource, names replaced by `{}`), a watch included.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// How long the proxies keep an idle connection to Ironic: under the 10 s after which
/// Ironic's server closes one.
const UPSTREAM_IDLE: Duration = Duration::from_secs(4);

#[derive(Default)]
pub struct Counts {
    total: AtomicU64,
    by_kind: Mutex<BTreeMap<String, u64>>,
}

impl Counts {
    fn add(&self, kind: String) {
        self.total.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut map) = self.by_kind.lock() {
            *map.entry(kind).or_default() += 1;
        }
    }

    pub fn snapshot(&self) -> (u64, BTreeMap<String, u64>) {
        let map = self.by_kind.lock().map(|m| m.clone()).unwrap_or_default();
        (self.total.load(Ordering::Relaxed), map)
    }
}

pub fn diff(
    after: &BTreeMap<String, u64>,
    before: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

#[derive(Clone, Copy)]
pub enum Flavor {
    Kube,
    Ironic,
}

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    client: reqwest::Client,
    counts: Arc<Counts>,
    flavor: Flavor,
}

/// A request's kind for the breakdown: verb and resource, names replaced by `{}`.
fn classify(flavor: Flavor, method: &str, path: &str, query: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match flavor {
        Flavor::Kube => {
            let watch = query
                .split('&')
                .any(|q| q == "watch=true" || q == "watch=1");
            let verb = if watch { "WATCH" } else { method };
            match segments.iter().position(|s| *s == "namespaces") {
                Some(i) if segments.len() > i + 2 => {
                    let rest = &segments[i + 2..];
                    let verb = if verb == "GET" && rest.len() == 1 {
                        "LIST"
                    } else {
                        verb
                    };
                    match rest {
                        [resource] | [resource, _] => format!("{verb} {resource}"),
                        [resource, _, sub, ..] => format!("{verb} {resource}/{sub}"),
                        [] => format!("{verb} {path}"),
                    }
                }
                _ => {
                    let verb = if verb == "GET" && segments.len() >= 3 && !watch {
                        "LIST"
                    } else {
                        verb
                    };
                    match segments.last() {
                        Some(last) if segments.len() >= 3 => format!("{verb} {last} (all)"),
                        _ => format!("{verb} /{}", segments.join("/")),
                    }
                }
            }
        }
        Flavor::Ironic => {
            let mut out = Vec::with_capacity(segments.len());
            let mut previous = "";
            for s in &segments {
                let named = matches!(previous, "nodes" | "ports") && *s != "detail";
                out.push(if named { "{}" } else { s });
                previous = s;
            }
            format!("{method} /{}", out.join("/"))
        }
    }
}

/// An error and its causes, on one line (reqwest's own message says only which
/// request failed).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text += &format!(": {cause}");
        source = cause.source();
    }
    text
}

async fn forward(State(proxy): State<ProxyState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    proxy.counts.add(classify(
        proxy.flavor,
        parts.method.as_str(),
        parts.uri.path(),
        parts.uri.query().unwrap_or_default(),
    ));
    let body = match axum::body::to_bytes(body, 256 << 20).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let url = format!(
        "{}{}",
        proxy.upstream,
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
    );
    let mut headers: HeaderMap = parts.headers;
    for h in [
        header::HOST,
        header::CONNECTION,
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
    ] {
        headers.remove(h);
    }
    let method = parts.method.clone();
    let upstream = proxy
        .client
        .request(parts.method, url)
        .headers(headers)
        .body(body)
        .send()
        .await;
    match upstream {
        Err(e) => {
            let chain = error_chain(&e);
            eprintln!("scale: proxy: {method} {}: {chain}", parts.uri.path());
            (StatusCode::BAD_GATEWAY, chain).into_response()
        }
        Ok(r) => {
            let status = r.status();
            let mut headers = r.headers().clone();
            headers.remove(header::TRANSFER_ENCODING);
            headers.remove(header::CONNECTION);
            // Streamed chunk by chunk: watches are long-lived responses.
            let stream = futures::stream::try_unfold(r, |mut r| async move {
                Ok::<_, reqwest::Error>(r.chunk().await?.map(|c| (c, r)))
            });
            let mut response = Response::new(Body::from_stream(stream));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            response
        }
    }
}

pub struct Proxy {
    pub port: u16,
    pub counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn start_proxy(upstream: &str, ca_pem: Option<&[u8]>, flavor: Flavor) -> Result<Proxy> {
    // Ironic's API server (cheroot) closes a keep-alive connection after 10 s without
    // a request. A pooled connection idle about that long could be picked just as
    // the server closed it, and the request failed with "connection closed before
    // message completed", which the proxy passed on as a 502 (the direct driver
    // then gave up: N = 100 under load). Pooled connections are dropped first.
    let mut builder = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .pool_idle_timeout(UPSTREAM_IDLE)
        .connect_timeout(Duration::from_secs(10));
    if let Some(pem) = ca_pem {
        builder = builder.add_root_certificate(
            reqwest::Certificate::from_pem(pem).context("the stack's CA certificate")?,
        );
    }
    let counts = Arc::new(Counts::default());
    let state = ProxyState {
        upstream: upstream.trim_end_matches('/').to_owned(),
        client: builder.build().context("build the proxy's HTTP client")?,
        counts: counts.clone(),
        flavor,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("bind a proxy port on loopback")?;
    let port = listener.local_addr()?.port();
    let app = axum::Router::new().fallback(forward).with_state(state);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("scale: proxy stopped: {e}");
        }
    });
    Ok(Proxy { port, counts, task })
}
