//! Host reconciles take turns, in an order of their own.
//!
//! kube-runtime's own concurrency limit parks the reconciles that fall due while
//! every worker is busy in a hash set, and a freed worker takes whichever comes first
//! in hash order. With hundreds of hosts applied at once, each looking at Ironic
//! again every second or so, the hosts early in that order went round again and
//! again while others waited: at N = 100 the last host got its first reconcile, and
//! with it any status, 66 s after it was applied. So kube-runtime runs every due
//! reconcile at once (it still never runs two for one host) and each waits here for
//! one of `BMO_CONCURRENCY` turns, in the order of its rank; the host controller's
//! rank (`HostRank`, in its capacity module) orders them so:
//! - hosts holding a provisioning slot first: at N = 1000 the twenty slot holders
//!   otherwise queued behind hundreds of enrolling hosts at every step, and the
//!   slots, not Ironic, set the pace. A host a freed slot is offered to goes first
//!   too, as the slot is kept for it (up to 150 s) until it comes to take it. A
//!   rank is taken when a reconcile starts waiting, and taken anew
//!   ([`Turns::rerank`]) when a slot is freed for a host already waiting;
//! - then hosts never reconciled, whose first reconcile shows a state;
//! - then the others, the oldest host first. In the order they asked, every
//!   enrolling host went one step per round, so at N = 1000 none was ready for a
//!   slot until nearly all were, and for minutes 5 to 15 of the 20 slots stood idle
//!   while hundreds of hosts waited to look at a node Ironic had long made
//!   manageable. Oldest first, the first hosts through enrolment fill the slots
//!   while the rest enrol.
//!
//! A controller may open a quick lane beside the line ([`Turns::with_quick_lane`]):
//! reconciles it picks, ones that only write to Kubernetes, take one of its own
//! turns and never queue behind the line's. The host controller sends hosts with no
//! state yet there: at N = 1000 their first state otherwise waited up to 35 s behind
//! hosts holding turns through slow Ironic writes, though it costs three quick
//! Kubernetes writes (finalizer, Secret, status).
//!
//! Equal ranks go in the order they asked. A reconcile whose turn comes works on the
//! host as the watch cache holds it then, not as it was when it fell due. The
//! firmware controllers, which also reconcile BareMetalHosts, take turns the same
//! way (their own, all of one rank).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;

use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::api::BareMetalHost;

pub struct Turns<R> {
    queue: Mutex<Queue<R>>,
    hosts: Store<BareMetalHost>,
    /// Where a host's waiting reconcile stands in line: the lowest rank goes first.
    rank: Box<dyn Fn(&BareMetalHost) -> R + Send + Sync>,
    quick: Option<QuickLane>,
}

/// Turns of their own for the reconciles `picks` chooses.
struct QuickLane {
    turns: Arc<Semaphore>,
    picks: Box<dyn Fn(&BareMetalHost) -> bool + Send + Sync>,
}

struct Queue<R> {
    free: usize,
    /// Waiting reconciles by rank, then in the order they asked.
    waiting: BTreeMap<(R, u64), Waiter>,
    asked: u64,
}

/// A reconcile waiting for its turn.
struct Waiter {
    host: ObjectRef<BareMetalHost>,
    hand: oneshot::Sender<()>,
}

/// A turn, given back (to the next waiting reconcile, or to the quick lane) when
/// dropped.
enum Turn<'a, R: Ord> {
    InLine(&'a Turns<R>),
    /// Held, never read: dropping it frees the turn.
    Quick(#[allow(dead_code)] OwnedSemaphorePermit),
}

impl<R: Ord> Drop for Turn<'_, R> {
    fn drop(&mut self) {
        if let Turn::InLine(turns) = self {
            turns.give_back();
        }
    }
}

/// A reconcile waiting for its turn; one dropped after the turn was handed to it
/// but before it took it (shutdown, a cancelled reconcile) hands it on.
struct Waiting<'a, R: Ord> {
    turns: &'a Turns<R>,
    handed: oneshot::Receiver<()>,
}

impl<R: Ord> Drop for Waiting<'_, R> {
    fn drop(&mut self) {
        self.handed.close();
        if self.handed.try_recv().is_ok() {
            self.turns.give_back();
        }
    }
}

impl<R: Ord> Turns<R> {
    /// At most `concurrency` reconciles of the hosts in `hosts` at a time; the
    /// waiting go in the order of `rank`.
    pub fn new(
        concurrency: u16,
        hosts: Store<BareMetalHost>,
        rank: impl Fn(&BareMetalHost) -> R + Send + Sync + 'static,
    ) -> Self {
        Self {
            queue: Mutex::new(Queue {
                free: usize::from(concurrency.max(1)),
                waiting: BTreeMap::new(),
                asked: 0,
            }),
            hosts,
            rank: Box::new(rank),
            quick: None,
        }
    }

    /// Reconciles of the hosts `picks` chooses (as the cache holds them when they
    /// fall due) take one of `concurrency` turns of their own instead of waiting in
    /// line: for reconciles that never wait on the provisioner.
    pub fn with_quick_lane(
        mut self,
        concurrency: usize,
        picks: impl Fn(&BareMetalHost) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.quick = Some(QuickLane {
            turns: Arc::new(Semaphore::new(concurrency.max(1))),
            picks: Box::new(picks),
        });
        self
    }

    /// Hands a turn to the next waiting reconcile still waiting, or frees it.
    fn give_back(&self) {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let Some((_, next)) = queue.waiting.pop_first() else {
                queue.free += 1;
                return;
            };
            if next.hand.send(()).is_ok() {
                return;
            }
        }
    }

    /// Waits for `host`'s turn; then the turn (held until dropped) and the host as it
    /// is now. `None` when `shutdown` comes first or the host is gone meanwhile.
    async fn take(
        &self,
        host: &BareMetalHost,
        shutdown: impl Future<Output = ()>,
    ) -> Option<(Turn<'_, R>, Arc<BareMetalHost>)> {
        let key = ObjectRef::from_obj(host);
        if let Some(lane) = &self.quick
            && (lane.picks)(self.hosts.get(&key).as_deref().unwrap_or(host))
        {
            let permit = tokio::select! {
                biased;
                () = shutdown => return None,
                permit = lane.turns.clone().acquire_owned() => permit.ok()?,
            };
            return Some((Turn::Quick(permit), self.hosts.get(&key)?));
        }
        let waiting = {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            if queue.free > 0 {
                queue.free -= 1;
                None
            } else {
                let (hand, handed) = oneshot::channel();
                let now = self.hosts.get(&key);
                let rank = (self.rank)(now.as_deref().unwrap_or(host));
                queue.asked += 1;
                let asked = queue.asked;
                queue
                    .waiting
                    .insert((rank, asked), Waiter { host: key, hand });
                Some(Waiting {
                    turns: self,
                    handed,
                })
            }
        };
        let turn = match waiting {
            None => Turn::InLine(self),
            Some(mut waiting) => {
                tokio::select! {
                    biased;
                    () = shutdown => return None,
                    handed = &mut waiting.handed => handed.ok()?,
                }
                // Received, so dropping `waiting` hands nothing on: the turn is
                // this reconcile's now.
                Turn::InLine(self)
            }
        };
        let now = self.hosts.get(&ObjectRef::from_obj(host))?;
        Some((turn, now))
    }

    /// `reconcile` taking turns, for kube-runtime's `Controller::run`: a host
    /// whose turn does not come before `shutdown` is left for its next change.
    pub fn reconciler<C, E, F, Fut>(
        self: Arc<Self>,
        shutdown: impl Future<Output = ()> + Clone + Send + 'static,
        reconcile: F,
    ) -> impl FnMut(Arc<BareMetalHost>, Arc<C>) -> BoxFuture<'static, Result<Action, E>>
    where
        R: Send + 'static,
        C: Send + Sync + 'static,
        E: Send + 'static,
        F: Fn(Arc<BareMetalHost>, Arc<C>) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
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

impl<R: Ord + Clone> Turns<R> {
    /// Ranks `host`'s waiting reconcile, if any, anew as the host is now: a slot
    /// freed for a host that was already waiting moves it up, rather than leaving
    /// the slot empty while it waits behind older hosts.
    pub fn rerank(&self, host: &ObjectRef<BareMetalHost>) {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(key) = queue
            .waiting
            .iter()
            .find(|(_, waiter)| waiter.host == *host)
            .map(|(key, _)| key.clone())
        else {
            return;
        };
        let Some(now) = self.hosts.get(host) else {
            return;
        };
        let rank = (self.rank)(&now);
        if rank != key.0
            && let Some(waiter) = queue.waiting.remove(&key)
        {
            queue.waiting.insert((rank, key.1), waiter);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use kube::ResourceExt;
    use kube::runtime::reflector::store;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;

    fn host(name: &str, generation: i64) -> BareMetalHost {
        let mut host = BareMetalHost::new(name, Default::default());
        host.metadata.namespace = Some("ns".into());
        host.metadata.generation = Some(generation);
        host
    }

    /// A cache holding the hosts `names` (generation 1), and its writer.
    fn cached(names: &[&str]) -> (Store<BareMetalHost>, Writer<BareMetalHost>) {
        let (reader, mut writer) = store();
        for &name in names {
            writer.apply_watcher_event(&Event::Apply(host(name, 1)));
        }
        (reader, writer)
    }

    /// Queues a reconcile of each of `names` (generation 1 as asked), one after the
    /// other; each says, when its turn comes, its name and the generation of the
    /// host its turn came with (`None`: no turn).
    async fn queue_waiters<R: Ord + Send + 'static>(
        turns: &Arc<Turns<R>>,
        names: &[&'static str],
    ) -> (
        Vec<tokio::task::JoinHandle<()>>,
        tokio::sync::mpsc::UnboundedReceiver<(&'static str, Option<i64>)>,
    ) {
        let (order_tx, order) = tokio::sync::mpsc::unbounded_channel();
        let mut waiting = Vec::new();
        for &name in names {
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
        (waiting, order)
    }

    /// A turn for `name` if one is free now.
    fn turn_now<'a, R: Ord>(turns: &'a Turns<R>, name: &str) -> Option<Turn<'a, R>> {
        let host = host(name, 1);
        let taken = turns.take(&host, std::future::pending()).now_or_never();
        taken.flatten().map(|(turn, _)| turn)
    }

    /// Gives the turn held as `first` back and waits until every one `waiting` had its
    /// own.
    async fn pass_on<T>(first: T, waiting: Vec<tokio::task::JoinHandle<()>>) {
        drop(first);
        for task in waiting {
            let _ = task.await;
        }
    }

    #[tokio::test]
    async fn turns_go_in_the_order_they_were_asked_for_with_the_host_as_it_is_then() {
        let (reader, mut writer) = cached(&["a", "b", "c"]);
        let turns = Arc::new(Turns::new(1, reader, |_| ()));
        let first = turns
            .take(&host("a", 1), std::future::pending())
            .await
            .map(|(turn, _)| turn);
        assert!(first.is_some(), "a free turn is taken at once");

        let (waiting, mut order) = queue_waiters(&turns, &["c", "b"]).await;
        writer.apply_watcher_event(&Event::Apply(host("c", 2)));
        pass_on(first, waiting).await;
        assert_eq!(order.recv().await, Some(("c", Some(2))), "the newer object");
        assert_eq!(order.recv().await, Some(("b", Some(1))));
    }

    #[tokio::test]
    async fn a_host_that_goes_first_overtakes_those_waiting_longer_and_a_dropped_turn_passes_on() {
        let (reader, _writer) = cached(&["a", "b", "urgent"]);
        let turns = Arc::new(Turns::new(1, reader, |h| h.name_any() != "urgent"));
        let first = turns.take(&host("a", 1), std::future::pending()).await;
        assert!(first.is_some());

        let (waiting, mut order) = queue_waiters(&turns, &["b", "urgent"]).await;
        // A waiter given up (its reconcile cancelled) takes no turn with it.
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let given_up = {
            let turns = turns.clone();
            tokio::spawn(async move {
                let shutdown = async {
                    let _ = stopped.await;
                };
                turns.take(&host("a", 1), shutdown).await.is_none()
            })
        };
        tokio::task::yield_now().await;
        let _ = stop.send(());
        assert!(given_up.await.unwrap_or(false), "ended by its shutdown");
        pass_on(first, waiting).await;
        assert_eq!(order.recv().await.map(|(name, _)| name), Some("urgent"));
        assert_eq!(order.recv().await.map(|(name, _)| name), Some("b"));
        assert!(
            turns
                .take(&host("a", 1), std::future::pending())
                .now_or_never()
                .is_some(),
            "every turn came back"
        );
    }

    #[tokio::test]
    async fn the_quick_lane_passes_the_line_but_keeps_its_own_limit() {
        let (reader, _writer) = cached(&["slow", "waiting", "new-1", "new-2"]);
        let turns = Arc::new(
            Turns::new(1, reader, |_| ()).with_quick_lane(1, |h| h.name_any().starts_with("new")),
        );
        let line = turns.take(&host("slow", 1), std::future::pending()).await;
        assert!(line.is_some(), "the line's one turn, held");
        let (waiting, mut order) = queue_waiters(&turns, &["waiting"]).await;
        let quick = turn_now(&turns, "new-1");
        assert!(
            quick.is_some(),
            "a picked host's turn comes while the line is full"
        );
        let next = turn_now(&turns, "new-2");
        assert!(next.is_none(), "the lane's one turn is taken: new-2 waits");
        drop(quick);
        let next = turn_now(&turns, "new-2");
        assert!(next.is_some(), "the lane's turn came back");
        assert!(order.try_recv().is_err(), "the line still waits");
        pass_on(line, waiting).await;
        assert_eq!(order.recv().await, Some(("waiting", Some(1))));
    }

    #[tokio::test]
    async fn a_waiting_host_ranked_anew_moves_up() {
        let (reader, _writer) = cached(&["a", "b", "c"]);
        // c ranks first once it is "offered a slot", as the freed slot's wake-up
        // ranks it anew while its earlier reconcile already waits.
        let offered = Arc::new(Mutex::new(None::<String>));
        let rank = {
            let offered = offered.clone();
            move |h: &BareMetalHost| {
                let offered = offered.lock().unwrap_or_else(PoisonError::into_inner);
                offered.as_deref() != Some(h.name_any().as_str())
            }
        };
        let turns = Arc::new(Turns::new(1, reader, rank));
        let first = turns.take(&host("a", 1), std::future::pending()).await;
        assert!(first.is_some());
        let (waiting, mut order) = queue_waiters(&turns, &["b", "c"]).await;
        *offered.lock().unwrap_or_else(PoisonError::into_inner) = Some("c".into());
        turns.rerank(&ObjectRef::new("c").within("ns"));
        pass_on(first, waiting).await;
        assert_eq!(order.recv().await, Some(("c", Some(1))), "c got the turn");
        assert_eq!(order.recv().await, Some(("b", Some(1))));
    }

    #[tokio::test]
    async fn waiting_ends_at_shutdown_and_a_deleted_host_gets_no_turn() {
        let (reader, mut writer) = store();
        writer.apply_watcher_event(&Event::Apply(host("a", 1)));
        let turns = Turns::new(1, reader, |_| ());
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
