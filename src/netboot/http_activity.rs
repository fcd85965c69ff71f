//! Records each HTTP boot request in the boot log once its response is over: path,
//! status, the bytes of the body actually sent and whether all of it went.

use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures::Stream;

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
    let delivery = Delivery {
        log,
        peer,
        path,
        status: parts.status.as_u16(),
        started,
        bytes: 0,
        complete: false,
    };
    let watched = Watched {
        body: body.into_data_stream(),
        delivery,
    };
    Response::from_parts(parts, Body::from_stream(watched))
}

/// One response on its way; recorded when dropped (sent, failed or abandoned).
struct Delivery {
    log: BootLog,
    peer: IpAddr,
    path: String,
    status: u16,
    started: Instant,
    bytes: u64,
    complete: bool,
}

impl Drop for Delivery {
    fn drop(&mut self) {
        let step = BootStep::Http {
            path: std::mem::take(&mut self.path),
            status: self.status,
            bytes: self.bytes,
            millis: boot_log::millis(self.started.elapsed()),
            complete: self.complete,
        };
        self.log.transfer(self.peer, step);
    }
}

struct Watched<S> {
    body: S,
    delivery: Delivery,
}

impl<S: Stream<Item = Result<Bytes, axum::Error>> + Unpin> Stream for Watched<S> {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = Pin::new(&mut self.body).poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(chunk))) => self.delivery.bytes += chunk.len() as u64,
            Poll::Ready(None) => self.delivery.complete = true,
            _ => {}
        }
        polled
    }
}
