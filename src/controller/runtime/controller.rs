//! A kind's controller on kube-runtime: the kind says what it reconciles and how
//! ([`Reconciler`]) and builds its `Controller` with what wakes an object (its own
//! watch from [`own_watch`], the objects it names through [`wake_naming`] (or
//! [`wake_naming_shared`] from a shared watch), plus any
//! `.watches` or `.reconcile_on` of its own); [`run`] does the rest: a span per
//! reconcile, the error policy ([`Reconciler::retry`]), the log line of a reconcile
//! that did not finish, and the stop at shutdown.

use std::borrow::Cow;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::utils::Backoff;
use kube::runtime::{Predicate, WatchStreamExt, predicates, reflector, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::Instrument;

use super::observed::observed;
use super::shared_watch::Subscription;
use super::store::StoreError;
use super::turns::Turns;
use super::watch::{WatchBackoff, run_until_shutdown};
use crate::api::BareMetalHost;

/// Pause after a reconcile lost a write race: the watch soon shows the object as it
/// is now.
pub const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// What a kind's controller tells [`run`]; implemented by its context.
pub trait Reconciler: Send + Sync + Sized + 'static {
    /// The objects it reconciles.
    type Object: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync;
    /// Why a reconcile did not finish.
    type Error: std::error::Error + Send + Sync + 'static;
    /// Names the kind in the log: "HostClaim" (a reconcile that "did not finish");
    /// the kind of the objects it reconciles, unless it says otherwise.
    fn kind() -> Cow<'static, str> {
        Self::Object::kind(&())
    }
    /// How long reconciles in flight may take to finish after the shutdown signal;
    /// `None`: as long as they take.
    const SHUTDOWN_GRACE: Option<Duration> = Some(Duration::from_secs(3));
    /// Pause after a failed reconcile; by default as after a refused Kubernetes call
    /// (the API server away, say).
    const ERROR_RETRY: Duration = Duration::from_secs(5);
    /// Pause after a reconcile that lost a write race ([`StoreError::Conflict`]
    /// among the error's causes), not logged; `None`: as after any failure.
    const CONFLICT_RETRY: Option<Duration> = Some(CONFLICT_RETRY);

    /// The span of one object's reconcile (a kind whose reconcile opens its own
    /// spans returns `Span::none()`).
    fn span(namespace: &str, name: &str) -> tracing::Span;

    /// One reconcile of `object`, in its span.
    fn reconcile(
        &self,
        object: &Self::Object,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// After a reconcile of `object` failed with `error`: logs it (unless it lost a
    /// race) and says when to try again.
    fn retry(&self, object: &Self::Object, error: &Self::Error) -> Action {
        if let Some(pause) = Self::CONFLICT_RETRY
            && lost_race(error)
        {
            return Action::requeue(pause);
        }
        let (namespace, name) = (object.namespace().unwrap_or_default(), object.name_any());
        tracing::warn!(%namespace, %name, %error, "{} reconcile failed; retrying", Self::kind());
        Action::requeue(Self::ERROR_RETRY)
    }
}

/// Whether `error`, or one of its causes, is a lost write race.
fn lost_race(error: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(error), |e| e.source())
        .any(|e| matches!(e.downcast_ref::<StoreError>(), Some(StoreError::Conflict)))
}

/// What of an object wakes its controller: its generation (spec, deletion),
/// annotations and finalizers; not bmo's status writes.
pub fn spec_annotations_finalizers<K: Resource + 'static>()
-> impl Predicate<K> + Send + Sync + 'static {
    predicates::generation
        .combine(predicates::annotations)
        .combine(predicates::finalizers)
}

/// A change predicate's answer: the hash of what of an object matters, so that the
/// object wakes its controller only when that moved.
pub fn fingerprint(what_matters: impl std::hash::Hash) -> Option<u64> {
    use std::hash::{DefaultHasher, Hasher};
    let mut hasher = DefaultHasher::new();
    what_matters.hash(&mut hasher);
    Some(hasher.finish())
}

/// The watch of a controller's own objects as the start of its `Controller`: each
/// object is cached (after `trim`) and wakes when its `change` hash moved; a failed
/// watch is tried again on [`WatchBackoff`].
pub fn own_watch<K>(
    api: Api<K>,
    trim: fn(&mut K),
    change: impl Predicate<K> + Send + 'static,
) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    own_watch_with(api, trim, change, WatchBackoff::default)
}

/// [`own_watch`] of objects kept whole that wake on [`spec_annotations_finalizers`].
pub fn own_spec_watch<K>(api: Api<K>) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    own_watch(api, |_| (), spec_annotations_finalizers())
}

/// [`own_watch`], trying a failed watch again on `backoff`'s pauses.
pub fn own_watch_with<K, B>(
    api: Api<K>,
    trim: fn(&mut K),
    change: impl Predicate<K> + Send + 'static,
    backoff: fn() -> B,
) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    B: Backoff + 'static,
{
    let (reader, writer) = reflector::store();
    let changes = watcher(api, watcher::Config::default())
        .backoff(backoff())
        .modify(trim)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(change, Default::default());
    Controller::for_stream(changes, reader).trigger_backoff(backoff())
}

/// `controller` woken, for each object `changes` brings (`namespace/name`), for its
/// objects of that namespace that `names(object, namespace, name)` says name it (a
/// subscription its host, an image its Secret).
pub fn wake_naming<K, O>(
    controller: Controller<K>,
    changes: impl Stream<Item = Result<O, watcher::Error>> + Send + 'static,
    names: impl Fn(&K, &str, &str) -> bool + Send + Sync + 'static,
) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    O: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let cache = controller.store();
    controller.watches_stream(changes, move |other: O| {
        let (namespace, name) = (other.namespace().unwrap_or_default(), other.name_any());
        cache
            .state()
            .iter()
            .filter(|object| object.namespace().as_ref() == Some(&namespace))
            .filter(|object| names(object, &namespace, &name))
            .map(|object| ObjectRef::from_obj(object.as_ref()))
            .collect::<Vec<_>>()
    })
}

/// [`wake_naming`] for the objects of a shared watch whose `change` hash moved.
pub fn wake_naming_shared<K, O>(
    controller: Controller<K>,
    shared: Subscription<O>,
    change: impl Predicate<O> + Send + 'static,
    names: impl Fn(&K, &str, &str) -> bool + Send + Sync + 'static,
) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    O: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let changes = shared.changed(change).map(|o| Ok(Arc::unwrap_or_clone(o)));
    wake_naming(controller, changes, names)
}

/// Runs `controller` (its wakes added) until `shutdown` resolves, reconciling with
/// `ctx`.
pub async fn run<R: Reconciler>(
    controller: Controller<R::Object>,
    ctx: Arc<R>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    drive(controller, reconcile_in_span::<R>, ctx, shutdown.shared()).await;
}

/// [`run`] for a controller of hosts whose reconciles take `turns`.
pub async fn run_in_turns<R, T>(
    controller: Controller<BareMetalHost>,
    ctx: Arc<R>,
    turns: Arc<Turns<T>>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) where
    R: Reconciler<Object = BareMetalHost>,
    T: Ord + Send + 'static,
{
    let shutdown = shutdown.shared();
    let reconcile = turns.reconciler(shutdown.clone(), reconcile_in_span::<R>);
    drive(controller, reconcile, ctx, shutdown).await;
}

async fn drive<R, Fut>(
    controller: Controller<R::Object>,
    reconcile: impl FnMut(Arc<R::Object>, Arc<R>) -> Fut,
    ctx: Arc<R>,
    shutdown: impl Future<Output = ()> + Clone + Send + Sync + 'static,
) where
    R: Reconciler,
    Fut: Future<Output = Result<Action, R::Error>> + Send + 'static,
{
    let listed = controller.store();
    let reconciling = controller
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile, error_policy::<R>, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "{} reconcile did not finish", R::kind());
            }
        });
    match R::SHUTDOWN_GRACE {
        Some(grace) => {
            run_until_shutdown(reconciling, shutdown, &listed, grace).await;
        }
        None => reconciling.await,
    }
}

fn reconcile_in_span<R: Reconciler>(
    object: Arc<R::Object>,
    ctx: Arc<R>,
) -> impl Future<Output = Result<Action, R::Error>> + Send + 'static {
    let span = R::span(&object.namespace().unwrap_or_default(), &object.name_any());
    let controller = R::kind().to_lowercase();
    async move { observed(&controller, ctx.reconcile(&object)).await }.instrument(span)
}

fn error_policy<R: Reconciler>(object: Arc<R::Object>, error: &R::Error, ctx: Arc<R>) -> Action {
    ctx.retry(&object, error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::runtime::store::ObjectError;

    #[test]
    fn a_lost_race_is_found_among_the_causes() {
        let about_a_host = ObjectError::store("BareMetalHost ns/h")(StoreError::Conflict);
        assert!(lost_race(&about_a_host));
        assert!(lost_race(&StoreError::Conflict));
        assert!(!lost_race(&std::io::Error::other("the API server is away")));
    }
}
