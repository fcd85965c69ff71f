//! Servicing: BIOS settings and firmware updates on an active (provisioned) node as
//! Ironic service steps (API 1.87), and the ways back when they fail or the change is
//! withdrawn.

use super::{IronicProvisioner, last_error, step_name};
use crate::ironic::{Node, ProvisionRequest as Req, ProvisionState, ProvisionTarget};
use crate::provisioner::configdrive;
use crate::provisioner::types::{Host, Outcome, Progress, ServiceRequest, StepKind};
use crate::provisioner::{PrepareRequest, ProvisionerResult};

impl IronicProvisioner {
    pub(super) async fn service_node(
        &self,
        host: &Host,
        request: &ServiceRequest,
    ) -> ProvisionerResult<Progress> {
        let node = self.require_node(host).await?;
        let request = match self.still_to_service(&node, request).await {
            Ok(request) => request,
            Err(e) => return self.busy_or_err(host, e, Progress::default()),
        };
        match node.state() {
            ProvisionState::Active if request.is_empty() => Ok(Outcome::done(Progress::default())),
            ProvisionState::Active => self.start_service(host, &node, &request).await,
            // Nothing left to apply (withdrawn or in place): back to active as it was.
            ProvisionState::ServiceFailed if request.is_empty() || request.withdrawn => {
                self.abort_service(host, &node).await
            }
            ProvisionState::ServiceWait if request.withdrawn => {
                self.abort_service(host, &node).await
            }
            ProvisionState::ServiceFailed if host.restart_on_failure => {
                if node.maintenance {
                    return self.leave_maintenance(host, &node).await;
                }
                self.start_service(host, &node, &request).await
            }
            ProvisionState::ServiceFailed => Ok(Outcome::failed(
                Progress::default(),
                format!("Servicing failed: {}", last_error(&node)),
            )),
            ProvisionState::Servicing | ProvisionState::ServiceWait => self.wait_long(
                &node,
                Progress::running(StepKind::Service, step_name(&node.service_step)),
            ),
            _ => Self::unexpected(&node, Progress::default(), "service the host"),
        }
    }

    /// `request` without the BIOS values the node already reports.
    async fn still_to_service(
        &self,
        node: &Node,
        request: &ServiceRequest,
    ) -> Result<ServiceRequest, crate::ironic::IronicError> {
        let as_prepare = PrepareRequest {
            bios_settings: request.bios_settings.clone(),
            ..Default::default()
        };
        let remaining = self.bios_still_to_apply(node, &as_prepare).await?;
        Ok(ServiceRequest {
            bios_settings: remaining.bios_settings,
            ..request.clone()
        })
    }

    async fn start_service(
        &self,
        host: &Host,
        node: &Node,
        request: &ServiceRequest,
    ) -> ProvisionerResult<Progress> {
        let mut req = Req::new(ProvisionTarget::Service);
        req.service_steps = Some(configdrive::firmware_steps(
            &request.bios_settings,
            &request.firmware_updates,
        ));
        match self.set_state(node, &req).await {
            Ok(()) => {
                tracing::info!(host = %host.id, node = %node.uuid, "start servicing");
                self.changed(Progress::started())
            }
            Err(e) => self.refused_or_err(
                host,
                e,
                Progress::default(),
                "Ironic refused the service steps",
            ),
        }
    }

    /// Ironic refuses to abort servicing of a node in maintenance, and servicing
    /// failures put it there: out of maintenance first.
    async fn abort_service(&self, host: &Host, node: &Node) -> ProvisionerResult<Progress> {
        if node.state() == ProvisionState::ServiceFailed && node.maintenance {
            return self.leave_maintenance(host, node).await;
        }
        self.transition_to(
            host,
            node,
            ProvisionTarget::Abort,
            Progress::default(),
            "abort servicing: the change was withdrawn",
        )
        .await
    }

    async fn leave_maintenance(&self, host: &Host, node: &Node) -> ProvisionerResult<Progress> {
        match self.client.clear_maintenance(&node.uuid).await {
            Ok(()) => self.changed(Progress::default()),
            Err(e) => self.busy_or_err(host, e, Progress::default()),
        }
    }
}
