//! Inspection: started in `manageable`, read back as hardware details when done.

use super::{IronicProvisioner, conductor_died, last_error};
use crate::ironic::{PatchOp, ProvisionState, ProvisionTarget};
use crate::provisioner::types::{Host, InspectStatus, Outcome};
use crate::provisioner::{ProvisionerResult, hardware};

impl IronicProvisioner {
    pub(super) async fn inspect_node(
        &self,
        host: &Host,
        refresh: bool,
    ) -> ProvisionerResult<InspectStatus> {
        let node = self.require_node(host).await?;
        let start = || async {
            let interface = match Self::wanted_inspect_interface(host, &node) {
                Ok(i) => i,
                Err(message) => return Ok(Outcome::failed(InspectStatus::InProgress, message)),
            };
            if node.inspect_interface.as_deref() != Some(interface)
                && let Err(e) = self
                    .patch(
                        host,
                        &node,
                        &[PatchOp::set("/inspect_interface", interface)],
                    )
                    .await
            {
                return self.busy_or_err(host, e, InspectStatus::InProgress);
            }
            self.transition_to(
                host,
                &node,
                ProvisionTarget::Inspect,
                InspectStatus::Started,
                "start inspection",
            )
            .await
        };
        match node.state() {
            ProvisionState::Available => {
                self.transition_to(
                    host,
                    &node,
                    ProvisionTarget::Manage,
                    InspectStatus::InProgress,
                    "return the host to manageable for inspection",
                )
                .await
            }
            ProvisionState::Inspecting | ProvisionState::InspectWait => {
                self.wait_long(&node, InspectStatus::InProgress)
            }
            ProvisionState::InspectFailed => {
                let aborted = node
                    .last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("abort"));
                // A conductor that died mid-inspection is not the host's error either.
                if host.restart_on_failure || aborted || conductor_died(&node) {
                    start().await
                } else {
                    Ok(Outcome::failed(
                        InspectStatus::InProgress,
                        format!("Inspection failed: {}", last_error(&node)),
                    ))
                }
            }
            ProvisionState::Manageable if refresh || node.inspection_finished_at.is_none() => {
                start().await
            }
            ProvisionState::Manageable => {
                let doc = self
                    .client
                    .get_inventory(&node.uuid)
                    .await
                    .map_err(|e| Self::ironic_err(host, e))?;
                let details = match doc {
                    Some(doc) => hardware::from_inventory(&doc),
                    // Out-of-band and fake inspection leave no inventory, only properties.
                    None => hardware::from_properties(&node.properties),
                };
                tracing::info!(host = %host.id, "inspection complete: {}", hardware::summary(&details));
                Ok(Outcome::done(InspectStatus::Complete(Box::new(details))))
            }
            _ => Self::unexpected(&node, InspectStatus::InProgress, "inspect the host"),
        }
    }
}
