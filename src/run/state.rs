//! What the parts of `bmo run` share: the probes' state and the stop signal.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::metrics::Metrics;

/// What the probes and `/metrics` answer from.
#[derive(Clone)]
pub(super) struct Health {
    pub(super) ready: Arc<AtomicBool>,
    pub(super) metrics: Arc<Metrics>,
    /// The boot activity page's sources, filled in as parts start.
    pub(super) activity: crate::activity::Activity,
}

/// Tells every part of `bmo run` to stop: on SIGINT or SIGTERM, or when leadership
/// is lost.
pub(super) struct Stop {
    sender: tokio::sync::watch::Sender<bool>,
}

impl Stop {
    /// Stops at SIGINT or SIGTERM, and tells systemd that bmo is stopping.
    pub(super) fn on_signal(notifier: crate::notify::Notifier) -> Self {
        let (sender, _) = tokio::sync::watch::channel(false);
        let signal_stop = sender.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            if let Err(e) = notifier.stopping() {
                tracing::warn!(error = %e, "cannot tell systemd that bmo is stopping");
            }
            // Kept even while no part of bmo waits for it (`send` would drop it).
            signal_stop.send_replace(true);
        });
        Self { sender }
    }

    pub(super) fn stop(&self) {
        self.sender.send_replace(true);
    }

    /// Resolves once bmo is told to stop.
    pub(super) fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stop = self.sender.subscribe();
        async move {
            let _ = stop.wait_for(|stop| *stop).await;
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch SIGTERM; only SIGINT stops bmo");
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => tracing::info!("SIGINT received, shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
