//! What the controllers ask of a host: its name for logs, boot mode, whether it has
//! what registration needs, and where provisioning stands.

use super::spec::{BootMode, InspectionMode};
use super::status::ProvisioningState;
use super::{BareMetalHost, INSPECT_ANNOTATION};

impl BareMetalHost {
    /// `namespace/name`, for logs and messages.
    pub fn namespaced_name(&self) -> String {
        crate::api::namespaced_name(&self.metadata)
    }

    /// Boot mode to use: spec.bootMode, UEFI when unset.
    pub fn boot_mode(&self) -> BootMode {
        self.spec.boot_mode.unwrap_or_default()
    }

    /// BMC address or credentials given (upstream `HasBMCDetails`).
    pub fn has_bmc_details(&self) -> bool {
        self.spec
            .bmc
            .as_ref()
            .is_some_and(|bmc| !bmc.address.is_empty() || !bmc.credentials_name.is_empty())
    }

    /// Inspection turned off, by spec.inspectionMode or the legacy annotation.
    pub fn inspection_disabled(&self) -> bool {
        self.spec.inspection_mode == Some(InspectionMode::Disabled)
            || self
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(INSPECT_ANNOTATION))
                .is_some_and(|v| v == "disabled")
    }

    /// An image or custom deploy step is wanted that has not been provisioned yet
    /// (upstream `NeedsProvisioning`); only while the host should be online.
    pub fn needs_provisioning(&self) -> bool {
        if !self.spec.online {
            return false;
        }
        let provisioned = self.status.as_ref().map(|s| &s.provisioning);
        let new_image = self.spec.image.as_ref().is_some_and(|i| !i.url.is_empty())
            && provisioned
                .and_then(|p| p.image.as_ref())
                .is_none_or(|i| i.url.is_empty());
        let new_custom_deploy = self
            .spec
            .custom_deploy
            .as_ref()
            .filter(|c| !c.method.is_empty())
            .is_some_and(|wanted| {
                provisioned
                    .and_then(|p| p.custom_deploy.as_ref())
                    .is_none_or(|done| done.method != wanted.method)
            });
        new_image || new_custom_deploy
    }

    /// bmo (not someone else) put an image or custom deploy on the host (upstream
    /// `WasProvisioned`).
    pub fn was_provisioned(&self) -> bool {
        if self.spec.externally_provisioned {
            return false;
        }
        self.status.as_ref().is_some_and(|s| {
            s.provisioning
                .image
                .as_ref()
                .is_some_and(|i| !i.url.is_empty())
                || s.provisioning.custom_deploy.is_some()
        })
    }

    /// The provisioning state, `None` ("") when there is no status yet.
    pub fn provisioning_state(&self) -> ProvisioningState {
        self.status
            .as_ref()
            .map(|s| s.provisioning.state)
            .unwrap_or_default()
    }
}
