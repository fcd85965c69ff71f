//! Host reconciles take turns in the order they fell due.
//!
//! kube-runtime's own concurrency limit parks the reconciles that fall due while
//! every worker is busy in a hash set, and a freed worker takes whichever comes first
//! in hash order. With hundreds of hosts applied at once, each looking at Ironic
//! again every second or so, the hosts early in that order went round again and
//! again while others waited: at N = 100 the last host got its first reconcile, and
//! with it any status, 66 s after it was applied. So kube-runtime runs every due
//! reconcile at once (it still never runs two for one host) and each waits here for
//! one of `BMO_CONCURRENCY` turns, handed out first come, first served (tokio's
//! semaphore is fair). A reconcile whose turn comes works on the host as the watch
//! cache holds it then, not as it was when it fell due. The firmware controllers,
//! which also reconcile BareMetalHosts, take turns the same way (their own).

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::api::BareMetalHost;

pub struct Turns {
    permits: Semaphore,
    hosts: Store<BareMetalHost>,
}

impl Turns {
    /// At most `concurrency` reconciles of the hosts in `hosts` at a time.
    pub fn new(concurrency: u16, hosts: Store<BareMetalHost>) -> Self {
        Self {
            permits: Semaphore::new(usize::from(concurrency.max(1))),
            hosts,
        }
    }

    /// Waits for `host`'s turn; then the turn (held until dropped) and the host as it
    /// is now. `None` when `shutdown` comes first or the host is gone meanwhile.
    async fn take(
        &self,
        host: &BareMetalHost,
        shutdown: impl Future<Output = ()>,
    ) -> Option<(SemaphorePermit<'_>, Arc<BareMetalHost>)> {
        let turn = tokio::select! {
            biased;
            () = shutdown => return None,
            turn = self.permits.acquire() => turn.ok()?,
        };
        let now = self.hosts.get(&ObjectRef::from_obj(host))?;
        Some((turn, now))
    }

    /// `reconcile` taking turns, for kube-runtime's `Controller::run`: a host
    /// whose turn does not come before `shutdown` is left for its next change.
    pub fn reconciler<C, E, F, R>(
        self: Arc<Self>,
        shutdown: impl Future<Output = ()> + Clone + Send + 'static,
        reconcile: F,
    ) -> impl FnMut(Arc<BareMetalHost>, Arc<C>) -> BoxFuture<'static, Result<Action, E>>
    where
        C: Send + Sync + 'static,
        E: Send + 'static,
        F: Fn(Arc<BareMetalHost>, Arc<C>) -> R + Clone + Send + 'static,
        R: Future<Output = Result<Action, E>> + Send + 'static,
    {
        move |host, ctx| {
            let turns = self.clone();
            let shutdown = shutdown.clone();
            let reconcile = reconcile.clone();
            Box::pin(async move {
                match turns.take(&host, shutdown).await {
                    // Boxed: a waiting reconcile holds only its host, not room for
                    // a whole reconcile's state (at N hosts, N of them wait).
                    Some((_turn, host)) => Box::pin(reconcile(host, ctx)).await,
                    None => Ok(Action::await_change()),
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;

    fn host(name: &str, generation: i64) -> BareMetalHost {
        let mut host = BareMetalHost::new(name, Default::default());
        host.metadata.namespace = Some("ns".into());
        host.metadata.generation = Some(generation);
        host
    }

    #[tokio::test]
    async fn turns_go_in_the_order_they_were_asked_for_with_the_host_as_it_is_then() {
        let (reader, mut writer) = store();
        for name in ["a", "b", "c"] {
            writer.apply_watcher_event(&Event::Apply(host(name, 1)));
        }
        let turns = Arc::new(Turns::new(1, reader));
        let first = turns
            .take(&host("a", 1), std::future::pending())
            .await
            .map(|(turn, _)| turn);
        assert!(first.is_some(), "a free turn is taken at once");

        let (order_tx, mut order) = tokio::sync::mpsc::unbounded_channel();
        let mut waiting = Vec::new();
        for name in ["c", "b"] {
            let turns = turns.clone();
            let order_tx = order_tx.clone();
            waiting.push(tokio::spawn(async move {
                let taken = turns.take(&host(name, 1), std::future::pending()).await;
                let generation = taken.as_ref().and_then(|(_, h)| h.metadata.generation);
                let _ = order_tx.send((name, generation));
            }));
            // The waiter runs (and queues for the turn) before the next is spawned:
            // the test runtime has one thread.
            tokio::task::yield_now().await;
        }
        writer.apply_watcher_event(&Event::Apply(host("c", 2)));
        drop(first);
        for task in waiting {
            let _ = task.await;
        }
        assert_eq!(order.recv().await, Some(("c", Some(2))), "the newer object");
        assert_eq!(order.recv().await, Some(("b", Some(1))));
    }

    #[tokio::test]
    async fn waiting_ends_at_shutdown_and_a_deleted_host_gets_no_turn() {
        let (reader, mut writer) = store();
        writer.apply_watcher_event(&Event::Apply(host("a", 1)));
        let turns = Turns::new(1, reader);
        let held = turns.take(&host("a", 1), std::future::pending()).await;
        assert!(held.is_some());
        assert!(
            turns
                .take(&host("a", 1), std::future::ready(()))
                .await
                .is_none(),
            "shutdown while every turn is taken"
        );
        drop(held);
        assert!(
            turns
                .take(&host("gone", 1), std::future::pending())
                .await
                .is_none(),
            "a host no longer in the cache"
        );
    }
}
