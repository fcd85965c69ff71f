//! Records each HTTP boot request in the boot log once its response is over: path,
//! status, the bytes of the body actually sent and whether all of it went.

use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::{Frame, SizeHint};

use super::boot_log::{self, BootLog, BootStep};
use super::http_server::Peer;

/// Paths that are not a boot's: probes and the lease table.
const NOT_BOOT: [&str; 2] = ["/healthz", "/bmo/v1/leases"];

/// The middleware: passes the request on and watches the response body go out.
pub async fn recorded(State(log): State<BootLog>, request: Request, next: Next) -> Response {
    let peer = request.extensions().get::<Peer>().map(|p| p.0.ip());
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let Some(peer) = peer.filter(|_| !NOT_BOOT.contains(&path.as_str())) else {
        return response;
    };
    let (parts, body) = response.into_parts();
    // A streamed file's length is in its header, not in the body's size hint.
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let watched = Watched {
        expected: body.size_hint().exact().or(declared),
        body,
        log,
        peer,
        path,
        status: parts.status.as_u16(),
        started,
        bytes: 0,
        complete: false,
    };
    Response::from_parts(parts, Body::new(watched))
}

/// A response body on its way, recorded when dropped (sent, failed or abandoned). Its
/// size hint is the inner body's, so a length the server knew is still sent as
/// `Content-Length`.
struct Watched {
    body: Body,
    /// The body's length when known: hyper stops polling once it has sent that much.
    expected: Option<u64>,
    log: BootLog,
    peer: IpAddr,
    path: String,
    status: u16,
    started: Instant,
    bytes: u64,
    complete: bool,
}

impl HttpBody for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                let sent = frame.data_ref().map_or(0, Bytes::len);
                self.bytes += sent as u64;
            }
            Poll::Ready(None) => self.complete = true,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let step = BootStep::Http {
            path: std::mem::take(&mut self.path),
            status: self.status,
            bytes: self.bytes,
            millis: boot_log::millis(self.started.elapsed()),
            // hyper stops polling a body of known length once that much went out, and
            // may never poll an empty one (HEAD, 304).
            complete: self.complete
                || self.body.is_end_stream()
                || self.expected.is_some_and(|n| self.bytes >= n),
        };
        self.log.transfer(self.peer, step);
    }
}
