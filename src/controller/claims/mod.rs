//! The HostClaim controller: a claim in a tenant namespace binds an available
//! BareMetalHost of a namespace whose HostDeployPolicy admits the tenant, drives that
//! host's image, data Secrets and power, mirrors its state back, and on deletion
//! deprovisions and releases it.
//!
//! Shape as the host controller's: `state_machine` and `status` decide (pure),
//! `store` is the one door to Kubernetes, `reconcile` only loads, decides and writes,
//! `run` wires it into a kube-runtime controller. Off unless `--hostclaims`
//! (`BMO_HOSTCLAIMS`), as upstream's `-hostclaims` flag.

mod run;
pub mod state_machine;
pub mod status;
pub mod store;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::api::claims::{ASSOCIATED_CONDITION, HOST_CLAIM_FINALIZER, SYNCHRONIZED_CONDITION};
use crate::api::{BareMetalHost, HostClaim, HostClaimStatus};
use crate::controller::runtime::store::{KubeClient, StoreError, has_finalizer};
pub use run::run;
use state_machine::{DataKind, Drive, Release};
use status::{
    BARE_METAL_HOST_ASSOCIATED, CONFIGURATION_SYNCED, HOST_CLAIM_DELETING, MISSING_BARE_METAL_HOST,
    NO_BARE_METAL_HOST,
};
pub use store::ClaimStore;

/// Annotation on the copies of a claim's Secrets in the host's namespace: the claim
/// (`namespace/name`) they belong to. bmo never overwrites or deletes a Secret
/// without it.
pub const COPY_ANNOTATION: &str = "metal3.io/hostclaim";

/// Pause before looking again for a host, or for a missing Secret (upstream's 30 s).
pub const RETRY_DELAY: Duration = Duration::from_secs(30);

/// Settings of the HostClaim controller.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClaimSettings {
    /// Runs the HostClaim controller (HostClaims bind BareMetalHosts that a
    /// HostDeployPolicy opens to their namespace).
    #[arg(long = "hostclaims", env = "BMO_HOSTCLAIMS")]
    pub enabled: bool,
}

/// What a claim reconcile shares.
pub struct ClaimContext<S = KubeClient> {
    pub store: S,
    /// `WATCH_NAMESPACE`: only hosts (and so policies) of this namespace are bound;
    /// claims bound to a host elsewhere are another bmo's and left alone.
    pub namespace: Option<String>,
}

/// A reconcile that did not finish (a Kubernetes call); tried again after [`run`]'s
/// error pause.
pub type ClaimError = StoreError;

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// Reconciles one claim: release when deleted, else bind, copy, drive and mirror.
pub async fn reconcile_claim<S: ClaimStore>(
    claim: &HostClaim,
    ctx: &ClaimContext<S>,
) -> Result<Action, ClaimError> {
    if let (Some(bound), Some(watched)) = (
        claim
            .status
            .as_ref()
            .and_then(|s| s.bare_metal_host.as_ref()),
        &ctx.namespace,
    ) && &bound.namespace != watched
    {
        return Ok(Action::await_change());
    }
    let has_finalizer = has_finalizer(claim, HOST_CLAIM_FINALIZER);
    if claim.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        return release(claim, ctx).await;
    }
    if !has_finalizer {
        ctx.store
            .set_finalizer(claim, HOST_CLAIM_FINALIZER, true)
            .await?;
        return Ok(Action::await_change());
    }
    let old = claim.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let now = now();
    let host = match &old.bare_metal_host {
        None => match bind(claim, ctx, &mut status, &now).await? {
            Some(host) => host,
            None => {
                save(claim, ctx, &old, status, &now).await?;
                return Ok(Action::requeue(RETRY_DELAY));
            }
        },
        Some(bound) => match ctx.store.get(&bound.namespace, &bound.name).await? {
            Some(host) if state_machine::bound_to(&host, claim) => host,
            _ => {
                let message = format!(
                    "BareMetalHost {}/{} is gone or no longer bound to this claim",
                    bound.namespace, bound.name
                );
                status::set_condition(
                    &mut status,
                    claim,
                    ASSOCIATED_CONDITION,
                    false,
                    MISSING_BARE_METAL_HOST,
                    &message,
                    &now,
                );
                save(claim, ctx, &old, status, &now).await?;
                return Ok(Action::requeue(RETRY_DELAY));
            }
        },
    };
    status::set_condition(
        &mut status,
        claim,
        ASSOCIATED_CONDITION,
        true,
        BARE_METAL_HOST_ASSOCIATED,
        "",
        &now,
    );
    let synced = synchronize(claim, ctx, &host, &mut status, &now).await?;
    status::mirror(&mut status, claim, &host, &now);
    save(claim, ctx, &old, status, &now).await?;
    // The host's changes wake the claim; a missing Secret is looked for again.
    Ok(if synced {
        Action::await_change()
    } else {
        Action::requeue(RETRY_DELAY)
    })
}

/// Picks a host for an unbound claim and records the binding on the host (first,
/// so that a lost status write finds the same host again); `None` when there is
/// none, with the reason in `status`.
async fn bind<S: ClaimStore>(
    claim: &HostClaim,
    ctx: &ClaimContext<S>,
    status: &mut HostClaimStatus,
    now: &Time,
) -> Result<Option<BareMetalHost>, ClaimError> {
    let namespace = claim.namespace().unwrap_or_default();
    let wanted_ns = claim
        .spec
        .host_selector
        .as_ref()
        .and_then(|s| s.in_namespace.clone());
    let policies = match (&wanted_ns, &ctx.namespace) {
        (Some(wanted), Some(watched)) if wanted != watched => Vec::new(),
        (wanted, watched) => {
            ctx.store
                .policies(wanted.as_deref().or(watched.as_deref()))
                .await?
        }
    };
    let labels = ctx
        .store
        .namespace_labels(&namespace)
        .await?
        .unwrap_or_default();
    let mut no_host = |message: String| {
        status::set_condition(
            status,
            claim,
            ASSOCIATED_CONDITION,
            false,
            NO_BARE_METAL_HOST,
            &message,
            now,
        );
        None
    };
    let open = match state_machine::open_namespaces(&policies, &namespace, &labels) {
        Ok(open) => open,
        Err(e) => return Ok(no_host(format!("Failed to pick a BareMetalHost: {e}"))),
    };
    let mut hosts = Vec::new();
    for ns in &open {
        hosts.extend(ctx.store.hosts(ns).await?);
    }
    let chosen = match state_machine::choose(claim, &hosts) {
        Ok(Some(host)) => host,
        Ok(None) => return Ok(no_host("No available host found: requeuing.".into())),
        Err(e) => return Ok(no_host(format!("Failed to pick a BareMetalHost: {e}"))),
    };
    let mut host = chosen.clone();
    if !state_machine::bound_to(&host, claim) {
        let reference = state_machine::consumer_ref(claim);
        ctx.store
            .set_consumer(&host, Some(reference.clone()))
            .await?;
        host.spec.consumer_ref = Some(reference);
        tracing::info!(claim = %key(claim), host = %key(&host), "HostClaim bound");
    }
    status.bare_metal_host = Some(crate::api::claims::NamespacedName {
        namespace: host.namespace().unwrap_or_default(),
        name: host.name_any(),
    });
    Ok(Some(host))
}

/// Copies the claim's Secrets next to the host and writes what the claim drives into
/// the host's spec; false (and the reason in `status`) when a Secret cannot be copied,
/// in which case the host is left as it is.
async fn synchronize<S: ClaimStore>(
    claim: &HostClaim,
    ctx: &ClaimContext<S>,
    host: &BareMetalHost,
    status: &mut HostClaimStatus,
    now: &Time,
) -> Result<bool, ClaimError> {
    for kind in DataKind::ALL {
        if let Err(message) = copy_secret(claim, ctx, host, kind).await? {
            status::set_condition(
                status,
                claim,
                SYNCHRONIZED_CONDITION,
                false,
                kind.failure_reason(),
                &message,
                now,
            );
            return Ok(false);
        }
    }
    let wanted = Drive::wanted(claim, host);
    if Drive::current(host) != wanted {
        ctx.store.drive(host, &wanted).await?;
        tracing::info!(claim = %key(claim), host = %key(host), online = wanted.online, "host spec follows the claim");
    }
    status::set_condition(
        status,
        claim,
        SYNCHRONIZED_CONDITION,
        true,
        CONFIGURATION_SYNCED,
        "",
        now,
    );
    Ok(true)
}

/// Makes the copy of the claim's Secret of `kind` in the host's namespace; `Err`
/// with a message (no Secret contents) when it cannot.
async fn copy_secret<S: ClaimStore>(
    claim: &HostClaim,
    ctx: &ClaimContext<S>,
    host: &BareMetalHost,
    kind: DataKind,
) -> Result<Result<(), String>, ClaimError> {
    let source_name = match state_machine::source_secret(kind, claim) {
        Ok(Some(name)) => name,
        Ok(None) => return Ok(Ok(())),
        Err(message) => return Ok(Err(message)),
    };
    let claim_ns = claim.namespace().unwrap_or_default();
    let Some(source) = ctx.store.get::<Secret>(&claim_ns, &source_name).await? else {
        return Ok(Err(format!("Secret {source_name} not found")));
    };
    let host_ns = host.namespace().unwrap_or_default();
    let copy_name = kind.copy_name(&host.name_any());
    let existing = ctx.store.get::<Secret>(&host_ns, &copy_name).await?;
    if let Some(existing) = &existing {
        if !is_copy_of(existing, claim) {
            return Ok(Err(format!(
                "Secret {copy_name} in the host's namespace exists and is not this claim's copy"
            )));
        }
        if existing.data == source.data && existing.type_ == source.type_ {
            return Ok(Ok(()));
        }
    }
    let mut copy = Secret {
        data: source.data,
        type_: source.type_,
        ..Secret::default()
    };
    copy.metadata.name = Some(copy_name);
    copy.metadata.namespace = Some(host_ns);
    copy.metadata.annotations = Some(BTreeMap::from([(COPY_ANNOTATION.to_owned(), key(claim))]));
    ctx.store.apply_secret(&copy).await?;
    Ok(Ok(()))
}

fn is_copy_of(secret: &Secret, claim: &HostClaim) -> bool {
    secret.annotations().get(COPY_ANNOTATION) == Some(&key(claim))
}

/// Deletion: deprovision the host, wait for it, unbind it, drop the copies, then let
/// the claim go.
async fn release<S: ClaimStore>(
    claim: &HostClaim,
    ctx: &ClaimContext<S>,
) -> Result<Action, ClaimError> {
    let old = claim.status.clone().unwrap_or_default();
    let host = match &old.bare_metal_host {
        Some(bound) => ctx.store.get(&bound.namespace, &bound.name).await?,
        None => None,
    };
    let now = now();
    let mut status = old.clone();
    status::set_condition(
        &mut status,
        claim,
        ASSOCIATED_CONDITION,
        false,
        HOST_CLAIM_DELETING,
        "",
        &now,
    );
    match (state_machine::release(claim, host.as_ref()), host) {
        (Release::Deprovision, Some(host)) => {
            ctx.store.drive(&host, &Drive::default()).await?;
            tracing::info!(claim = %key(claim), host = %key(&host), "HostClaim deleted: deprovisioning its host");
            save(claim, ctx, &old, status, &now).await?;
            Ok(Action::await_change())
        }
        (Release::Wait, Some(host)) => {
            status::mirror(&mut status, claim, &host, &now);
            save(claim, ctx, &old, status, &now).await?;
            Ok(Action::await_change())
        }
        (Release::Unbind, Some(host)) => {
            let host_ns = host.namespace().unwrap_or_default();
            for kind in DataKind::ALL {
                let name = kind.copy_name(&host.name_any());
                if let Some(copy) = ctx.store.get::<Secret>(&host_ns, &name).await?
                    && is_copy_of(&copy, claim)
                {
                    ctx.store.delete_secret(&host_ns, &name).await?;
                }
            }
            ctx.store.set_consumer(&host, None).await?;
            tracing::info!(claim = %key(claim), host = %key(&host), "HostClaim deleted: host released");
            ctx.store
                .set_finalizer(claim, HOST_CLAIM_FINALIZER, false)
                .await?;
            Ok(Action::await_change())
        }
        _ => {
            ctx.store
                .set_finalizer(claim, HOST_CLAIM_FINALIZER, false)
                .await?;
            Ok(Action::await_change())
        }
    }
}

/// Writes `status` (with `Ready` and the time) when it differs from `old`.
async fn save<S: ClaimStore>(
    claim: &HostClaim,
    ctx: &ClaimContext<S>,
    old: &HostClaimStatus,
    mut status: HostClaimStatus,
    now: &Time,
) -> Result<(), ClaimError> {
    status::summarize(&mut status, claim, now);
    if status::changed(old, &status) {
        status.last_updated = Some(now.clone());
        ctx.store.apply_status(claim, &status).await?;
    }
    Ok(())
}

/// `namespace/name` of an object, for logs.
fn key(object: &impl ResourceExt) -> String {
    format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}
