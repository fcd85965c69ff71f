//! The claim's status, pure: conditions with upstream's types and reasons, and what
//! is mirrored from the bound host. The caller passes the time.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use super::state_machine::state_reason;
use crate::api::claims::{ASSOCIATED_CONDITION, NamespacedName, SYNCHRONIZED_CONDITION};
use crate::api::{BareMetalHost, HostClaim, HostClaimStatus, ProvisioningState};
use crate::controller::runtime::conditions::HasConditions;

/// Condition type: the bound host is provisioned.
pub const PROVISIONED_CONDITION: &str = "Provisioned";
/// Condition type: summary of the three others.
pub const READY_CONDITION: &str = "Ready";

/// `Associated` reasons (upstream's).
pub const BARE_METAL_HOST_ASSOCIATED: &str = "BareMetalHostAssociated";
pub const MISSING_BARE_METAL_HOST: &str = "MissingBareMetalHost";
pub const NO_BARE_METAL_HOST: &str = "NoBareMetalHost";
pub const HOST_CLAIM_DELETING: &str = "HostClaimDeleting";
pub const HOST_CLAIM_DELETION_FAILED: &str = "HostClaimDeletionFailed";
/// `Associated` or `Synchronized` reason: a write to the host did not go through.
pub const BARE_METAL_HOST_NOT_SYNCHRONIZED: &str = "BareMetalHostNotSynchronized";
/// `Synchronized` reason when the host says what the claim wants.
pub const CONFIGURATION_SYNCED: &str = "ConfigurationSynced";
/// `Ready` reasons (Cluster API's summary).
const INFO_REPORTED: &str = "InfoReported";
const ISSUES_REPORTED: &str = "IssuesReported";

/// Sets condition `type_` in `status`, keeping its transition time when its status
/// does not change.
pub use crate::controller::runtime::conditions::set_in as set_condition;

impl HasConditions for HostClaimStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

/// Copies what a tenant may see of its bound host into `status`: the HardwareData
/// reference, the power state and `Provisioned` (reason: the provisioning state).
pub fn mirror(status: &mut HostClaimStatus, claim: &HostClaim, host: &BareMetalHost, now: &Time) {
    let host_ref = NamespacedName {
        namespace: host.namespace().unwrap_or_default(),
        name: host.name_any(),
    };
    status.bare_metal_host = Some(host_ref.clone());
    status.hardware_data = Some(host_ref);
    status.powered_on = host.status.as_ref().is_some_and(|s| s.powered_on);
    let state = host.provisioning_state();
    let provisioned = matches!(
        state,
        ProvisioningState::Provisioned | ProvisioningState::ExternallyProvisioned
    );
    set_condition(
        status,
        claim,
        PROVISIONED_CONDITION,
        provisioned,
        &state_reason(state),
        "",
        now,
    );
}

/// Sets `Ready` from `Associated`, `Synchronized` and `Provisioned`: true when all
/// are, else false with one line per condition that is not.
pub fn summarize(status: &mut HostClaimStatus, claim: &HostClaim, now: &Time) {
    let issues: Vec<String> = [
        ASSOCIATED_CONDITION,
        SYNCHRONIZED_CONDITION,
        PROVISIONED_CONDITION,
    ]
    .into_iter()
    .filter_map(
        |type_| match status.conditions.iter().find(|c| c.type_ == type_) {
            Some(c) if c.status == "True" => None,
            Some(c) if !c.message.is_empty() => Some(format!("* {type_}: {}", c.message)),
            Some(c) => Some(format!("* {type_}: {}", c.reason)),
            None => Some(format!("* {type_}: not yet reported")),
        },
    )
    .collect();
    let (ok, reason) = if issues.is_empty() {
        (true, INFO_REPORTED)
    } else {
        (false, ISSUES_REPORTED)
    };
    set_condition(
        status,
        claim,
        READY_CONDITION,
        ok,
        reason,
        &issues.join("\n"),
        now,
    );
}

/// Whether two statuses differ in more than their time stamps.
pub fn changed(old: &HostClaimStatus, new: &HostClaimStatus) -> bool {
    let strip = |s: &HostClaimStatus| {
        let mut s = s.clone();
        s.last_updated = None;
        s
    };
    strip(old) != strip(new)
}
