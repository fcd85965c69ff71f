//! What every operation needs: finding the node, patching it, changing its provision
//! state and reading its power.

use reqwest::StatusCode;

use super::{IronicProvisioner, sentence};
use crate::ironic::{
    IronicError, Node, PatchOp, ProvisionRequest as Req, ProvisionState, ProvisionTarget,
};
use crate::provisioner::types::{AutomatedCleaningMode, Host, HostId, Outcome, PowerState};
use crate::provisioner::{ProvisionerError, ProvisionerResult};

impl IronicProvisioner {
    /// The node by recorded UUID, then by `namespace~name` (from the shared list
    /// of nodes when it is recent and bmo did not write to the node since, else on
    /// its own), then (for registration) by the boot MAC's port.
    pub(super) async fn find_node(
        &self,
        host: &Host,
        by_mac: bool,
    ) -> Result<Option<Node>, IronicError> {
        let id = host.provisioning_id.as_deref().filter(|id| !id.is_empty());
        if let Some(node) = self
            .nodes
            .node(&self.client, id, &host.id.node_name())
            .await?
            && self.other_owner(host, &node).is_none()
        {
            return Ok(Some(node));
        }
        if let Some(id) = id
            && let Some(node) = self.client.get_node(id).await?
            && self.other_owner(host, &node).is_none()
        {
            return Ok(Some(node));
        }
        if let Some(node) = self.client.get_node(&host.id.node_name()).await? {
            return Ok(Some(node));
        }
        if by_mac
            && let Some(mac) = &host.boot_mac
            && let Some(port) = self.client.find_port_by_mac(mac).await?
        {
            // Another host's node is returned all the same: registration names the
            // owner in its error rather than making a node the MAC is taken for.
            return self.client.get_node(&port.node_uuid).await;
        }
        Ok(None)
    }

    /// The existing host other than `host` that holds `node`, when `node` is not named
    /// after `host`: a recorded `status.provisioning.ID` or a boot MAC never makes
    /// another host's node this host's (the status can be restored from an annotation
    /// anyone who creates hosts can write).
    pub(super) fn other_owner(&self, host: &Host, node: &Node) -> Option<HostId> {
        if node.name.as_deref() == Some(host.id.node_name().as_str()) {
            return None;
        }
        let owner = self
            .owners
            .get()?
            .other_owner(&host.id, &node.uuid, node.name.as_deref())?;
        tracing::warn!(host = %host.id, node = %node.uuid, owner = %owner, "the Ironic node the host points at belongs to another host; not acting on it");
        Some(owner)
    }

    /// The host's node, or `None` when it has none (after logging that `what` has
    /// nothing to act on): for the steps that end a host's life, which a vanished
    /// node must not hold up.
    pub(super) async fn own_node(
        &self,
        host: &Host,
        what: &str,
    ) -> Result<Option<Node>, ProvisionerError> {
        let node = self
            .find_node(host, false)
            .await
            .map_err(|e| Self::ironic_err(host, e))?;
        if node.is_none() {
            tracing::info!(host = %host.id, "no Ironic node of its own: nothing to {what}");
        }
        Ok(node)
    }

    pub(super) async fn require_node(&self, host: &Host) -> Result<Node, ProvisionerError> {
        match self.find_node(host, false).await {
            Ok(Some(node)) => Ok(node),
            Ok(None) => Err(ProvisionerError::NeedsRegistration {
                host: host.id.to_string(),
            }),
            Err(e) => Err(Self::ironic_err(host, e)),
        }
    }
    pub(super) async fn patch(
        &self,
        host: &Host,
        node: &Node,
        ops: &[PatchOp],
    ) -> Result<Node, IronicError> {
        tracing::debug!(host = %host.id, paths = ?ops.iter().map(|o| o.path.as_str()).collect::<Vec<_>>(), "updating Ironic node");
        self.client.patch_node(&node.uuid, ops).await
    }

    pub(super) async fn set_state(&self, node: &Node, request: &Req) -> Result<(), IronicError> {
        self.client
            .change_provision_state(&node.uuid, request)
            .await
    }

    /// [`Self::transition`] with a plain request to `target` (no steps, no data).
    pub(super) async fn transition_to<T>(
        &self,
        host: &Host,
        node: &Node,
        target: ProvisionTarget,
        value: T,
        what: &str,
    ) -> ProvisionerResult<T> {
        self.transition(host, node, Req::new(target), value, what)
            .await
    }

    /// Runs a provision-state change and turns its failure into an outcome.
    pub(super) async fn transition<T>(
        &self,
        host: &Host,
        node: &Node,
        request: Req,
        value: T,
        what: &str,
    ) -> ProvisionerResult<T> {
        match self.set_state(node, &request).await {
            Ok(()) => {
                tracing::info!(host = %host.id, node = %node.uuid, "{what}");
                self.changed(value)
            }
            Err(e) if e.status() == Some(StatusCode::BAD_REQUEST) => {
                // The same request may have got there first: sent just before bmo
                // was restarted, or by a reconcile that read an older node. A node
                // already where the request leads, or on its way there, is progress;
                // taking the refusal as a failure would undo the work (deprovision
                // a fresh deployment, clean an available node).
                match self.client.get_node(&node.uuid).await {
                    Ok(Some(fresh)) if already_there(request.target, &fresh) => {
                        tracing::info!(host = %host.id, node = %node.uuid, state = fresh.provision_state(), "{what}: already done or under way");
                        self.changed(value)
                    }
                    _ => self.refused_or_err(host, e, value, &format!("Ironic refused to {what}")),
                }
            }
            Err(e) => self.refused_or_err(host, e, value, &format!("Ironic refused to {what}")),
        }
    }

    /// Turns a failed request into an outcome: a refused one (400) fails with
    /// `refused` and Ironic's reason, a busy node (409) waits, the rest are errors.
    pub(super) fn refused_or_err<T>(
        &self,
        host: &Host,
        e: IronicError,
        value: T,
        refused: &str,
    ) -> ProvisionerResult<T> {
        if e.status() == Some(StatusCode::BAD_REQUEST) {
            return Ok(Outcome::failed(
                value,
                format!("{refused}: {}", sentence(&e.to_string())),
            ));
        }
        self.busy_or_err(host, e, value)
    }

    pub(super) fn unexpected<T>(node: &Node, value: T, what: &str) -> ProvisionerResult<T> {
        Ok(Outcome::failed(
            value,
            format!(
                "cannot {what} while Ironic has the node in state '{}'",
                node.provision_state()
            ),
        ))
    }

    pub(super) async fn sync_automated_clean(
        &self,
        host: &Host,
        node: &Node,
    ) -> Result<(), IronicError> {
        // `full` cleans metadata like `metadata` does; its wipe at deprovisioning
        // turns automated cleaning off until the wipe is over (see `deprovision`).
        if super::deprovision::wipe_noted(node) {
            return Ok(());
        }
        let wanted = host.cleaning_mode != AutomatedCleaningMode::Disabled;
        if node.automated_clean != Some(wanted) {
            self.patch(host, node, &[PatchOp::set("/automated_clean", wanted)])
                .await?;
        }
        Ok(())
    }

    pub(super) fn power_of(node: &Node) -> PowerState {
        match node.power_state.as_deref() {
            Some("power on") => PowerState::On,
            Some("power off") => PowerState::Off,
            _ => PowerState::Unknown,
        }
    }
}

/// Whether `node` is where a request for `target` leads, or on its way there.
fn already_there(target: ProvisionTarget, node: &Node) -> bool {
    use ProvisionState as S;
    let state = node.state();
    let heading = |to: &str| node.target_provision_state.as_deref() == Some(to);
    match target {
        ProvisionTarget::Manage => {
            matches!(state, S::Manageable | S::Verifying) || heading("manageable")
        }
        ProvisionTarget::Provide => state == S::Available || heading("available"),
        ProvisionTarget::Inspect => matches!(state, S::Inspecting | S::InspectWait),
        ProvisionTarget::Active => {
            matches!(state, S::Active | S::Deploying | S::WaitCallBack) || heading("active")
        }
        ProvisionTarget::Deleted => {
            matches!(state, S::Deleting | S::Available) || heading("available")
        }
        ProvisionTarget::Clean => {
            matches!(state, S::Cleaning | S::CleanWait) && heading("manageable")
        }
        ProvisionTarget::Adopt => matches!(state, S::Adopting | S::Active),
        ProvisionTarget::Service => matches!(state, S::Servicing | S::ServiceWait),
        ProvisionTarget::Rebuild | ProvisionTarget::Abort => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(state: &str, target: Option<&str>) -> Node {
        serde_json::from_value(serde_json::json!({
            "uuid": "u", "driver": "fake-hardware",
            "provision_state": state, "target_provision_state": target,
        }))
        .expect("node")
    }

    #[test]
    fn a_refused_request_whose_end_state_is_reached_or_under_way_counts_as_progress() {
        use ProvisionTarget as T;
        for (target, state, heading, expected) in [
            (T::Active, "active", None, true),
            (T::Active, "deploying", Some("active"), true),
            (T::Active, "wait call-back", Some("active"), true),
            (T::Active, "available", None, false),
            (T::Active, "deploy failed", None, false),
            (T::Provide, "available", None, true),
            (T::Provide, "cleaning", Some("available"), true),
            (T::Provide, "clean failed", None, false),
            (T::Manage, "verifying", Some("manageable"), true),
            (T::Manage, "enroll", None, false),
            (T::Inspect, "inspect wait", Some("manageable"), true),
            (T::Inspect, "manageable", None, false),
            (T::Deleted, "cleaning", Some("available"), true),
            (T::Deleted, "active", None, false),
            (T::Clean, "clean wait", Some("manageable"), true),
            (T::Clean, "cleaning", Some("available"), false),
            (T::Adopt, "active", None, true),
            (T::Abort, "inspect wait", None, false),
        ] {
            assert_eq!(
                already_there(target, &node(state, heading)),
                expected,
                "{target:?} in {state} heading {heading:?}"
            );
        }
    }
}
