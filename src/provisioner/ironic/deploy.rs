//! Deploying an image and adopting a host that already runs its OS (taking the image
//! off again is in `deprovision`).

use serde_json::{Value, json};

use super::{IronicProvisioner, capabilities, conductor_died, last_error, sentence, step_name};
use crate::bmc::BmcType;
use crate::ironic::{
    IronicError, Node, PatchOp, ProvisionRequest as Req, ProvisionState, ProvisionTarget,
};
use crate::provisioner::ProvisionerResult;
use crate::provisioner::configdrive::{self, DeploySettings};
use crate::provisioner::types::{Host, Outcome, Progress, ProvisionRequest, StepKind};

impl IronicProvisioner {
    pub(super) async fn provision_node(
        &self,
        host: &Host,
        request: &ProvisionRequest,
    ) -> ProvisionerResult<Progress> {
        let node = self.require_node(host).await?;
        match node.state() {
            ProvisionState::Manageable => self.provide(host, &node).await,
            ProvisionState::Cleaning | ProvisionState::CleanWait | ProvisionState::CleanFailed => {
                self.follow_cleaning(host, &node, "Cleaning before provisioning failed")
                    .await
            }
            ProvisionState::Available => self.start_deploy(host, &node, request).await,
            ProvisionState::Deploying | ProvisionState::WaitCallBack => self.wait_long(
                &node,
                Progress::running(StepKind::Deploy, step_name(&node.deploy_step)),
            ),
            ProvisionState::DeployFailed => {
                let same = configdrive::deploy_settings(&host.id, host.boot_mode, request)
                    .map(|s| Self::same_image(&node, &s))
                    .unwrap_or(false);
                let conductor_died = conductor_died(&node);
                if conductor_died {
                    tracing::info!(host = %host.id, node = %node.uuid, "Ironic failed the deploy only because its conductor died; deploying again");
                }
                if !deploy_again(conductor_died, same, host.restart_on_failure) {
                    let url = node
                        .instance_info
                        .get("image_source")
                        .or(node.instance_info.get("boot_iso"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    Ok(Outcome::failed(
                        Progress::default(),
                        format!(
                            "Image provisioning failed (url: {url}): {}",
                            last_error(&node)
                        ),
                    ))
                } else {
                    self.start_deploy(host, &node, request).await
                }
            }
            ProvisionState::Active => Ok(Outcome::done(Progress::default())),
            _ => Self::unexpected(&node, Progress::default(), "provision the host"),
        }
    }

    /// `provide`, which runs Ironic's automated cleaning: the node's
    /// `automated_clean` follows the host's cleaning mode first.
    async fn provide(&self, host: &Host, node: &Node) -> ProvisionerResult<Progress> {
        if let Err(e) = self.sync_automated_clean(host, node).await {
            return self.busy_or_err(host, e, Progress::default());
        }
        let what = "make the host available (provide)";
        self.transition_to(
            host,
            node,
            ProvisionTarget::Provide,
            Progress::default(),
            what,
        )
        .await
    }

    pub(super) async fn adopt_node(
        &self,
        host: &Host,
        request: &ProvisionRequest,
    ) -> ProvisionerResult<Progress> {
        let node = self.require_node(host).await?;
        let start = || async {
            // Adoption records what runs on the host; an incomplete request (no
            // checksum, say) still describes it well enough.
            if let Ok(settings) = configdrive::deploy_settings(&host.id, host.boot_mode, request)
                && let Err(e) = self
                    .setup_instance(host, &node, &settings, &request.instance_uuid)
                    .await
            {
                return self.busy_or_err(host, e, Progress::default());
            }
            self.transition_to(
                host,
                &node,
                ProvisionTarget::Adopt,
                Progress::started(),
                "adopt the provisioned host",
            )
            .await
        };
        match node.state() {
            ProvisionState::Enroll | ProvisionState::Verifying => {
                self.wait(&node, Progress::default())
            }
            ProvisionState::Manageable => start().await,
            ProvisionState::Adopting => self.wait(&node, Progress::default()),
            ProvisionState::AdoptFailed if host.restart_on_failure => start().await,
            ProvisionState::AdoptFailed => Ok(Outcome::failed(
                Progress::default(),
                format!("Host adoption failed: {}", last_error(&node)),
            )),
            ProvisionState::Active => {
                if node.maintenance && node.fault.is_none() {
                    if let Err(e) = self.client.clear_maintenance(&node.uuid).await {
                        return self.busy_or_err(host, e, Progress::default());
                    }
                    return self.changed(Progress::default());
                }
                Ok(Outcome::done(Progress::default()))
            }
            // As upstream: a node in any other state (`available` for a host marked
            // externally provisioned after inspection, say) is left as it is; the
            // spec, not the node, records what runs on the host.
            _ => Ok(Outcome::done(Progress::default())),
        }
    }

    /// Writes instance_info and the deploy interface for a request.
    async fn setup_instance(
        &self,
        host: &Host,
        node: &Node,
        settings: &DeploySettings,
        instance_uuid: &str,
    ) -> Result<(), IronicError> {
        let mut ops = vec![
            PatchOp::set(
                "/instance_info",
                Value::Object(settings.instance_info.clone()),
            ),
            PatchOp::set("/properties/capabilities", capabilities(host.boot_mode)),
        ];
        if !instance_uuid.is_empty() && node.instance_uuid.as_deref() != Some(instance_uuid) {
            ops.push(PatchOp::set("/instance_uuid", instance_uuid));
        }
        // fake-hardware keeps its fake deploy interface: nothing is written anywhere.
        if host.bmc.kind != BmcType::Fake
            && node.deploy_interface.as_deref() != Some(settings.deploy_interface)
        {
            ops.push(PatchOp::set("/deploy_interface", settings.deploy_interface));
        }
        self.patch(host, node, &ops).await.map(drop)
    }

    fn same_image(node: &Node, settings: &DeploySettings) -> bool {
        [
            "image_source",
            "boot_iso",
            "image_checksum",
            "image_os_hash_value",
        ]
        .iter()
        .all(|k| node.instance_info.get(*k) == settings.instance_info.get(*k))
    }

    async fn start_deploy(
        &self,
        host: &Host,
        node: &Node,
        request: &ProvisionRequest,
    ) -> ProvisionerResult<Progress> {
        let settings = match configdrive::deploy_settings(&host.id, host.boot_mode, request) {
            Ok(s) => s,
            Err(e) => return Ok(Outcome::failed(Progress::default(), e.to_string())),
        };
        if let Err(e) = self
            .setup_instance(host, node, &settings, &request.instance_uuid)
            .await
        {
            return self.busy_or_err(host, e, Progress::default());
        }
        let validation = self
            .client
            .validate_node(&node.uuid)
            .await
            .map_err(|e| Self::ironic_err(host, e))?;
        for iface in ["boot", "deploy"] {
            if validation[iface]["result"] == json!(false) {
                let reason = validation[iface]["reason"]
                    .as_str()
                    .unwrap_or("no reason given");
                return Ok(Outcome::failed(
                    Progress::default(),
                    format!("host validation error: {iface}: {}", sentence(reason)),
                ));
            }
        }
        let mut req = Req::new(ProvisionTarget::Active);
        req.configdrive = settings.config_drive;
        req.deploy_steps = settings.deploy_steps;
        self.transition(host, node, req, Progress::started(), "start provisioning")
            .await
    }
}

/// Whether a node in `deploy failed` is deployed again rather than the failure
/// reported: when its conductor died (a take-over or a restart failed it, not the
/// deploy itself), for a new image, or when the user asked to retry.
fn deploy_again(conductor_died: bool, same_image: bool, restart_on_failure: bool) -> bool {
    conductor_died || !same_image || restart_on_failure
}

#[cfg(test)]
mod tests {
    use super::deploy_again;

    #[test]
    fn a_deploy_failed_because_its_conductor_died_is_deployed_again_without_a_retry_asked() {
        for (conductor_died, same_image, restart, again) in [
            (true, true, false, true),
            (true, false, false, true),
            (false, true, false, false),
            (false, true, true, true),
            (false, false, false, true),
        ] {
            assert_eq!(
                deploy_again(conductor_died, same_image, restart),
                again,
                "conductor died {conductor_died}, same image {same_image}, retry asked {restart}"
            );
        }
    }
}
