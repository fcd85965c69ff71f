//! The kube-runtime side of the HostClaim controller: what wakes a claim.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use super::state_machine::{DataKind, HOST_CLAIM_KIND};
use super::{ClaimContext, ClaimError, ClaimStore, reconcile_claim};
use crate::api::{BareMetalHost, HostClaim};
use crate::controller::runtime::controller::{self as runtime, Reconciler};
use crate::controller::runtime::store::KubeClient;
use crate::controller::runtime::watch::api_in;

/// Runs the HostClaim controller until `shutdown` resolves.
///
/// Claims are watched in every namespace (they live in tenant namespaces); with
/// `namespace` (WATCH_NAMESPACE) only hosts of that namespace are bound and driven.
///
/// A claim wakes on its generation (spec, deletion), annotations and finalizers (not
/// on bmo's status writes), and on every change of the host bound to it (the host's
/// `spec.consumerRef` names it), so the host's state is mirrored as it moves, and
/// on every change of a Secret it names (watched by metadata only).
pub async fn run(
    store: KubeClient,
    namespace: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = store.client().clone();
    // Claims come from tenant namespaces, so they are watched everywhere; the hosts
    // they bind are those bmo manages (WATCH_NAMESPACE, when set).
    let claims = Api::all(client.clone());
    let own = runtime::own_spec_watch(claims);
    let hosts: Api<BareMetalHost> = api_in(&client, namespace.as_deref());
    let secrets: Api<PartialObjectMeta<Secret>> = Api::all(client);
    // A claim's Secret made or changed: copied again at once.
    let secret_changes = watcher(secrets, watcher::Config::default()).touched_objects();
    let controller = runtime::wake_naming(own, secret_changes, refers_to).watches(
        hosts,
        watcher::Config::default(),
        |host| claim_of(&host),
    );
    let ctx = Arc::new(ClaimContext { store, namespace });
    runtime::run(controller, ctx, shutdown).await;
}

impl<S: ClaimStore + 'static> Reconciler for ClaimContext<S> {
    type Object = HostClaim;
    type Error = ClaimError;
    const SHUTDOWN_GRACE: Option<Duration> = None;

    fn span(namespace: &str, name: &str) -> tracing::Span {
        tracing::info_span!("hostclaim", namespace, name)
    }

    async fn reconcile(&self, claim: &HostClaim) -> Result<Action, ClaimError> {
        reconcile_claim(claim, self).await
    }
}

/// The claim a host is bound to, from its `spec.consumerRef`.
pub(super) fn claim_of(host: &BareMetalHost) -> Option<ObjectRef<HostClaim>> {
    let reference = host.spec.consumer_ref.as_ref()?;
    let ours = reference.kind.as_deref() == Some(HOST_CLAIM_KIND)
        && reference
            .api_version
            .as_deref()
            .is_some_and(|v| v.starts_with("metal3.io/"));
    if !ours {
        return None;
    }
    let name = reference.name.as_deref()?;
    let namespace = reference.namespace.as_deref()?;
    Some(ObjectRef::new(name).within(namespace))
}

/// Whether `claim` names the Secret `namespace/name` as its user, network or meta
/// data (only Secrets of its own namespace are copied).
pub(super) fn refers_to(claim: &HostClaim, namespace: &str, name: &str) -> bool {
    claim.namespace().as_deref() == Some(namespace)
        && DataKind::ALL.iter().any(|kind| {
            kind.reference(claim)
                .is_some_and(|r| r.name.as_deref() == Some(name))
        })
}
