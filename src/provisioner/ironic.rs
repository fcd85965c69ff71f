//! The Ironic implementation of [`Provisioner`]: each call reads the node, does at most
//! the next step for its provision state, and says when to look again.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Map, Value, json};

use super::configdrive::{self, DeploySettings};
use super::types::{
    BootMode, CleaningMode, Host, InspectStatus, InspectionMode, Outcome, PowerMode, PowerState,
    PrepareRequest, PrepareStatus, Progress, ProvisionRequest, Registration,
    SOFT_POWER_OFF_TIMEOUT,
};
use super::{HardwareDetails, Provisioner, ProvisionerError, ProvisionerResult};
use crate::bmc::BmcType;
use crate::ironic::{
    IronicClient, IronicError, Node, NodeCreate, PatchOp, PowerTarget, ProvisionRequest as Req,
    ProvisionTarget,
};

/// Timing of the Ironic provisioner.
#[derive(Debug, Clone)]
pub struct ProvisionerSettings {
    /// Look again after quick transitions (manage, provide, power, a locked node).
    pub short_delay: Duration,
    /// Look again during long ones (inspection, cleaning, deploying).
    pub long_delay: Duration,
}

impl Default for ProvisionerSettings {
    fn default() -> Self {
        Self {
            short_delay: Duration::from_secs(3),
            long_delay: Duration::from_secs(10),
        }
    }
}

/// [`Provisioner`] backed by an Ironic API.
#[derive(Debug, Clone)]
pub struct IronicProvisioner {
    client: IronicClient,
    settings: ProvisionerSettings,
}

const MAINTENANCE_REASON: &str = "forcing deletion in bmo";
/// Key in a node's `extra` holding why new BMC settings failed their check on a node
/// past enrollment (Ironic re-verifies BMC access only in `enroll`), so the reason is
/// reported on every call until the settings change again.
const BMC_CHECK_ERROR: &str = "bmo_bmc_check_error";

/// Ironic's `last_error` as one sentence: first line, whitespace collapsed, bounded.
fn sentence(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no reason given");
    // Drop what only repeats itself or dumps raw structures.
    let line = line.split(" Extended information:").next().unwrap_or(line);
    let line = line.replace("Redfish exception occurred. Error: ", "");
    let mut out: String = line.split_whitespace().collect::<Vec<_>>().join(" ");
    if out.chars().count() > 400 {
        out = out.chars().take(400).collect::<String>() + "…";
    }
    if !out.ends_with(['.', '!', '?', '…']) {
        out.push('.');
    }
    out
}

fn last_error(node: &Node) -> String {
    sentence(node.last_error.as_deref().unwrap_or_default())
}

fn step_name(step: &Option<Value>) -> Option<String> {
    let step = step.as_ref()?;
    let name = step.get("step")?.as_str()?;
    match step.get("interface").and_then(Value::as_str) {
        Some(iface) => Some(format!("{iface}.{name}")),
        None => Some(name.to_owned()),
    }
}

fn capabilities(mode: BootMode) -> &'static str {
    match mode {
        BootMode::Uefi => "boot_mode:uefi",
        BootMode::UefiSecureBoot => "boot_mode:uefi,secure_boot:true",
        BootMode::Legacy => "boot_mode:bios",
    }
}

impl IronicProvisioner {
    pub fn new(client: IronicClient, settings: ProvisionerSettings) -> Self {
        Self { client, settings }
    }

    pub fn client(&self) -> &IronicClient {
        &self.client
    }

    fn ironic_err(host: &Host, source: IronicError) -> ProvisionerError {
        ProvisionerError::Ironic {
            host: host.id.to_string(),
            source,
        }
    }

    /// A call that failed because the node stayed locked through all retries is a
    /// "look again soon", not a failure.
    fn busy_or_err<T>(&self, host: &Host, e: IronicError, value: T) -> ProvisionerResult<T> {
        if e.status() == Some(StatusCode::CONFLICT) {
            tracing::info!(host = %host.id, "Ironic node is busy: {e}");
            return Ok(Outcome::wait(value, self.settings.short_delay));
        }
        Err(Self::ironic_err(host, e))
    }

    fn wait<T>(&self, value: T) -> ProvisionerResult<T> {
        Ok(Outcome::wait(value, self.settings.short_delay))
    }

    fn wait_long<T>(&self, value: T) -> ProvisionerResult<T> {
        Ok(Outcome::wait(value, self.settings.long_delay))
    }

    fn changed<T>(&self, value: T) -> ProvisionerResult<T> {
        Ok(Outcome::changed(value, self.settings.short_delay))
    }

    /// The node by recorded UUID, then by `namespace~name`, then (for registration)
    /// by the boot MAC's port.
    async fn find_node(&self, host: &Host, by_mac: bool) -> Result<Option<Node>, IronicError> {
        if let Some(id) = host.provisioning_id.as_deref().filter(|id| !id.is_empty())
            && let Some(node) = self.client.get_node(id).await?
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
            return self.client.get_node(&port.node_uuid).await;
        }
        Ok(None)
    }

    async fn require_node(&self, host: &Host) -> Result<Node, ProvisionerError> {
        match self.find_node(host, false).await {
            Ok(Some(node)) => Ok(node),
            Ok(None) => Err(ProvisionerError::NeedsRegistration {
                host: host.id.to_string(),
            }),
            Err(e) => Err(Self::ironic_err(host, e)),
        }
    }

    fn inspect_interface(host: &Host) -> Result<&'static str, String> {
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
    fn driver_info(host: &Host) -> Map<String, Value> {
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

    fn preprovisioning_network_data(host: &Host) -> Result<Option<Value>, String> {
        host.preprovisioning_network_data
            .as_deref()
            .map(|bytes| {
                configdrive::parse_document("preprovisioningNetworkData", bytes)
                    .map_err(|e| e.to_string())
            })
            .transpose()
    }

    /// Whether the node's `driver_info` differs from what the host wants (passwords
    /// are masked by Ironic and compared only through `credentials_changed`).
    fn driver_info_differs(node: &Node, wanted: &Map<String, Value>) -> bool {
        let visible = |m: &Map<String, Value>| -> Map<String, Value> {
            m.iter()
                .filter(|(k, _)| !k.ends_with("_password"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        visible(&node.driver_info) != visible(wanted)
    }

    async fn create_node(&self, host: &Host) -> ProvisionerResult<Registration> {
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
            automated_clean: Some(host.cleaning_mode == CleaningMode::Metadata),
            disable_power_off: host.disable_power_off.then_some(true),
            network_data,
        };
        let node = match self.client.create_node(&create).await {
            Ok(node) => node,
            Err(e) if e.status() == Some(StatusCode::BAD_REQUEST) => {
                return Ok(Outcome::failed(
                    Registration::default(),
                    format!(
                        "Ironic refused to register the host: {}",
                        sentence(&e.to_string())
                    ),
                ));
            }
            Err(e) => return self.busy_or_err(host, e, Registration::default()),
        };
        tracing::info!(host = %host.id, node = %node.uuid, driver = settings.driver, "registered with Ironic");
        let registration = Registration {
            provisioning_id: Some(node.uuid.clone()),
            power: Self::power_of(&node),
            ..Registration::default()
        };
        if let Some(failed) = self.ensure_boot_port(host, &node).await? {
            return Ok(failed.map(|()| registration));
        }
        self.changed(registration)
    }

    /// Creates the boot MAC's port if the node lacks it; `Some(failure)` if the MAC
    /// belongs to another node.
    async fn ensure_boot_port(
        &self,
        host: &Host,
        node: &Node,
    ) -> Result<Option<Outcome<()>>, ProvisionerError> {
        let Some(mac) = &host.boot_mac else {
            return Ok(None);
        };
        let existing = self
            .client
            .find_port_by_mac(mac)
            .await
            .map_err(|e| Self::ironic_err(host, e))?;
        match existing {
            Some(port) if port.node_uuid == node.uuid => Ok(None),
            Some(port) => Ok(Some(Outcome::failed(
                (),
                format!(
                    "bootMACAddress {mac} already belongs to Ironic node {}; remove that node or fix the MAC",
                    port.node_uuid
                ),
            ))),
            None => match self.client.create_port(&node.uuid, mac).await {
                Ok(_) => Ok(None),
                Err(e) => self.busy_or_err(host, e, ()).map(Some),
            },
        }
    }

    async fn patch(&self, host: &Host, node: &Node, ops: &[PatchOp]) -> Result<Node, IronicError> {
        tracing::debug!(host = %host.id, paths = ?ops.iter().map(|o| o.path.as_str()).collect::<Vec<_>>(), "updating Ironic node");
        self.client.patch_node(&node.uuid, ops).await
    }

    async fn set_state(&self, node: &Node, request: &Req) -> Result<(), IronicError> {
        self.client
            .change_provision_state(&node.uuid, request)
            .await
    }

    /// Runs a provision-state change and turns its failure into an outcome.
    async fn transition<T>(
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
            Err(e) if e.status() == Some(StatusCode::BAD_REQUEST) => Ok(Outcome::failed(
                value,
                format!("Ironic refused to {what}: {}", sentence(&e.to_string())),
            )),
            Err(e) => self.busy_or_err(host, e, value),
        }
    }

    fn unexpected<T>(node: &Node, value: T, what: &str) -> ProvisionerResult<T> {
        Ok(Outcome::failed(
            value,
            format!(
                "cannot {what} while Ironic has the node in state '{}'",
                node.provision_state()
            ),
        ))
    }

    /// Sets the RAID target (and the agent RAID interface for software RAID) and
    /// returns the clean steps to run.
    async fn clean_steps(
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
        self.transition(
            host,
            node,
            req,
            Progress {
                started: true,
                current_step: None,
            },
            "start provisioning",
        )
        .await
    }

    async fn sync_automated_clean(&self, host: &Host, node: &Node) -> Result<(), IronicError> {
        let wanted = host.cleaning_mode == CleaningMode::Metadata;
        if node.automated_clean != Some(wanted) {
            self.patch(host, node, &[PatchOp::set("/automated_clean", wanted)])
                .await?;
        }
        Ok(())
    }

    fn power_of(node: &Node) -> PowerState {
        match node.power_state.as_deref() {
            Some("power on") => PowerState::On,
            Some("power off") => PowerState::Off,
            _ => PowerState::Unknown,
        }
    }

    async fn power(
        &self,
        node: &Node,
        target: PowerTarget,
        timeout: Option<u32>,
    ) -> Result<(), IronicError> {
        self.client
            .set_power_state(&node.uuid, target, timeout)
            .await
    }

    async fn remove_node(&self, host: &Host) -> ProvisionerResult<()> {
        let node = match self.find_node(host, false).await {
            Ok(Some(node)) => node,
            Ok(None) => return Ok(Outcome::done(())),
            Err(e) => return Err(Self::ironic_err(host, e)),
        };
        let state = node.provision_state();
        match state {
            // The conductor is working on these; deletion would be refused.
            "verifying" | "deploying" | "cleaning" | "inspecting" | "deleting" | "adopting"
            | "servicing" | "rescuing" | "unrescuing" => return self.wait_long(()),
            "inspect wait" | "clean wait" => {
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
        let allowed_without_maintenance = matches!(state, "enroll" | "manageable" | "adopt failed");
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
                tracing::info!(host = %host.id, node = %node.uuid, state, "deleted from Ironic");
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

impl Provisioner for IronicProvisioner {
    async fn register(&self, host: &Host) -> ProvisionerResult<Registration> {
        let node = match self.find_node(host, true).await {
            Ok(Some(node)) => node,
            Ok(None) => return self.create_node(host).await,
            Err(e) => return self.busy_or_err(host, e, Registration::default()),
        };
        let mut registration = Registration {
            provisioning_id: Some(node.uuid.clone()),
            ..Registration::default()
        };
        let node_name = host.id.node_name();
        if let Some(other) = node
            .name
            .as_deref()
            .filter(|n| *n != node_name && *n != host.id.name)
        {
            return Ok(Outcome::failed(
                registration,
                format!(
                    "bootMACAddress {} belongs to Ironic node {other} ({}); it cannot also be host {}",
                    host.boot_mac.as_deref().unwrap_or_default(),
                    node.uuid,
                    host.id
                ),
            ));
        }
        // Bring the record up to date: name, driver and BMC access.
        let mut ops = Vec::new();
        if node.name.as_deref() != Some(node_name.as_str()) {
            ops.push(PatchOp::set("/name", node_name.clone()));
        }
        let wanted_info = Self::driver_info(host);
        let driver = host.bmc.kind.driver();
        let access_changed = host.credentials_changed
            || node.driver != driver
            || Self::driver_info_differs(&node, &wanted_info);
        let transient = matches!(
            node.provision_state(),
            "verifying"
                | "deploying"
                | "cleaning"
                | "clean wait"
                | "inspecting"
                | "inspect wait"
                | "wait call-back"
                | "deleting"
                | "adopting"
        );
        if access_changed && !transient {
            if node.driver != driver {
                ops.push(PatchOp::set("/driver", driver));
                let i = host.bmc.kind.interfaces();
                for (name, value) in [
                    ("boot", i.boot),
                    ("management", i.management),
                    ("power", i.power),
                    ("raid", i.raid),
                    ("vendor", i.vendor),
                    ("bios", i.bios),
                    ("firmware", i.firmware),
                ] {
                    if let Some(value) = value {
                        ops.push(PatchOp::set(format!("/{name}_interface"), value));
                    }
                }
            }
            ops.push(PatchOp::set("/driver_info", Value::Object(wanted_info)));
        }
        match Self::preprovisioning_network_data(host) {
            Ok(wanted) if !transient && wanted.is_some() && node.network_data != wanted => {
                ops.push(PatchOp::set("/network_data", wanted.unwrap_or_default()));
            }
            Ok(_) => {}
            Err(message) => return Ok(Outcome::failed(registration, message)),
        }
        let updated = !ops.is_empty() && !transient;
        let node = if updated {
            match self.patch(host, &node, &ops).await {
                Ok(node) => {
                    tracing::info!(host = %host.id, node = %node.uuid, "updated BMC access in Ironic");
                    node
                }
                Err(e) if e.status() == Some(StatusCode::BAD_REQUEST) => {
                    return Ok(Outcome::failed(
                        registration,
                        format!(
                            "Ironic refused the new BMC settings: {}",
                            sentence(&e.to_string())
                        ),
                    ));
                }
                Err(e) => return self.busy_or_err(host, e, registration),
            }
        } else {
            node
        };
        registration.power = Self::power_of(&node);
        registration.deployed = node.provision_state() == "active" && !node.maintenance;
        // The boot MAC's port is made while the node is enrolled (a vanished node is
        // re-created in `enroll`); bootMACAddress cannot change afterwards, so later
        // reconciles skip the lookup (a third of bmo's Ironic requests otherwise).
        if matches!(
            node.provision_state(),
            "enroll" | "verifying" | "manageable"
        ) && let Some(failed) = self.ensure_boot_port(host, &node).await?
        {
            return Ok(failed.map(|()| registration));
        }
        match node.provision_state() {
            "enroll" => {
                if node.target_provision_state.is_some() {
                    return self.wait(registration);
                }
                if node.last_error.is_some() && !(access_changed || host.restart_on_failure) {
                    let reason = last_error(&node);
                    let lower = reason.to_lowercase();
                    let hint = if reason.contains("401")
                        || reason.contains("403")
                        || lower.contains("password")
                    {
                        "Check the username and password in the secret named by credentialsName."
                    } else {
                        "Check the BMC address and that Ironic can reach the BMC."
                    };
                    return Ok(Outcome::failed(
                        registration,
                        format!("Ironic cannot manage the host through its BMC: {reason} {hint}"),
                    ));
                }
                self.transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Manage),
                    registration,
                    "check BMC access (manage)",
                )
                .await
            }
            "verifying" => self.wait(registration),
            _ if !transient && (access_changed || host.restart_on_failure) => {
                // Past enrollment Ironic does not check new BMC settings itself: ask
                // the BMC for the boot device, and remember a failure on the node.
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
                    && let Err(e) = self.patch(host, &node, &[op]).await
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
            _ if node.extra.get(BMC_CHECK_ERROR).is_some() => {
                let reason = node.extra[BMC_CHECK_ERROR]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                Ok(Outcome::failed(registration, reason))
            }
            _ => {
                registration.credentials_valid = true;
                if !transient && let Err(e) = self.sync_automated_clean(host, &node).await {
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

    async fn inspect(&self, host: &Host, refresh: bool) -> ProvisionerResult<InspectStatus> {
        let node = self.require_node(host).await?;
        let start = || async {
            // A fake-hardware node someone switched to agent inspection (to feed it a
            // real inventory through continue_inspection) keeps that interface.
            let keep_agent = host.bmc.kind == BmcType::Fake
                && host.inspection_mode == InspectionMode::Agent
                && node.inspect_interface.as_deref() == Some("agent");
            let interface = match Self::inspect_interface(host) {
                Ok(_) if keep_agent => "agent",
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
            self.transition(
                host,
                &node,
                Req::new(ProvisionTarget::Inspect),
                InspectStatus::Started,
                "start inspection",
            )
            .await
        };
        match node.provision_state() {
            "available" => {
                self.transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Manage),
                    InspectStatus::InProgress,
                    "return the host to manageable for inspection",
                )
                .await
            }
            "inspecting" | "inspect wait" => self.wait_long(InspectStatus::InProgress),
            "inspect failed" => {
                let aborted = node
                    .last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("abort"));
                if host.restart_on_failure || aborted {
                    start().await
                } else {
                    Ok(Outcome::failed(
                        InspectStatus::InProgress,
                        format!("Inspection failed: {}", last_error(&node)),
                    ))
                }
            }
            "manageable" if refresh || node.inspection_finished_at.is_none() => start().await,
            "manageable" => {
                let doc = self
                    .client
                    .get_inventory(&node.uuid)
                    .await
                    .map_err(|e| Self::ironic_err(host, e))?;
                let details = match doc {
                    Some(doc) => HardwareDetails::from_ironic_inventory(&doc),
                    // Out-of-band and fake inspection leave no inventory, only properties.
                    None => HardwareDetails {
                        cpu: super::Cpu {
                            arch: node
                                .properties
                                .get("cpu_arch")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_owned(),
                            count: node
                                .properties
                                .get("cpus")
                                .and_then(Value::as_u64)
                                .unwrap_or_default() as u32,
                            ..Default::default()
                        },
                        ram_mebibytes: node
                            .properties
                            .get("memory_mb")
                            .and_then(Value::as_u64)
                            .unwrap_or_default(),
                        ..Default::default()
                    },
                };
                tracing::info!(host = %host.id, "inspection complete: {}", details.summary());
                Ok(Outcome::done(InspectStatus::Complete(Box::new(details))))
            }
            _ => Self::unexpected(&node, InspectStatus::InProgress, "inspect the host"),
        }
    }

    async fn prepare(
        &self,
        host: &Host,
        request: &PrepareRequest,
    ) -> ProvisionerResult<PrepareStatus> {
        let node = self.require_node(host).await?;
        let has_work = request.unprepared
            && (request.raid.is_some()
                || !request.bios_settings.is_empty()
                || request.full_disk_wipe);
        match node.provision_state() {
            "available" if has_work => {
                self.transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Manage),
                    PrepareStatus::default(),
                    "return the host to manageable for preparing",
                )
                .await
            }
            "available" | "manageable" if !has_work => Ok(Outcome::done(PrepareStatus::default())),
            "manageable" => {
                let steps = match self.clean_steps(host, &node, request).await {
                    Ok(steps) => steps,
                    Err(e) if e.status() == Some(StatusCode::BAD_REQUEST) => {
                        return Ok(Outcome::failed(
                            PrepareStatus::default(),
                            format!(
                                "Ironic refused the RAID configuration: {}",
                                sentence(&e.to_string())
                            ),
                        ));
                    }
                    Err(e) => return self.busy_or_err(host, e, PrepareStatus::default()),
                };
                let mut req = Req::new(ProvisionTarget::Clean);
                req.clean_steps = Some(steps);
                self.transition(
                    host,
                    &node,
                    req,
                    PrepareStatus {
                        started: true,
                        current_step: None,
                    },
                    "start manual cleaning",
                )
                .await
            }
            "cleaning" | "clean wait" => self.wait_long(PrepareStatus {
                started: false,
                current_step: step_name(&node.clean_step),
            }),
            "clean failed" if host.restart_on_failure => {
                if node.maintenance
                    && let Err(e) = self.client.clear_maintenance(&node.uuid).await
                {
                    return self.busy_or_err(host, e, PrepareStatus::default());
                }
                self.transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Manage),
                    PrepareStatus::default(),
                    "recover from failed cleaning",
                )
                .await
            }
            "clean failed" => Ok(Outcome::failed(
                PrepareStatus::default(),
                format!("Cleaning failed: {}", last_error(&node)),
            )),
            _ => Self::unexpected(&node, PrepareStatus::default(), "prepare the host"),
        }
    }

    async fn provision(
        &self,
        host: &Host,
        request: &ProvisionRequest,
    ) -> ProvisionerResult<Progress> {
        let node = self.require_node(host).await?;
        match node.provision_state() {
            "manageable" => {
                if let Err(e) = self.sync_automated_clean(host, &node).await {
                    return self.busy_or_err(host, e, Progress::default());
                }
                self.transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Provide),
                    Progress::default(),
                    "make the host available (provide)",
                )
                .await
            }
            "cleaning" | "clean wait" => self.wait_long(Progress {
                started: false,
                current_step: step_name(&node.clean_step),
            }),
            "clean failed" if host.restart_on_failure => {
                if node.maintenance
                    && let Err(e) = self.client.clear_maintenance(&node.uuid).await
                {
                    return self.busy_or_err(host, e, Progress::default());
                }
                self.transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Manage),
                    Progress::default(),
                    "recover from failed cleaning",
                )
                .await
            }
            "clean failed" => Ok(Outcome::failed(
                Progress::default(),
                format!("Cleaning before provisioning failed: {}", last_error(&node)),
            )),
            "available" => self.start_deploy(host, &node, request).await,
            "deploying" | "wait call-back" => self.wait_long(Progress {
                started: false,
                current_step: step_name(&node.deploy_step),
            }),
            "deploy failed" => {
                let same = configdrive::deploy_settings(&host.id, host.boot_mode, request)
                    .map(|s| Self::same_image(&node, &s))
                    .unwrap_or(false);
                if same && !host.restart_on_failure {
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
            "active" => Ok(Outcome::done(Progress::default())),
            _ => Self::unexpected(&node, Progress::default(), "provision the host"),
        }
    }

    async fn deprovision(&self, host: &Host) -> ProvisionerResult<Progress> {
        let node = self.require_node(host).await?;
        match node.provision_state() {
            "active" | "deploy failed" | "wait call-back" => {
                if let Err(e) = self.sync_automated_clean(host, &node).await {
                    return self.busy_or_err(host, e, Progress::default());
                }
                self.transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Deleted),
                    Progress {
                        started: true,
                        current_step: None,
                    },
                    "start deprovisioning",
                )
                .await
            }
            "deleting" | "cleaning" | "clean wait" | "deploying" => self.wait_long(Progress {
                started: false,
                current_step: step_name(&node.clean_step),
            }),
            "manageable" => {
                self.transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Provide),
                    Progress::default(),
                    "make the host available (provide)",
                )
                .await
            }
            "available" => Ok(Outcome::done(Progress::default())),
            "clean failed" if host.restart_on_failure => {
                if node.maintenance
                    && let Err(e) = self.client.clear_maintenance(&node.uuid).await
                {
                    return self.busy_or_err(host, e, Progress::default());
                }
                self.transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Manage),
                    Progress::default(),
                    "recover from failed cleaning",
                )
                .await
            }
            "clean failed" => Ok(Outcome::failed(
                Progress::default(),
                format!("Cleaning failed: {}", last_error(&node)),
            )),
            "error" if host.restart_on_failure => {
                self.transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Deleted),
                    Progress::default(),
                    "retry deprovisioning",
                )
                .await
            }
            "error" => Ok(Outcome::failed(
                Progress::default(),
                format!("Deprovisioning failed: {}", last_error(&node)),
            )),
            _ => Self::unexpected(&node, Progress::default(), "deprovision the host"),
        }
    }

    async fn adopt(&self, host: &Host, request: &ProvisionRequest) -> ProvisionerResult<Progress> {
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
            self.transition(
                host,
                &node,
                Req::new(ProvisionTarget::Adopt),
                Progress {
                    started: true,
                    current_step: None,
                },
                "adopt the provisioned host",
            )
            .await
        };
        match node.provision_state() {
            "enroll" | "verifying" => self.wait(Progress::default()),
            "manageable" => start().await,
            "adopting" => self.wait(Progress::default()),
            "adopt failed" if host.restart_on_failure => start().await,
            "adopt failed" => Ok(Outcome::failed(
                Progress::default(),
                format!("Host adoption failed: {}", last_error(&node)),
            )),
            "active" => {
                if node.maintenance && node.fault.is_none() {
                    if let Err(e) = self.client.clear_maintenance(&node.uuid).await {
                        return self.busy_or_err(host, e, Progress::default());
                    }
                    return self.changed(Progress::default());
                }
                Ok(Outcome::done(Progress::default()))
            }
            _ => Self::unexpected(&node, Progress::default(), "adopt the host"),
        }
    }

    async fn power_state(&self, host: &Host) -> ProvisionerResult<PowerState> {
        let node = self.require_node(host).await?;
        Ok(Outcome::done(Self::power_of(&node)))
    }

    async fn power_on(&self, host: &Host) -> ProvisionerResult<PowerState> {
        let node = self.require_node(host).await?;
        let now = Self::power_of(&node);
        if node.target_power_state.is_some() || node.target_provision_state.is_some() {
            return self.wait(now);
        }
        if now == PowerState::On {
            return Ok(Outcome::done(now));
        }
        if let Some(error) = node
            .last_error
            .as_deref()
            .filter(|e| e.contains("power on"))
            && !host.restart_on_failure
        {
            return Ok(Outcome::failed(
                now,
                format!("Powering on failed: {}", sentence(error)),
            ));
        }
        match self.power(&node, PowerTarget::On, None).await {
            Ok(()) => self.changed(now),
            Err(e) if e.status() == Some(StatusCode::BAD_REQUEST) => Ok(Outcome::failed(
                now,
                format!(
                    "Ironic refused to power the host on: {}",
                    sentence(&e.to_string())
                ),
            )),
            Err(e) => self.busy_or_err(host, e, now),
        }
    }

    async fn power_off(&self, host: &Host, mode: PowerMode) -> ProvisionerResult<PowerState> {
        let node = self.require_node(host).await?;
        let now = Self::power_of(&node);
        if host.disable_power_off {
            return Ok(Outcome::failed(
                now,
                "the host has disablePowerOff set; reboot it instead of powering it off",
            ));
        }
        if node.target_power_state.is_some() || node.target_provision_state.is_some() {
            return self.wait(now);
        }
        if now == PowerState::Off {
            return Ok(Outcome::done(now));
        }
        if node.provision_state() == "inspect wait" {
            return self
                .transition(
                    host,
                    &node,
                    Req::new(ProvisionTarget::Abort),
                    now,
                    "abort inspection before powering off",
                )
                .await;
        }
        // A soft power off that already failed (e.g. the OS ignored ACPI until the
        // timeout) is followed by a hard one.
        let soft_failed = node
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("soft power off"));
        let soft = mode == PowerMode::Soft && !soft_failed;
        let result = if soft {
            match self
                .power(
                    &node,
                    PowerTarget::SoftOff,
                    Some(SOFT_POWER_OFF_TIMEOUT.as_secs() as u32),
                )
                .await
            {
                Err(e) if e.status() == Some(StatusCode::BAD_REQUEST) => {
                    tracing::info!(host = %host.id, "soft power off not supported ({e}); powering off hard");
                    self.power(&node, PowerTarget::Off, None).await
                }
                other => other,
            }
        } else {
            self.power(&node, PowerTarget::Off, None).await
        };
        match result {
            Ok(()) => self.changed(now),
            Err(e) if e.status() == Some(StatusCode::BAD_REQUEST) => Ok(Outcome::failed(
                now,
                format!(
                    "Ironic refused to power the host off: {}",
                    sentence(&e.to_string())
                ),
            )),
            Err(e) => self.busy_or_err(host, e, now),
        }
    }

    async fn reboot(&self, host: &Host, mode: PowerMode) -> ProvisionerResult<()> {
        let node = self.require_node(host).await?;
        if node.target_power_state.is_some() || node.target_provision_state.is_some() {
            return self.wait(());
        }
        let result = if mode == PowerMode::Soft {
            match self
                .power(
                    &node,
                    PowerTarget::SoftReboot,
                    Some(SOFT_POWER_OFF_TIMEOUT.as_secs() as u32),
                )
                .await
            {
                Err(e) if e.status() == Some(StatusCode::BAD_REQUEST) => {
                    self.power(&node, PowerTarget::Reboot, None).await
                }
                other => other,
            }
        } else {
            self.power(&node, PowerTarget::Reboot, None).await
        };
        match result {
            Ok(()) => Ok(Outcome {
                changed: true,
                requeue_after: None,
                error: None,
                value: (),
            }),
            Err(e) if e.status() == Some(StatusCode::BAD_REQUEST) => Ok(Outcome::failed(
                (),
                format!(
                    "Ironic refused to reboot the host: {}",
                    sentence(&e.to_string())
                ),
            )),
            Err(e) => self.busy_or_err(host, e, ()),
        }
    }

    async fn detach(&self, host: &Host) -> ProvisionerResult<()> {
        self.remove_node(host).await
    }

    async fn delete(&self, host: &Host) -> ProvisionerResult<()> {
        self.remove_node(host).await
    }

    async fn has_capacity(&self, host: &Host, limit: usize) -> Result<bool, ProvisionerError> {
        if host.bmc.kind.supports_iso_boot() {
            return Ok(true);
        }
        let nodes = self
            .client
            .list_nodes()
            .await
            .map_err(|e| Self::ironic_err(host, e))?;
        Ok(has_capacity(&nodes, host, limit))
    }
}

/// Provision states in which a host boots the ramdisk over the provisioning network.
const BUSY_STATES: &[&str] = &[
    "cleaning",
    "clean wait",
    "inspecting",
    "inspect wait",
    "deploying",
    "wait call-back",
    "deleting",
];

fn has_capacity(nodes: &[Node], host: &Host, limit: usize) -> bool {
    let name = host.id.node_name();
    let busy: Vec<&Node> = nodes
        .iter()
        .filter(|n| BUSY_STATES.contains(&n.provision_state()))
        .filter(|n| {
            !n.boot_interface
                .as_deref()
                .unwrap_or_default()
                .contains("virtual-media")
        })
        .collect();
    let this = |n: &&Node| {
        n.name.as_deref() == Some(name.as_str())
            || host.provisioning_id.as_deref() == Some(n.uuid.as_str())
    };
    busy.iter().any(this) || busy.len() < limit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ironic_errors_become_one_sentence() {
        assert_eq!(
            sentence(
                "Failed to get power state for node 1.\nTraceback (most recent call last):\n  ..."
            ),
            "Failed to get power state for node 1."
        );
        assert_eq!(
            sentence("  HTTP   401 Unauthorized "),
            "HTTP 401 Unauthorized."
        );
        assert_eq!(sentence(""), "no reason given.");
        assert_eq!(
            sentence(
                "Failed to get power state for node n. Error: Redfish exception occurred. Error: HTTP GET http://b/redfish/v1/Systems/1 returned code 401. Base.1.0.GeneralError: Incorrect username or password Extended information: [{'@odata.type': 'x'}]"
            ),
            "Failed to get power state for node n. Error: HTTP GET http://b/redfish/v1/Systems/1 returned code 401. Base.1.0.GeneralError: Incorrect username or password."
        );
        assert!(sentence(&"x".repeat(1000)).chars().count() <= 401);
    }

    fn node(name: &str, state: &str, boot: &str) -> Node {
        serde_json::from_value(json!({
            "uuid": format!("uuid-{name}"), "name": name, "driver": "ipmi",
            "provision_state": state, "boot_interface": boot,
        }))
        .unwrap()
    }

    #[test]
    fn capacity_counts_busy_network_booting_hosts_only() {
        let host = crate::provisioner::fixture::tests::host();
        let nodes = vec![
            node("a", "inspect wait", "ipxe"),
            node("b", "deploying", "ipxe"),
            node("c", "clean wait", "redfish-virtual-media"),
            node("d", "active", "ipxe"),
        ];
        assert!(!has_capacity(&nodes, &host, 2), "a and b fill a limit of 2");
        assert!(has_capacity(&nodes, &host, 3));
        let mut with_self = nodes.clone();
        with_self.push(node("ns~h", "cleaning", "ipxe"));
        assert!(
            has_capacity(&with_self, &host, 1),
            "a busy host keeps its slot"
        );
    }

    #[test]
    fn step_names_join_interface_and_step() {
        let step =
            Some(json!({"interface": "raid", "step": "create_configuration", "priority": 0}));
        assert_eq!(
            step_name(&step).as_deref(),
            Some("raid.create_configuration")
        );
        assert_eq!(step_name(&Some(json!({}))), None);
    }
}
