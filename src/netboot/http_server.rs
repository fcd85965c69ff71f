//! The accept loop of the HTTP boot server and of the health listener: connection
//! caps (in total and per client IP), a header-read timeout and an idle timeout, so
//! that clients holding connections open cannot use up bmo's file descriptors (and
//! with them the health probes).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::{Extension, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

use super::slots::Slots;

/// The client of a request, put into its extensions by the accept loop.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// The local address a request came in on (which of the host's addresses the client
/// reached), put into its extensions by the accept loop.
#[derive(Debug, Clone, Copy)]
pub struct Local(pub SocketAddr);

/// What one client, and all of them together, may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Time to send a complete request header, on a new connection and between
    /// requests on a kept-alive one.
    pub header_timeout: Duration,
    /// Time without a byte read or written after which a connection is closed
    /// (a client that stopped reading a download, say).
    pub idle_timeout: Duration,
    /// Open connections in total.
    pub max_connections: usize,
    /// Open connections from one client IP.
    pub max_connections_per_client: usize,
}

/// Answer to a connection over a cap, written without waiting, then closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n\
content-length: 40\r\nretry-after: 5\r\nconnection: close\r\n\r\n\
too many connections; try again shortly\n";

/// Serves `app` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, app: Router, limits: HttpLimits) {
    let slots = Slots::new(limits.max_connections, limits.max_connections_per_client);
    // The boot server and the health listener share this loop: logs say which.
    let addr = listener.local_addr().ok();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(?addr, error = %e, "HTTP listener cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let client = peer.ip().to_canonical();
        let slot = match slots.take(client) {
            Ok(slot) => slot,
            Err(over) => {
                tracing::debug!(?addr, %client, ?over, "HTTP connection over the cap refused with 503");
                // Best effort: never wait on a client we are turning away.
                let _ = stream.try_write(BUSY);
                continue;
            }
        };
        let local = stream.local_addr().ok().map(Local);
        let app = app.clone().layer(Extension(Peer(peer)));
        let service = TowerToHyperService::new(match local {
            Some(local) => app.layer(Extension(local)),
            None => app,
        });
        tokio::spawn(async move {
            let _slot = slot;
            let io = TokioIo::new(IdleTimeout::new(stream, limits.idle_timeout));
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .keep_alive(true);
            if let Err(e) = builder.serve_connection(io, service).await {
                tracing::debug!(%client, error = %e, "HTTP connection closed");
            }
        });
    }
}

/// A stream that fails with `TimedOut` once nothing was read or written for `timeout`.
struct IdleTimeout {
    inner: TcpStream,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl IdleTimeout {
    fn new(inner: TcpStream, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }

    fn progress(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.timeout);
    }

    /// `Pending`, or the timeout error once the deadline has passed.
    fn pending_or_timeout<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "HTTP connection idle for too long",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for IdleTimeout {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                self.progress();
                Poll::Ready(r)
            }
            Poll::Pending => self.pending_or_timeout(cx),
        }
    }
}

impl AsyncWrite for IdleTimeout {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(r) => {
                self.progress();
                Poll::Ready(r)
            }
            Poll::Pending => self.pending_or_timeout(cx),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(r) => Poll::Ready(r),
            Poll::Pending => self.pending_or_timeout(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
