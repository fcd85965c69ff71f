//! Preparing (manual cleaning: RAID, BIOS, firmware updates, disk wipe) and the one way back from
//! failed cleaning.

use serde_json::Value;

use super::{IronicProvisioner, conductor_died, last_error, step_name};
use crate::ironic::{
    IronicError, Node, PatchOp, ProvisionRequest as Req, ProvisionState, ProvisionTarget,
};
use crate::provisioner::ProvisionerResult;
use crate::provisioner::configdrive;
use crate::provisioner::types::{Host, Outcome, PrepareRequest, PrepareStatus, Progress, StepKind};

impl IronicProvisioner {
    pub(super) async fn prepare_node(
        &self,
        host: &Host,
        request: &PrepareRequest,
    ) -> ProvisionerResult<PrepareStatus> {
        let node = self.require_node(host).await?;
        // BIOS values the node already has are not applied again: once cleaning
        // applied them (Ironic reads the settings back after the step), preparing is
        // done.
        let request = &match self.bios_still_to_apply(&node, request).await {
            Ok(request) => request,
            Err(e) => return self.busy_or_err(host, e, PrepareStatus::default()),
        };
        let has_work = request.unprepared
            && (request.raid.is_some()
                || !request.bios_settings.is_empty()
                || !request.firmware_updates.is_empty()
                || request.full_disk_wipe);
        match node.state() {
            ProvisionState::Available if has_work => {
                self.transition_to(
                    host,
                    &node,
                    ProvisionTarget::Manage,
                    PrepareStatus::default(),
                    "return the host to manageable for preparing",
                )
                .await
            }
            ProvisionState::Available | ProvisionState::Manageable if !has_work => {
                Ok(Outcome::done(PrepareStatus::default()))
            }
            ProvisionState::Manageable => {
                let steps = match self.clean_steps(host, &node, request).await {
                    Ok(steps) => steps,
                    Err(e) => {
                        return self.refused_or_err(
                            host,
                            e,
                            PrepareStatus::default(),
                            "Ironic refused the RAID configuration",
                        );
                    }
                };
                let mut req = Req::new(ProvisionTarget::Clean);
                req.clean_steps = Some(steps);
                self.transition(
                    host,
                    &node,
                    req,
                    Progress::started(),
                    "start manual cleaning",
                )
                .await
            }
            ProvisionState::Cleaning | ProvisionState::CleanWait | ProvisionState::CleanFailed => {
                self.follow_cleaning(host, &node, "Cleaning failed").await
            }
            _ => Self::unexpected(&node, PrepareStatus::default(), "prepare the host"),
        }
    }

    /// `request` without the BIOS settings whose values the node already reports.
    pub(super) async fn bios_still_to_apply(
        &self,
        node: &Node,
        request: &PrepareRequest,
    ) -> Result<PrepareRequest, IronicError> {
        let mut request = request.clone();
        if request.bios_settings.is_empty() {
            return Ok(request);
        }
        let current = self.client.get_bios(&node.uuid).await?.unwrap_or_default();
        request.bios_settings.retain(|(name, wanted)| {
            let wanted = match wanted {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            !current
                .iter()
                .any(|s| &s.name == name && s.value.as_deref() == Some(wanted.as_str()))
        });
        Ok(request)
    }

    /// Follows cleaning that an operation started: waits while Ironic cleans; once
    /// cleaning failed, retries when the user asked for it or when Ironic failed it
    /// only because its conductor died (a take-over or a restart), else fails with
    /// `failure` and Ironic's last error.
    pub(super) async fn follow_cleaning(
        &self,
        host: &Host,
        node: &Node,
        failure: &str,
    ) -> ProvisionerResult<Progress> {
        match node.state() {
            ProvisionState::CleanFailed if host.restart_on_failure || conductor_died(node) => {
                self.recover_failed_cleaning(host, node).await
            }
            ProvisionState::CleanFailed => Ok(Outcome::failed(
                Progress::default(),
                format!("{failure}: {}", last_error(node)),
            )),
            _ => self.wait_long(
                node,
                Progress::running(StepKind::Clean, step_name(&node.clean_step)),
            ),
        }
    }

    /// The one way back from failed cleaning, once the user asked to retry: out of
    /// maintenance, then `manage`, so the operation starts again from `manageable`.
    pub(super) async fn recover_failed_cleaning<T: Default>(
        &self,
        host: &Host,
        node: &Node,
    ) -> ProvisionerResult<T> {
        if node.maintenance
            && let Err(e) = self.client.clear_maintenance(&node.uuid).await
        {
            return self.busy_or_err(host, e, T::default());
        }
        self.transition_to(
            host,
            node,
            ProvisionTarget::Manage,
            T::default(),
            "recover from failed cleaning",
        )
        .await
    }

    /// Sets the RAID target (and the agent RAID interface for software RAID) and
    /// returns the clean steps to run.
    pub(super) async fn clean_steps(
        &self,
        host: &Host,
        node: &Node,
        request: &PrepareRequest,
    ) -> Result<Vec<Value>, IronicError> {
        let plan = configdrive::clean_plan(request);
        if plan.software_raid && node.raid_interface.as_deref() != Some("agent") {
            self.patch(host, node, &[PatchOp::set("/raid_interface", "agent")])
                .await?;
        }
        if let Some(target) = &plan.target_raid_config {
            self.client
                .set_target_raid_config(&node.uuid, target)
                .await?;
        }
        Ok(plan.steps)
    }
}
