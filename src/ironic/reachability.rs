//! Whether Ironic answers: a small authenticated read now and then, its outcome kept
//! for the boot activity page.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::IronicClient;

/// The last look at Ironic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Probe {
    pub reachable: bool,
    /// When it was made, Unix seconds.
    pub at_unix: u64,
    /// How long Ironic took to answer (or to fail).
    pub millis: u64,
    /// Why it failed: the client's error, which names the endpoint without credentials.
    pub error: Option<String>,
}

/// The outcome of the last probe; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Reachability {
    last: Arc<Mutex<Option<Probe>>>,
}

impl Reachability {
    /// Probes `client` now and every `every` until the task is aborted.
    pub fn watch(client: IronicClient, every: Duration) -> (Self, tokio::task::JoinHandle<()>) {
        let reachability = Self::default();
        let shared = reachability.clone();
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                ticks.tick().await;
                let started = Instant::now();
                let checked = client.check().await;
                shared.record(Probe {
                    reachable: checked.is_ok(),
                    at_unix: crate::netboot::leases::now_unix(),
                    millis: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    error: checked.err().map(|e| e.to_string()),
                });
            }
        });
        (reachability, task)
    }

    fn record(&self, probe: Probe) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(probe);
    }

    /// The last probe; `None` before the first answer.
    pub fn last(&self) -> Option<Probe> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
