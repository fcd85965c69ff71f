//! Registration: the node, its boot port and BMC access, kept up to date.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Map, Value, json};

use super::{BMC_CHECK_ERROR, IronicProvisioner, capabilities, last_error, node_list, sentence};
use crate::bmc::BmcType;
use crate::ironic::{Node, NodeCreate, PatchOp, ProvisionState, ProvisionTarget};
use crate::provisioner::configdrive;
use crate::provisioner::types::{
    AutomatedCleaningMode, Host, HostId, InspectionMode, Outcome, Registration,
};
use crate::provisioner::{ProvisionerError, ProvisionerResult};

/// `driver_info` keys a deploy sets, not BMC access: kept when bmo brings the BMC
/// access up to date. Upstream's operator sets `force_persistent_boot_device` on
/// live-ISO and direct deploys; a node it deployed keeps it under bmo.
const DEPLOY_TIME_DRIVER_INFO: [&str; 1] = ["force_persistent_boot_device"];

/// Why `node`, found for `host`, cannot be its node: it was found by the boot MAC
/// under another host's name. The node the host recorded (status.provisioning.ID) is
/// its own under any name unless another existing host holds it (`owner`): a host
/// moved to another namespace brings the ID along in its status and the node is
/// renamed.
fn name_conflict(host: &Host, node: &Node, owner: Option<HostId>) -> Option<String> {
    let mac = host.boot_mac.as_deref().unwrap_or_default();
    if let Some(owner) = owner {
        return Some(format!(
            "Ironic node {} ({}) belongs to host {owner}; it cannot also be host {} (check status.provisioning.ID and bootMACAddress {mac})",
            node.name.as_deref().unwrap_or_default(),
            node.uuid,
            host.id
        ));
    }
    let recorded = host.provisioning_id.as_deref() == Some(node.uuid.as_str());
    let other = node
        .name
        .as_deref()
        .filter(|n| !recorded && *n != host.id.node_name() && *n != host.id.name)?;
    Some(format!(
        "bootMACAddress {mac} belongs to Ironic node {other} ({}); it cannot also be host {}",
        node.uuid, host.id
    ))
}

/// Whether Ironic is working on `node`, and takes no changes to its record.
fn is_transient(node: &Node) -> bool {
    matches!(
        node.state(),
        ProvisionState::Verifying
            | ProvisionState::Deploying
            | ProvisionState::Cleaning
            | ProvisionState::CleanWait
            | ProvisionState::Inspecting
            | ProvisionState::InspectWait
            | ProvisionState::WaitCallBack
            | ProvisionState::Deleting
            | ProvisionState::Adopting
            | ProvisionState::Servicing
            | ProvisionState::ServiceWait
    )
}

/// Whether the node rests before a deployment, when its boot port is looked at.
fn rests_before_deployment(node: &Node) -> bool {
    matches!(
        node.state(),
        ProvisionState::Enroll
            | ProvisionState::Verifying
            | ProvisionState::Manageable
            | ProvisionState::Available
    )
}

/// What registration found and did to the node's record.
#[derive(Debug, Clone, Copy)]
struct RecordState {
    /// Ironic works on the node and takes no changes to its record.
    transient: bool,
    /// bmo patched the record in this registration.
    updated: bool,
    /// The BMC access in the record changed.
    access_changed: bool,
}

impl IronicProvisioner {
    pub(super) async fn register_node(&self, host: &Host) -> ProvisionerResult<Registration> {
        let node = match self.find_node(host, true).await {
            Ok(Some(node)) => node,
            Ok(None) => return self.create_node(host).await,
            Err(e) => return self.busy_or_err(host, e, Registration::default()),
        };
        // Another host's node is not recorded as this host's, not even with the error:
        // a recorded ID would make it this host's on the next look.
        if let Some(conflict) = name_conflict(host, &node, self.other_owner(host, &node)) {
            return Ok(Outcome::failed(Registration::default(), conflict));
        }
        let mut registration = Registration {
            provisioning_id: Some(node.uuid.clone()),
            ..Registration::default()
        };
        let transient = is_transient(&node);
        // Ironic takes no new BMC access while it works on the node; a Secret changed
        // meanwhile is sent once the node rests.
        registration.credentials_pending = host.credentials_changed && transient;
        let (ops, access_changed) = match Self::record_updates(host, &node, transient) {
            Ok(updates) => updates,
            Err(message) => return Ok(Outcome::failed(registration, message)),
        };
        let updated = !ops.is_empty() && !transient;
        let node = if updated {
            match self.patch(host, &node, &ops).await {
                Ok(node) => {
                    tracing::info!(host = %host.id, node = %node.uuid, "updated BMC access in Ironic");
                    node
                }
                Err(e) => {
                    return self.refused_or_err(
                        host,
                        e,
                        registration,
                        "Ironic refused the new BMC settings",
                    );
                }
            }
        } else {
            node
        };
        Self::describe_node(&mut registration, &node);
        // The boot MAC's port is made while the node is enrolled (a vanished node is
        // re-created in `enroll`) and looked at again while it rests before a
        // deployment (a port deleted behind bmo's back is made again); a port seen
        // lately is not looked up again (a third of bmo's Ironic requests otherwise).
        if rests_before_deployment(&node)
            && let Some(failed) = self.ensure_boot_port(host, &node, false).await?
        {
            return Ok(failed.map(|()| registration));
        }
        let record = RecordState {
            transient,
            updated,
            access_changed,
        };
        self.settle(host, &node, registration, record).await
    }

    /// Registration's last step, from the node's state and what happened to its
    /// record: BMC access checked or waited for, or the host registered.
    async fn settle(
        &self,
        host: &Host,
        node: &Node,
        mut registration: Registration,
        record: RecordState,
    ) -> ProvisionerResult<Registration> {
        let RecordState {
            transient,
            updated,
            access_changed,
        } = record;
        match node.state() {
            ProvisionState::Enroll => {
                self.manage_enrolled(host, node, registration, access_changed)
                    .await
            }
            ProvisionState::Verifying => self.wait(node, registration),
            _ if !transient && (access_changed || host.restart_on_failure) => {
                self.check_bmc_access(host, node, registration).await
            }
            _ if node.extra.get(BMC_CHECK_ERROR).is_some() => {
                let reason = node.extra[BMC_CHECK_ERROR]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                Ok(Outcome::failed(registration, reason))
            }
            _ => {
                registration.credentials_valid = true;
                if !transient && let Err(e) = self.sync_automated_clean(host, node).await {
                    return self.busy_or_err(host, e, registration);
                }
                Ok(Outcome {
                    changed: updated,
                    requeue_after: None,
                    error: None,
                    value: registration,
                })
            }
        }
    }

    /// What the found `node` tells of the host: power, whether it is deployed, and
    /// the node's state digest.
    fn describe_node(registration: &mut Registration, node: &Node) {
        registration.power = Self::power_of(node);
        // Servicing keeps the instance; a failed service step puts the node in
        // maintenance, which is servicing's to undo, not adoption's.
        registration.deployed = match node.state() {
            ProvisionState::Active => !node.maintenance,
            ProvisionState::Servicing
            | ProvisionState::ServiceWait
            | ProvisionState::ServiceFailed => true,
            _ => false,
        };
        registration.node_state = Some(node_list::state_digest(node));
    }

    /// An enrolled node: asks Ironic to check BMC access (`manage`), unless the last
    /// check failed and nothing changed since.
    async fn manage_enrolled(
        &self,
        host: &Host,
        node: &Node,
        registration: Registration,
        access_changed: bool,
    ) -> ProvisionerResult<Registration> {
        if node.target_provision_state.is_some() {
            return self.wait(node, registration);
        }
        if node.last_error.is_some() && !(access_changed || host.restart_on_failure) {
            let reason = last_error(node);
            let lower = reason.to_lowercase();
            let hint =
                if reason.contains("401") || reason.contains("403") || lower.contains("password") {
                    "Check the username and password in the secret named by credentialsName."
                } else {
                    "Check the BMC address and that Ironic can reach the BMC."
                };
            return Ok(Outcome::failed(
                registration,
                format!("Ironic cannot manage the host through its BMC: {reason} {hint}"),
            ));
        }
        self.transition_to(
            host,
            node,
            ProvisionTarget::Manage,
            registration,
            "check BMC access (manage)",
        )
        .await
    }

    /// Past enrollment Ironic does not check new BMC settings itself: asks the BMC
    /// for the boot device, and remembers a failure on the node.
    async fn check_bmc_access(
        &self,
        host: &Host,
        node: &Node,
        mut registration: Registration,
    ) -> ProvisionerResult<Registration> {
        let check = self.client.get_boot_device(&node.uuid).await;
        let (op, result) = match check {
            Ok(_) => (
                node.extra
                    .contains_key(BMC_CHECK_ERROR)
                    .then(|| PatchOp::remove(format!("/extra/{BMC_CHECK_ERROR}"))),
                None,
            ),
            Err(e) if e.status() == Some(StatusCode::CONFLICT) => {
                return self.busy_or_err(host, e, registration);
            }
            Err(e) => {
                let reason = format!(
                    "Ironic cannot reach the BMC with the new settings: {} Check the BMC address and the username and password in the secret named by credentialsName.",
                    sentence(&e.to_string())
                );
                (
                    Some(PatchOp::set(
                        format!("/extra/{BMC_CHECK_ERROR}"),
                        reason.clone(),
                    )),
                    Some(reason),
                )
            }
        };
        if let Some(op) = op
            && let Err(e) = self.patch(host, node, &[op]).await
        {
            return self.busy_or_err(host, e, registration);
        }
        match result {
            Some(reason) => Ok(Outcome::failed(registration, reason)),
            None => {
                registration.credentials_valid = true;
                self.changed(registration)
            }
        }
    }

    /// The changes that bring `node`'s record up to date for `host` (name, driver,
    /// BMC access, network data, inspect interface; BMC access and network data not
    /// while Ironic works on the node), and whether BMC access changed; `Err` names
    /// what is wrong with the host's spec.
    fn record_updates(
        host: &Host,
        node: &Node,
        transient: bool,
    ) -> Result<(Vec<PatchOp>, bool), String> {
        let mut ops = Vec::new();
        let node_name = host.id.node_name();
        if node.name.as_deref() != Some(node_name.as_str()) {
            ops.push(PatchOp::set("/name", node_name));
        }
        let wanted_info = Self::driver_info(host);
        let driver = host.bmc.kind.driver();
        let access_changed = host.credentials_changed
            || node.driver != driver
            || Self::driver_info_differs(node, &wanted_info);
        if access_changed && !transient {
            if node.driver != driver {
                ops.push(PatchOp::set("/driver", driver));
                for (name, value) in host.bmc.kind.interfaces().chosen() {
                    ops.push(PatchOp::set(format!("/{name}_interface"), value));
                }
            }
            let mut info = wanted_info;
            for key in DEPLOY_TIME_DRIVER_INFO {
                if let Some(value) = node.driver_info.get(key) {
                    info.entry(key).or_insert_with(|| value.clone());
                }
            }
            ops.push(PatchOp::set("/driver_info", Value::Object(info)));
        }
        let network_data = Self::preprovisioning_network_data(host)?;
        if !transient && network_data.is_some() && node.network_data != network_data {
            ops.push(PatchOp::set(
                "/network_data",
                network_data.unwrap_or_default(),
            ));
        }
        if let Some(op) = Self::resting_inspect_interface(host, node) {
            ops.push(op);
        }
        Ok((ops, access_changed))
    }

    /// The inspect interface `node` should have for `host`: what bmo gives a new node,
    /// except that a fake-hardware node someone switched to agent inspection (to feed
    /// it a real inventory through continue_inspection) keeps that interface.
    pub(super) fn wanted_inspect_interface(
        host: &Host,
        node: &Node,
    ) -> Result<&'static str, String> {
        let keep_agent = host.bmc.kind == BmcType::Fake
            && host.inspection_mode == InspectionMode::Agent
            && node.inspect_interface.as_deref() == Some("agent");
        match Self::inspect_interface(host) {
            Ok(_) if keep_agent => Ok("agent"),
            other => other,
        }
    }

    /// A node whose inspect interface cannot inspect as the host asks (inspection
    /// switched on again on a node enrolled with `no-inspect`, or another mode) is
    /// brought to bmo's inspect interface, but only while it rests in enroll,
    /// manageable or available, out of maintenance: never while Ironic works on it or
    /// it is deployed. A host that asks for no inspection leaves the interface alone:
    /// bmo never inspects it, and a node another operator enrolled (upstream leaves
    /// `agent` there) keeps what it has.
    fn resting_inspect_interface(host: &Host, node: &Node) -> Option<PatchOp> {
        let resting = matches!(
            node.state(),
            ProvisionState::Enroll | ProvisionState::Manageable | ProvisionState::Available
        ) && node.target_provision_state.is_none()
            && !node.maintenance;
        let wanted = Self::wanted_inspect_interface(host, node).ok()?;
        if host.inspection_mode == InspectionMode::Disabled {
            return None;
        }
        (resting && node.inspect_interface.as_deref() != Some(wanted))
            .then(|| PatchOp::set("/inspect_interface", wanted))
    }

    pub(super) fn inspect_interface(host: &Host) -> Result<&'static str, String> {
        let kind = host.bmc.kind;
        match host.inspection_mode {
            InspectionMode::Disabled => Ok("no-inspect"),
            InspectionMode::Agent if kind == BmcType::Fake => Ok("fake"),
            InspectionMode::Agent => Ok("agent"),
            InspectionMode::Fast => kind.fast_inspect_interface().ok_or_else(|| {
                format!(
                    "BMC type {kind} cannot inspect out of band; set inspectionMode to agent or disabled"
                )
            }),
        }
    }

    /// `driver_info`: BMC access plus the deploy ramdisk.
    pub(super) fn driver_info(host: &Host) -> Map<String, Value> {
        let mut info = host
            .bmc
            .driver_info(&host.credentials, host.disable_certificate_verification);
        let ramdisk = &host.deploy_ramdisk;
        if host.bmc.kind.supports_iso_boot()
            && let Some(iso) = &ramdisk.iso_url
        {
            info.insert("deploy_iso".into(), json!(iso));
        } else {
            if let Some(k) = &ramdisk.kernel_url {
                info.insert("deploy_kernel".into(), json!(k));
            }
            if let Some(r) = &ramdisk.ramdisk_url {
                info.insert("deploy_ramdisk".into(), json!(r));
            }
        }
        if let Some(extra) = &ramdisk.extra_kernel_params {
            info.insert(
                "kernel_append_params".into(),
                json!(format!("%default% {extra}")),
            );
        }
        info
    }

    pub(super) fn preprovisioning_network_data(host: &Host) -> Result<Option<Value>, String> {
        host.preprovisioning_network_data
            .as_deref()
            .map(|bytes| {
                configdrive::parse_document("preprovisioningNetworkData", bytes)
                    .map_err(|e| e.to_string())
            })
            .transpose()
    }

    /// Whether the node's `driver_info` differs from what the host wants (passwords
    /// are masked by Ironic and compared only through `credentials_changed`; what a
    /// deploy set, [`DEPLOY_TIME_DRIVER_INFO`], is not BMC access).
    pub(super) fn driver_info_differs(node: &Node, wanted: &Map<String, Value>) -> bool {
        let visible = |m: &Map<String, Value>| -> Map<String, Value> {
            m.iter()
                .filter(|(k, _)| {
                    !k.ends_with("_password") && !DEPLOY_TIME_DRIVER_INFO.contains(&k.as_str())
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        visible(&node.driver_info) != visible(wanted)
    }

    pub(super) async fn create_node(&self, host: &Host) -> ProvisionerResult<Registration> {
        let kind = host.bmc.kind;
        if kind.needs_boot_mac() && host.boot_mac.is_none() {
            return Ok(Outcome::failed(
                Registration::default(),
                format!(
                    "BMC type {kind} needs bootMACAddress; set it to the MAC of the NIC the host boots from"
                ),
            ));
        }
        if host.inspection_mode == InspectionMode::Disabled && host.boot_mac.is_none() {
            return Ok(Outcome::failed(
                Registration::default(),
                "bootMACAddress is required when inspection is disabled, because bmo cannot discover the boot NIC",
            ));
        }
        let inspect = match Self::inspect_interface(host) {
            Ok(i) => i,
            Err(message) => return Ok(Outcome::failed(Registration::default(), message)),
        };
        let network_data = match Self::preprovisioning_network_data(host) {
            Ok(n) => n,
            Err(message) => return Ok(Outcome::failed(Registration::default(), message)),
        };
        let settings = host
            .bmc
            .driver_settings(host.disable_certificate_verification);
        let i = settings.interfaces;
        let mut properties = Map::new();
        properties.insert("capabilities".into(), json!(capabilities(host.boot_mode)));
        if let Some(arch) = &host.architecture {
            properties.insert("cpu_arch".into(), json!(arch));
        }
        let create = NodeCreate {
            name: host.id.node_name(),
            driver: settings.driver.into(),
            driver_info: Self::driver_info(host),
            properties,
            boot_interface: i.boot.map(Into::into),
            deploy_interface: (kind == BmcType::Fake).then(|| "fake".into()),
            inspect_interface: Some(inspect.into()),
            management_interface: i.management.map(Into::into),
            power_interface: i.power.map(Into::into),
            raid_interface: i.raid.map(Into::into),
            vendor_interface: i.vendor.map(Into::into),
            bios_interface: i.bios.map(Into::into),
            firmware_interface: i.firmware.map(Into::into),
            automated_clean: Some(host.cleaning_mode != AutomatedCleaningMode::Disabled),
            disable_power_off: host.disable_power_off.then_some(true),
            network_data,
        };
        let node = match self.client.create_node(&create).await {
            Ok(node) => node,
            Err(e) => {
                return self.refused_or_err(
                    host,
                    e,
                    Registration::default(),
                    "Ironic refused to register the host",
                );
            }
        };
        tracing::info!(host = %host.id, node = %node.uuid, driver = settings.driver, "registered with Ironic");
        let registration = Registration {
            provisioning_id: Some(node.uuid.clone()),
            power: Self::power_of(&node),
            ..Registration::default()
        };
        if let Some(failed) = self.ensure_boot_port(host, &node, true).await? {
            return Ok(failed.map(|()| registration));
        }
        // A new node is in `enroll` as soon as Ironic answers: nothing to wait for
        // before the BMC check.
        Ok(Outcome::changed(registration, Duration::ZERO))
    }

    /// Creates the boot MAC's port if the node lacks it; `Some(failure)` if the MAC
    /// belongs to another node. `new_node`: the node was just created, after
    /// `find_node` found no port with the MAC, so the port is created without
    /// looking it up again.
    pub(super) async fn ensure_boot_port(
        &self,
        host: &Host,
        node: &Node,
        new_node: bool,
    ) -> Result<Option<Outcome<()>>, ProvisionerError> {
        let Some(mac) = &host.boot_mac else {
            return Ok(None);
        };
        let known = (node.uuid.clone(), mac.to_ascii_lowercase());
        if self.has_boot_port(&known) {
            return Ok(None);
        }
        if new_node {
            match self.client.create_port(&node.uuid, mac).await {
                Ok(_) => {
                    self.record_boot_port(known);
                    return Ok(None);
                }
                // Made meanwhile by another client: the look-up names its node.
                Err(e) if e.status() == Some(StatusCode::CONFLICT) => {}
                Err(e) => return self.busy_or_err(host, e, ()).map(Some),
            }
        }
        let existing = self
            .client
            .find_port_by_mac(mac)
            .await
            .map_err(|e| Self::ironic_err(host, e))?;
        match existing {
            Some(port) if port.node_uuid == node.uuid => {
                self.record_boot_port(known);
                Ok(None)
            }
            Some(port) => Ok(Some(Outcome::failed(
                (),
                format!(
                    "bootMACAddress {mac} already belongs to Ironic node {}; remove that node or fix the MAC",
                    port.node_uuid
                ),
            ))),
            None => match self.client.create_port(&node.uuid, mac).await {
                Ok(_) => {
                    self.record_boot_port(known);
                    Ok(None)
                }
                Err(e) => self.busy_or_err(host, e, ()).map(Some),
            },
        }
    }
}
