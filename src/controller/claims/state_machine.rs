//! The HostClaim controller's decisions, pure: which namespaces a HostDeployPolicy
//! opens to a claim, which host a claim binds, what the bound host's spec must say,
//! and the claim's status as mirrored from its host. No I/O, no clock.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, SecretReference};
use kube::ResourceExt;

use crate::api::claims::{HostClaimNamespaces, HostSelector, HostSelectorRequirement};
use crate::api::host::{CustomDeploy, Image};
use crate::api::{BareMetalHost, HostClaim, HostDeployPolicy, ProvisioningState};

/// `kind` of a claim in a host's `spec.consumerRef`.
pub const HOST_CLAIM_KIND: &str = "HostClaim";
/// Label of the failure domain a claim prefers (Cluster API's).
pub const FAILURE_DOMAIN_LABEL: &str = "infrastructure.cluster.x-k8s.io/failure-domain";
/// Annotation that pauses a host; a paused host is never bound.
pub const PAUSED_ANNOTATION: &str = "baremetalhost.metal3.io/paused";

/// Why no host could be picked, as opposed to there being none.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectionError {
    #[error("HostDeployPolicy {policy}: nameMatches is not a valid regular expression")]
    BadRegex { policy: String },
    #[error("hostSelector: {0}")]
    BadSelector(String),
}

/// Whether `policy` opens its namespace to claims from `namespace` (with `labels`).
/// Every criterion given must hold; a policy without `hostClaimNamespaces` opens
/// nothing (as upstream's).
pub fn admits(
    policy: &HostDeployPolicy,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectionError> {
    let Some(HostClaimNamespaces {
        names,
        name_matches,
        has_labels,
    }) = &policy.spec.host_claim_namespaces
    else {
        return Ok(false);
    };
    if !names.is_empty() && !names.iter().any(|n| n == namespace) {
        return Ok(false);
    }
    if let Some(pattern) = name_matches.as_deref().filter(|p| !p.is_empty()) {
        // Go's regexp.MatchString: a match anywhere in the name.
        let regex = regex::Regex::new(pattern).map_err(|_| SelectionError::BadRegex {
            policy: format!(
                "{}/{}",
                policy.namespace().unwrap_or_default(),
                policy.name_any()
            ),
        })?;
        if !regex.is_match(namespace) {
            return Ok(false);
        }
    }
    Ok(has_labels.iter().all(|pair| {
        labels.get(&pair.name).is_some_and(|v| {
            pair.value
                .as_deref()
                .is_none_or(|wanted| wanted.is_empty() || wanted == v)
        })
    }))
}

/// The namespaces whose hosts a claim from `namespace` may bind.
pub fn open_namespaces(
    policies: &[HostDeployPolicy],
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<Vec<String>, SelectionError> {
    let mut open = Vec::new();
    for policy in policies {
        let policy_ns = policy.namespace().unwrap_or_default();
        if open.contains(&policy_ns) {
            continue;
        }
        if admits(policy, namespace, labels)? {
            open.push(policy_ns);
        }
    }
    open.sort();
    Ok(open)
}

/// Whether `labels` meet one requirement (operators as Kubernetes label selectors,
/// case-insensitive as upstream's).
fn requirement_holds(
    req: &HostSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectionError> {
    let value = labels.get(&req.key);
    let one = || match req.values.as_slice() {
        [v] => Ok(v),
        _ => Err(SelectionError::BadSelector(format!(
            "operator {} on {} needs exactly one value",
            req.operator, req.key
        ))),
    };
    let number = |s: &str| {
        s.parse::<i64>().map_err(|_| {
            SelectionError::BadSelector(format!("{} on {} needs an integer", req.operator, req.key))
        })
    };
    Ok(match req.operator.to_lowercase().as_str() {
        "in" => value.is_some_and(|v| req.values.contains(v)),
        "notin" => value.is_none_or(|v| !req.values.contains(v)),
        "=" | "==" => value == Some(one()?),
        "!=" => value != Some(one()?),
        "exists" => value.is_some(),
        "!" => value.is_none(),
        "gt" => {
            let limit = number(one()?)?;
            value.is_some_and(|v| v.parse::<i64>().is_ok_and(|v| v > limit))
        }
        "lt" => {
            let limit = number(one()?)?;
            value.is_some_and(|v| v.parse::<i64>().is_ok_and(|v| v < limit))
        }
        other => {
            return Err(SelectionError::BadSelector(format!(
                "unknown operator {other} on {}",
                req.key
            )));
        }
    })
}

/// Whether a host with `labels` meets the claim's selector.
pub fn selector_matches(
    selector: Option<&HostSelector>,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectionError> {
    let Some(selector) = selector else {
        return Ok(true);
    };
    for (key, wanted) in &selector.match_labels {
        if labels.get(key) != Some(wanted) {
            return Ok(false);
        }
    }
    for req in &selector.match_expressions {
        if !requirement_holds(req, labels)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The consumer reference a bound host carries.
pub fn consumer_ref(claim: &HostClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("metal3.io/v1alpha1".into()),
        kind: Some(HOST_CLAIM_KIND.into()),
        name: Some(claim.name_any()),
        namespace: claim.namespace(),
        ..ObjectReference::default()
    }
}

/// Whether `host` is bound to `claim` (kind HostClaim of group metal3.io, same
/// namespace and name).
pub fn bound_to(host: &BareMetalHost, claim: &HostClaim) -> bool {
    host.spec.consumer_ref.as_ref().is_some_and(|r| {
        r.kind.as_deref() == Some(HOST_CLAIM_KIND)
            && r.api_version
                .as_deref()
                .is_some_and(|v| v.starts_with("metal3.io/"))
            && r.name.as_deref() == Some(claim.name_any().as_str())
            && r.namespace == claim.namespace()
    })
}

/// Whether `host` can be bound: free, not being deleted, not paused, ready or
/// available, no error.
fn is_free(host: &BareMetalHost) -> bool {
    host.spec.consumer_ref.is_none()
        && host.metadata.deletion_timestamp.is_none()
        && !host.annotations().contains_key(PAUSED_ANNOTATION)
        && matches!(
            host.provisioning_state(),
            ProvisioningState::Ready | ProvisioningState::Available
        )
        && host
            .status
            .as_ref()
            .is_none_or(|s| s.error_message.is_empty())
}

/// The host `claim` binds among `hosts` (already limited to the open namespaces): one
/// already bound to it (a bind whose status write was lost), else a free host meeting
/// the selector, in the claim's failure domain when one is free there. Among equals
/// the claim's uid picks, so concurrent claims spread over the hosts.
pub fn choose<'h>(
    claim: &HostClaim,
    hosts: &'h [BareMetalHost],
) -> Result<Option<&'h BareMetalHost>, SelectionError> {
    if let Some(mine) = hosts.iter().find(|h| bound_to(h, claim)) {
        return Ok(Some(mine));
    }
    let mut free = Vec::new();
    for host in hosts.iter().filter(|h| is_free(h)) {
        if selector_matches(claim.spec.host_selector.as_ref(), host.labels())? {
            free.push(host);
        }
    }
    free.sort_by_key(|h| (h.namespace(), h.name_any()));
    if let Some(domain) = claim
        .spec
        .failure_domain
        .as_deref()
        .filter(|d| !d.is_empty())
    {
        let in_domain: Vec<_> = free
            .iter()
            .copied()
            .filter(|h| h.labels().get(FAILURE_DOMAIN_LABEL).map(String::as_str) == Some(domain))
            .collect();
        if !in_domain.is_empty() {
            free = in_domain;
        }
    }
    if free.is_empty() {
        return Ok(None);
    }
    let seed = claim
        .metadata
        .uid
        .as_deref()
        .unwrap_or_default()
        .bytes()
        .fold(0usize, |h, b| {
            h.wrapping_mul(31).wrapping_add(usize::from(b))
        });
    Ok(free.get(seed % free.len()).copied())
}

/// Which claim Secret becomes which copy in the host's namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    UserData,
    NetworkData,
    MetaData,
}

impl DataKind {
    pub const ALL: [DataKind; 3] = [
        DataKind::UserData,
        DataKind::NetworkData,
        DataKind::MetaData,
    ];

    /// The claim's reference of this kind.
    pub fn reference(self, claim: &HostClaim) -> Option<&SecretReference> {
        match self {
            DataKind::UserData => claim.spec.user_data.as_ref(),
            DataKind::NetworkData => claim.spec.network_data.as_ref(),
            DataKind::MetaData => claim.spec.meta_data.as_ref(),
        }
    }

    /// Name of the copy in the host's namespace: `<host>-userdata` and so on.
    pub fn copy_name(self, host: &str) -> String {
        let suffix = match self {
            DataKind::UserData => "userdata",
            DataKind::NetworkData => "networkdata",
            DataKind::MetaData => "metadata",
        };
        format!("{host}-{suffix}")
    }

    /// The `Synchronized` reason when the Secret cannot be copied (upstream's).
    pub fn failure_reason(self) -> &'static str {
        match self {
            DataKind::UserData => "UserDataSecretSyncFailure",
            DataKind::NetworkData => "NetworkDataSecretSyncFailure",
            DataKind::MetaData => "MetaDataSecretSyncFailure",
        }
    }
}

/// The name of the claim's Secret of this kind, when it may be copied: a claim
/// refers only to Secrets of its own namespace (it must not copy another tenant's).
pub fn source_secret(kind: DataKind, claim: &HostClaim) -> Result<Option<String>, String> {
    let Some(reference) = kind.reference(claim) else {
        return Ok(None);
    };
    let own = claim.namespace().unwrap_or_default();
    match reference.namespace.as_deref() {
        Some(ns) if !ns.is_empty() && ns != own => Err(format!(
            "Secret {ns}/{} is outside the claim's namespace",
            reference.name.as_deref().unwrap_or_default()
        )),
        _ => match reference.name.as_deref().filter(|n| !n.is_empty()) {
            Some(name) => Ok(Some(name.to_owned())),
            None => Err("Secret reference without a name".into()),
        },
    }
}

/// What the claim drives on its host.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Drive {
    pub online: bool,
    pub image: Option<Image>,
    pub custom_deploy: Option<CustomDeploy>,
    pub user_data: Option<SecretReference>,
    pub network_data: Option<SecretReference>,
    pub meta_data: Option<SecretReference>,
}

impl Drive {
    /// The host's spec as the claim wants it (Secrets as their copies next to it).
    pub fn wanted(claim: &HostClaim, host: &BareMetalHost) -> Drive {
        let host_name = host.name_any();
        let copy = |kind: DataKind| {
            kind.reference(claim).map(|_| SecretReference {
                name: Some(kind.copy_name(&host_name)),
                namespace: host.namespace(),
            })
        };
        Drive {
            online: claim.spec.powered_on,
            image: claim.spec.image.clone(),
            custom_deploy: claim.spec.custom_deploy.clone(),
            user_data: copy(DataKind::UserData),
            network_data: copy(DataKind::NetworkData),
            meta_data: copy(DataKind::MetaData),
        }
    }

    /// What the host says now.
    pub fn current(host: &BareMetalHost) -> Drive {
        let in_host_ns = |r: &Option<SecretReference>| {
            r.clone().map(|mut r| {
                // The host's references are read in its own namespace.
                if r.namespace.as_deref().is_none_or(str::is_empty) {
                    r.namespace = host.namespace();
                }
                r
            })
        };
        Drive {
            online: host.spec.online,
            image: host.spec.image.clone(),
            custom_deploy: host.spec.custom_deploy.clone(),
            user_data: in_host_ns(&host.spec.user_data),
            network_data: in_host_ns(&host.spec.network_data),
            meta_data: in_host_ns(&host.spec.meta_data),
        }
    }
}

/// What deleting a claim does to its host, one step at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Take the claim's image, data and power off the host: it deprovisions.
    Deprovision,
    /// The host is still deprovisioning.
    Wait,
    /// Drop the consumer reference and the copied Secrets.
    Unbind,
    /// Nothing of the claim is left on the host (or there is no host).
    Done,
}

/// The next release step for `claim` and its bound host (`None`: gone).
pub fn release(claim: &HostClaim, host: Option<&BareMetalHost>) -> Release {
    let Some(host) = host.filter(|h| bound_to(h, claim)) else {
        return Release::Done;
    };
    if Drive::current(host) != Drive::default() {
        return Release::Deprovision;
    }
    match host.provisioning_state() {
        ProvisioningState::Provisioning
        | ProvisioningState::Provisioned
        | ProvisioningState::Deprovisioning => Release::Wait,
        _ => Release::Unbind,
    }
}

/// `Provisioned` condition's reason: the host's provisioning state in one word
/// (`available`, `provisioned`, `externallyProvisioned`, …; `unknown` before the
/// first one), since condition reasons cannot hold spaces.
pub fn state_reason(state: ProvisioningState) -> String {
    let mut words = state.as_str().split(' ').filter(|w| !w.is_empty());
    let Some(first) = words.next() else {
        return "unknown".into();
    };
    let mut reason = first.to_owned();
    for word in words {
        let mut chars = word.chars();
        if let Some(c) = chars.next() {
            reason.extend(c.to_uppercase());
            reason.push_str(chars.as_str());
        }
    }
    reason
}

#[cfg(test)]
mod tests;
