//! HTTP boot server (axum): iPXE scripts, loaders, IPA images, Ironic's http_root,
//! health and the lease table as JSON.
//!
//! Files are streamed from disk in 256 KiB chunks, never read whole; HEAD, single
//! byte ranges, ETag / Last-Modified and their conditional requests are honoured.

use std::io::SeekFrom;
use std::path::PathBuf;
use std::time::SystemTime;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::watch;
use tokio_util::io::ReaderStream;

use super::address::Choice;
use super::boot_log::BootLog;
use super::cpio;
use super::deploy_images::{DEFAULT_KERNEL, DEFAULT_RAMDISK};
use super::files::{Loaders, Refusal, Source, clean, resolve_in};
use super::host_ramdisks::HostRamdisks;
use super::http_server::Peer;
use super::ipxe;
use super::leases::LeaseTable;

/// Who may read the lease table; a setting (`BMO_HTTP_LEASES`), hence defined there.
pub use super::config::LeasesAccess;

const CHUNK: usize = 256 * 1024;

/// What the HTTP server serves.
#[derive(Clone)]
pub struct HttpState {
    pub http_root: PathBuf,
    pub images_dir: PathBuf,
    pub loaders: Loaders,
    pub leases: LeaseTable,
    pub address: watch::Receiver<Choice>,
    pub port: u16,
    pub kernel_url: Option<String>,
    pub ramdisk_url: Option<String>,
    pub kernel_params: String,
    pub leases_access: LeasesAccess,
    /// The per-host ramdisks of PreprovisioningImages bmo builds.
    pub host_ramdisks: HostRamdisks,
}

impl HttpState {
    /// Deploy kernel URL: configured, or bmo's own on the current provisioning IP.
    pub fn kernel_url(&self) -> String {
        self.kernel_url.clone().unwrap_or_else(|| {
            format!(
                "{}/images/{DEFAULT_KERNEL}",
                self.address.borrow().http_base(self.port)
            )
        })
    }

    pub fn ramdisk_url(&self) -> String {
        self.ramdisk_url.clone().unwrap_or_else(|| {
            format!(
                "{}/images/{DEFAULT_RAMDISK}",
                self.address.borrow().http_base(self.port)
            )
        })
    }
}

/// The HTTP boot server's routes; each request goes into `boot_log`.
pub fn router(state: HttpState, boot_log: BootLog) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/bmo/v1/leases", get(leases))
        .fallback(serve)
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(
            boot_log,
            super::http_activity::recorded,
        ))
}

/// `GET /bmo/v1/leases`: the lease table, read-only, to whom `BMO_HTTP_LEASES` allows.
async fn leases(State(state): State<HttpState>, request: Request) -> Response {
    let peer = request.extensions().get::<Peer>().map(|p| p.0.ip());
    let allowed = match state.leases_access {
        LeasesAccess::All => true,
        LeasesAccess::Localhost => peer.is_some_and(|ip| ip.to_canonical().is_loopback()),
        LeasesAccess::Off => false,
    };
    if !allowed {
        return (
            StatusCode::FORBIDDEN,
            "the lease table is not served to this client (BMO_HTTP_LEASES)\n",
        )
            .into_response();
    }
    axum::Json(state.leases.list()).into_response()
}

async fn serve(
    State(state): State<HttpState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "GET, HEAD")],
            "",
        )
            .into_response();
    }
    let Some(path) = percent_decode(uri.path()) else {
        return (StatusCode::BAD_REQUEST, "bad percent-encoding in path\n").into_response();
    };
    let parts = match clean(&path) {
        Ok(p) => p,
        Err(_) => return refused(&path),
    };
    let head = method == Method::HEAD;
    let from_root = |parts: &[&str]| resolve_in(&state.http_root, parts);
    let found = match parts.as_slice() {
        ["ipxe", name] => state.loaders.get(name).ok_or(Refusal::NotFound),
        ["images", rest @ ..] => resolve_in(&state.images_dir, rest).map(Source::File),
        ["preprovisioning", namespace, name, version, file] if *file == DEFAULT_RAMDISK => {
            return host_ramdisk(&state, namespace, name, version, head);
        }
        ["boot.ipxe"] => match from_root(&parts) {
            Err(Refusal::NotFound) => return script(ipxe::BOOT_SCRIPT.to_owned(), head),
            other => other.map(Source::File),
        },
        ["inspector.ipxe"] => match from_root(&parts) {
            Err(Refusal::NotFound) => {
                let body = ipxe::inspector_script(
                    &state.kernel_url(),
                    &state.ramdisk_url(),
                    &state.kernel_params,
                );
                return script(body, head);
            }
            other => other.map(Source::File),
        },
        [] => Err(Refusal::NotFound),
        _ => from_root(&parts).map(Source::File),
    };
    match found {
        Ok(src) => send(src, &headers, head).await,
        Err(Refusal::Outside) => refused(&path),
        Err(Refusal::NotFound) => (StatusCode::NOT_FOUND, "not found\n").into_response(),
    }
}

/// Host `namespace/name`'s ramdisk at `version`: the IPA ramdisk from the images
/// directory, zeros up to a multiple of 4 bytes, then the host's cpio archive. Sent
/// whole (no ranges): Ironic and iPXE fetch ramdisks in one request.
fn host_ramdisk(
    state: &HttpState,
    namespace: &str,
    name: &str,
    version: &str,
    head: bool,
) -> Response {
    let Some(archive) = state.host_ramdisks.get(namespace, name, version) else {
        return (StatusCode::NOT_FOUND, "no such preprovisioning image\n").into_response();
    };
    let Ok(opened) = resolve_in(&state.images_dir, &[DEFAULT_RAMDISK]) else {
        return (
            StatusCode::NOT_FOUND,
            "the IPA ramdisk is not in BMO_IMAGES_DIR\n",
        )
            .into_response();
    };
    let base = opened.metadata.len();
    let mut tail = vec![0u8; usize::try_from(cpio::padding_after(base)).unwrap_or(0)];
    tail.extend_from_slice(&archive);
    let builder = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, base + tail.len() as u64)
        .header(header::CACHE_CONTROL, "no-cache");
    if head {
        return builder.body(Body::empty()).unwrap_or_default();
    }
    let file = tokio::fs::File::from_std(opened.file);
    let stream = ReaderStream::with_capacity(file.take(base), CHUNK).chain(futures::stream::once(
        async move { Ok(axum::body::Bytes::from(tail)) },
    ));
    builder.body(Body::from_stream(stream)).unwrap_or_default()
}

fn refused(path: &str) -> Response {
    tracing::debug!(path, "HTTP request outside the served directories refused");
    (
        StatusCode::FORBIDDEN,
        "path outside the served directories\n",
    )
        .into_response()
}

fn script(body: String, head: bool) -> Response {
    let len = body.len();
    let body = if head {
        Body::empty()
    } else {
        Body::from(body)
    };
    let mut r = Response::new(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// A byte range to send, inclusive.
#[derive(Debug, PartialEq, Eq)]
enum RangeSpec {
    Full,
    Part(u64, u64),
    Unsatisfiable,
}

/// Parses a `Range` header for a body of `len` bytes. Multiple ranges and unknown
/// units are answered with the whole body, as RFC 9110 allows.
fn parse_range(value: &str, len: u64) -> RangeSpec {
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return RangeSpec::Full;
    };
    if spec.contains(',') {
        return RangeSpec::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return RangeSpec::Full;
    };
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        let Ok(n) = b.parse::<u64>() else {
            return RangeSpec::Full;
        };
        if n == 0 || len == 0 {
            return RangeSpec::Unsatisfiable;
        }
        return RangeSpec::Part(len.saturating_sub(n), len - 1);
    }
    let Ok(start) = a.parse::<u64>() else {
        return RangeSpec::Full;
    };
    let end = if b.is_empty() {
        len.saturating_sub(1)
    } else {
        match b.parse::<u64>() {
            Ok(e) if e >= start => e.min(len.saturating_sub(1)),
            _ => return RangeSpec::Full,
        }
    };
    if start >= len {
        return RangeSpec::Unsatisfiable;
    }
    RangeSpec::Part(start, end)
}

/// What identifies a version of `src`: its length, ETag and modification time.
fn validators(src: &Source) -> (u64, String, Option<SystemTime>) {
    match src {
        Source::Embedded { data, hash } => (data.len() as u64, format!("\"{hash}\""), None),
        Source::File(opened) => {
            let m = &opened.metadata;
            let mtime = m.modified().ok();
            let nanos = mtime
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            (m.len(), format!("\"{:x}-{nanos:x}\"", m.len()), mtime)
        }
    }
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether the client's copy is current (`If-None-Match`, else `If-Modified-Since`).
fn not_modified(headers: &HeaderMap, etag: &str, modified: Option<SystemTime>) -> bool {
    match header_str(headers, header::IF_NONE_MATCH) {
        Some(inm) => inm.split(',').any(|t| {
            let t = t.trim();
            t == "*" || t.trim_start_matches("W/") == etag
        }),
        None => match (header_str(headers, header::IF_MODIFIED_SINCE), modified) {
            (Some(ims), Some(m)) => httpdate::parse_http_date(ims)
                .is_ok_and(|since| httpdate::HttpDate::from(m) <= httpdate::HttpDate::from(since)),
            _ => false,
        },
    }
}

/// Whether a `Range` may be honoured: no `If-Range`, or one naming this version.
fn if_range_holds(headers: &HeaderMap, etag: &str, modified: Option<SystemTime>) -> bool {
    match header_str(headers, header::IF_RANGE) {
        None => true,
        Some(v) if v.starts_with('"') => v == etag,
        Some(v) => match (httpdate::parse_http_date(v), modified) {
            (Ok(d), Some(m)) => httpdate::HttpDate::from(m) == httpdate::HttpDate::from(d),
            _ => false,
        },
    }
}

async fn send(src: Source, headers: &HeaderMap, head: bool) -> Response {
    let (len, etag, modified) = validators(&src);
    let mut builder = Response::builder()
        .header(header::ETAG, &etag)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::CONTENT_TYPE, content_type(&src));
    if let Some(m) = modified {
        builder = builder.header(header::LAST_MODIFIED, httpdate::fmt_http_date(m));
    }
    if not_modified(headers, &etag, modified) {
        return builder
            .status(StatusCode::NOT_MODIFIED)
            .body(Body::empty())
            .unwrap_or_default();
    }
    let range = match header_str(headers, header::RANGE) {
        Some(r) if if_range_holds(headers, &etag, modified) => parse_range(r, len),
        _ => RangeSpec::Full,
    };
    let (status, start, count) = match range {
        RangeSpec::Full => (StatusCode::OK, 0, len),
        RangeSpec::Part(a, b) => {
            builder = builder.header(header::CONTENT_RANGE, format!("bytes {a}-{b}/{len}"));
            (StatusCode::PARTIAL_CONTENT, a, b - a + 1)
        }
        RangeSpec::Unsatisfiable => {
            return builder
                .status(StatusCode::RANGE_NOT_SATISFIABLE)
                .header(header::CONTENT_RANGE, format!("bytes */{len}"))
                .body(Body::empty())
                .unwrap_or_default();
        }
    };
    builder = builder.status(status).header(header::CONTENT_LENGTH, count);
    if head {
        return builder.body(Body::empty()).unwrap_or_default();
    }
    match body(src, start, count).await {
        Some(body) => builder.body(body).unwrap_or_default(),
        None => (StatusCode::INTERNAL_SERVER_ERROR, "seek failed\n").into_response(),
    }
}

/// `count` bytes of `src` from `start`; `None` when the file cannot seek there.
async fn body(src: Source, start: u64, count: u64) -> Option<Body> {
    match src {
        Source::Embedded { data, .. } => {
            let slice = data[start as usize..(start + count) as usize].to_vec();
            Some(Body::from(slice))
        }
        Source::File(opened) => {
            // The descriptor checked by resolve_in, never the path again.
            let mut file = tokio::fs::File::from_std(opened.file);
            if start > 0 && file.seek(SeekFrom::Start(start)).await.is_err() {
                return None;
            }
            Some(Body::from_stream(ReaderStream::with_capacity(
                file.take(count),
                CHUNK,
            )))
        }
    }
}

fn content_type(src: &Source) -> &'static str {
    let name = match src {
        Source::File(opened) => opened
            .path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or(""),
        Source::Embedded { .. } => "",
    };
    match name {
        "ipxe" | "txt" | "cfg" => "text/plain; charset=utf-8",
        "json" => "application/json",
        "iso" => "application/x-iso9660-image",
        _ => "application/octet-stream",
    }
}

/// Decodes `%XX` escapes; `None` for malformed escapes or non-UTF-8 results.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-99", 1000), RangeSpec::Part(0, 99));
        assert_eq!(parse_range("bytes=900-", 1000), RangeSpec::Part(900, 999));
        assert_eq!(parse_range("bytes=-100", 1000), RangeSpec::Part(900, 999));
        assert_eq!(parse_range("bytes=-5000", 1000), RangeSpec::Part(0, 999));
        assert_eq!(
            parse_range("bytes=990-2000", 1000),
            RangeSpec::Part(990, 999)
        );
        assert_eq!(parse_range("bytes=1000-", 1000), RangeSpec::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-1,5-6", 1000), RangeSpec::Full);
        assert_eq!(parse_range("items=0-1", 1000), RangeSpec::Full);
        assert_eq!(parse_range("bytes=5-1", 1000), RangeSpec::Full);
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("/a%2e%2E/b").as_deref(), Some("/a../b"));
        assert_eq!(percent_decode("/%2e%2e/etc").as_deref(), Some("/../etc"));
        assert_eq!(percent_decode("/%zz"), None);
        assert_eq!(percent_decode("/%ff"), None);
    }
}
