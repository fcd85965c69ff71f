//! Removing the node from Ironic (deletion and detaching).

use super::{IronicProvisioner, MAINTENANCE_REASON};
use crate::ironic::{PatchOp, ProvisionRequest as Req, ProvisionState, ProvisionTarget};
use crate::provisioner::ProvisionerResult;
use crate::provisioner::types::{Host, Outcome};

impl IronicProvisioner {
    pub(super) async fn remove_node(&self, host: &Host) -> ProvisionerResult<()> {
        let node = match self.find_node(host, false).await {
            Ok(Some(node)) => node,
            Ok(None) => return Ok(Outcome::done(())),
            Err(e) => return Err(Self::ironic_err(host, e)),
        };
        let state = node.state();
        match state {
            // The conductor is working on these; deletion would be refused.
            state if state.is_busy() => return self.wait_long(&node, ()),
            ProvisionState::InspectWait | ProvisionState::CleanWait => {
                return self
                    .transition(
                        host,
                        &node,
                        Req::new(ProvisionTarget::Abort),
                        (),
                        "abort the waiting operation before deletion",
                    )
                    .await;
            }
            _ => {}
        }
        let allowed_without_maintenance = matches!(
            state,
            ProvisionState::Enroll | ProvisionState::Manageable | ProvisionState::AdoptFailed
        );
        let result = async {
            if allowed_without_maintenance {
                if node.instance_uuid.is_some() {
                    self.patch(host, &node, &[PatchOp::remove("/instance_uuid")])
                        .await?;
                }
            } else if !node.maintenance {
                self.client
                    .set_maintenance(&node.uuid, MAINTENANCE_REASON)
                    .await?;
            }
            self.client.delete_node(&node.uuid).await
        }
        .await;
        match result {
            Ok(()) => {
                tracing::info!(host = %host.id, node = %node.uuid, state = node.provision_state(), "deleted from Ironic");
                Ok(Outcome {
                    changed: true,
                    requeue_after: None,
                    error: None,
                    value: (),
                })
            }
            Err(e) => self.busy_or_err(host, e, ()),
        }
    }
}
