//! The Ironic implementation of [`Provisioner`]: each call reads the node, does at most
//! the next step for its provision state, and says when to look again.
//!
//! One file per operation: `register` (node, boot port, BMC access), `inspect`,
//! `clean` (prepare, and recovery from failed cleaning), `deploy` (provision, adopt),
//! `deprovision` (with the full disk wipe), `power`, `delete`; `node` holds what they
//! share.

mod clean;
mod delete;
mod deploy;
mod deprovision;
mod firmware;
mod inspect;
mod node;
mod node_list;
mod power;
mod register;
mod service;
mod subscription;
mod vmedia;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use super::types::{
    BootMode, Host, InspectStatus, NodeOwners, Outcome, PowerMode, PowerState, PrepareRequest,
    PrepareStatus, Progress, ProvisionRequest, Registration, ServiceRequest,
};
use super::{
    BiosSettings, DataImageProvisioner, EventSubscriber, FirmwareReader, NodeRef, Provisioner,
    ProvisionerError, ProvisionerResult, SubscriptionAnswer, SubscriptionRequest, VirtualCd,
};
use crate::api::firmware::FirmwareComponentStatus;
use crate::ironic::{IronicClient, IronicError, Node};
use node_list::NodeList;

/// Timing of the Ironic provisioner.
#[derive(Debug, Clone)]
pub struct ProvisionerSettings {
    /// Look again after quick transitions (manage, provide, power, a locked node).
    pub short_delay: Duration,
    /// Look again during long ones (inspection, cleaning, deploying).
    pub long_delay: Duration,
    /// How long a boot port seen or made is taken as still there: a port deleted in
    /// Ironic behind bmo's back is made again at the first look after this.
    pub boot_port_recheck: Duration,
}

impl Default for ProvisionerSettings {
    fn default() -> Self {
        Self {
            short_delay: Duration::from_secs(3),
            long_delay: Duration::from_secs(10),
            boot_port_recheck: Duration::from_secs(60),
        }
    }
}

/// [`Provisioner`] backed by an Ironic API.
#[derive(Debug, Clone)]
pub struct IronicProvisioner {
    client: IronicClient,
    settings: ProvisionerSettings,
    /// The shared list of nodes every look at a node reads first.
    nodes: Arc<NodeList>,
    /// Boot ports (node UUID, lower-case MAC) seen or made, and when: not looked up
    /// again for [`ProvisionerSettings::boot_port_recheck`]. Older entries are dropped,
    /// so the map holds only the hosts registered lately, not every node ever seen.
    boot_ports: Arc<Mutex<HashMap<(String, String), Instant>>>,
    /// Who owns which node, once the controller attached its hosts.
    owners: Arc<OnceLock<Arc<dyn NodeOwners>>>,
}

const MAINTENANCE_REASON: &str = "forcing deletion in bmo";
/// Key in a node's `extra` holding why new BMC settings failed their check on a node
/// past enrollment (Ironic re-verifies BMC access only in `enroll`), so the reason is
/// reported on every call until the settings change again.
const BMC_CHECK_ERROR: &str = "bmo_bmc_check_error";

/// The first look after bmo asked Ironic for a change, and the shortest interval
/// between looks at a node in a transient state: about the time Ironic takes for a
/// quick step, and as old as the shared view of provision states gets
/// ([`node_list::CHANGES_MAX_AGE`]), so a quick step is seen done within about half a
/// second of its end. The looks were a third of the time to provisioned at N = 10
/// with 1 s (1.53× the direct driver's time; 1.01× with 0.5 s).
const FIRST_LOOK: Duration = node_list::CHANGES_MAX_AGE;

/// When to look again at `node`, which is in a transient state: half the time it has
/// been in that state (from Ironic's `provision_updated_at`), at least `first_look`
/// and at most `cap`. A step that ends in a second is seen within about half a second
/// of its end; a long one costs a read every `cap`.
fn follow(node: &Node, first_look: Duration, cap: Duration) -> Duration {
    let since = node
        .provision_updated_at
        .as_deref()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .and_then(|t| {
            let elapsed = k8s_openapi::jiff::Timestamp::now().duration_since(t);
            Duration::try_from(elapsed).ok()
        });
    match since {
        Some(elapsed) => (elapsed / 2).clamp(first_look.min(cap), cap),
        None => cap,
    }
}

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

/// Ironic's `last_error` when it failed an operation only because the conductor
/// running it died: another conductor took the node over (a deploy or cleaning), or a
/// conductor (re)started and found the node stuck in a state nobody can resume
/// (`... state can't be resumed by conductor HOST. Moving to fail state.`: deploying,
/// cleaning, inspecting, deleting, …).
const CONDUCTOR_DIED: [&str; 2] = [
    "Operation was aborted due to conductor take over",
    "can't be resumed by conductor",
];

/// Whether `node`'s last operation failed only because its conductor died: not the
/// host's error, and Ironic allows the operation again from the failed state.
fn conductor_died(node: &Node) -> bool {
    node.last_error
        .as_deref()
        .is_some_and(|e| CONDUCTOR_DIED.iter().any(|m| e.contains(m)))
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
        Self {
            client,
            settings,
            nodes: Arc::default(),
            boot_ports: Arc::default(),
            owners: Arc::default(),
        }
    }

    pub fn client(&self) -> &IronicClient {
        &self.client
    }

    fn has_boot_port(&self, port: &(String, String)) -> bool {
        let ports = self
            .boot_ports
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        ports
            .get(port)
            .is_some_and(|seen| seen.elapsed() < self.settings.boot_port_recheck)
    }

    fn record_boot_port(&self, port: (String, String)) {
        let recheck = self.settings.boot_port_recheck;
        let mut ports = self
            .boot_ports
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        ports.retain(|_, seen| seen.elapsed() < recheck);
        ports.insert(port, Instant::now());
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

    /// Looks again while `node` goes through a quick transition (manage, verifying,
    /// adoption), on the interval [`follow`] gives up to the short delay.
    fn wait<T>(&self, node: &Node, value: T) -> ProvisionerResult<T> {
        Ok(Outcome::wait(
            value,
            follow(node, FIRST_LOOK, self.settings.short_delay),
        ))
    }

    /// Looks again while `node` goes through a long operation (inspection, cleaning,
    /// deployment), on the interval [`follow`] gives up to the long delay.
    fn wait_long<T>(&self, node: &Node, value: T) -> ProvisionerResult<T> {
        Ok(Outcome::wait(
            value,
            follow(node, FIRST_LOOK, self.settings.long_delay),
        ))
    }

    /// Looks again soon after bmo asked Ironic for a change.
    fn changed<T>(&self, value: T) -> ProvisionerResult<T> {
        Ok(Outcome::changed(
            value,
            FIRST_LOOK.min(self.settings.short_delay),
        ))
    }

    /// Looks again after the short delay (a change Ironic gives no time of, such as
    /// power).
    fn wait_short<T>(&self, value: T) -> ProvisionerResult<T> {
        Ok(Outcome::wait(value, self.settings.short_delay))
    }
}

impl Provisioner for IronicProvisioner {
    async fn register(&self, host: &Host) -> ProvisionerResult<Registration> {
        self.register_node(host).await
    }

    fn attach_node_owners(&self, owners: Arc<dyn NodeOwners>) {
        // Attached once per provisioner; a second attach (a restarted controller in
        // one process) brings the same hosts.
        let _ = self.owners.set(owners);
    }

    async fn inspect(&self, host: &Host, refresh: bool) -> ProvisionerResult<InspectStatus> {
        self.inspect_node(host, refresh).await
    }

    async fn prepare(
        &self,
        host: &Host,
        request: &PrepareRequest,
    ) -> ProvisionerResult<PrepareStatus> {
        self.prepare_node(host, request).await
    }

    async fn service(&self, host: &Host, request: &ServiceRequest) -> ProvisionerResult<Progress> {
        self.service_node(host, request).await
    }

    async fn provision(
        &self,
        host: &Host,
        request: &ProvisionRequest,
    ) -> ProvisionerResult<Progress> {
        self.provision_node(host, request).await
    }

    async fn deprovision(&self, host: &Host) -> ProvisionerResult<Progress> {
        self.deprovision_node(host).await
    }

    async fn adopt(&self, host: &Host, request: &ProvisionRequest) -> ProvisionerResult<Progress> {
        self.adopt_node(host, request).await
    }

    async fn power_on(&self, host: &Host) -> ProvisionerResult<PowerState> {
        self.power_on_node(host).await
    }

    async fn power_off(&self, host: &Host, mode: PowerMode) -> ProvisionerResult<PowerState> {
        self.power_off_node(host, mode).await
    }

    async fn detach(&self, host: &Host) -> ProvisionerResult<()> {
        self.remove_node(host).await
    }

    async fn delete(&self, host: &Host) -> ProvisionerResult<()> {
        self.remove_node(host).await
    }

    async fn node_states(&self) -> Result<HashMap<String, u64>, ProvisionerError> {
        self.nodes
            .states(&self.client)
            .await
            .map_err(|source| ProvisionerError::Ironic {
                host: "(every node)".to_owned(),
                source,
            })
    }
}

impl FirmwareReader for IronicProvisioner {
    async fn bios_settings(
        &self,
        node: &NodeRef,
    ) -> Result<Option<BiosSettings>, ProvisionerError> {
        self.read_bios(node).await
    }

    async fn firmware_components(
        &self,
        node: &NodeRef,
    ) -> Result<Option<Vec<FirmwareComponentStatus>>, ProvisionerError> {
        self.read_firmware_components(node).await
    }
}

impl DataImageProvisioner for IronicProvisioner {
    async fn virtual_cd(&self, node: &NodeRef) -> Result<Option<VirtualCd>, ProvisionerError> {
        self.read_virtual_cd(node).await
    }

    async fn attach_virtual_cd(
        &self,
        node: &NodeRef,
        url: &str,
    ) -> Result<Option<String>, ProvisionerError> {
        self.insert_virtual_cd(node, url).await
    }

    async fn detach_virtual_cd(&self, node: &NodeRef) -> Result<Option<String>, ProvisionerError> {
        self.eject_virtual_cd(node).await
    }
}

impl EventSubscriber for IronicProvisioner {
    async fn create_subscription(
        &self,
        node: &NodeRef,
        request: &SubscriptionRequest,
    ) -> Result<SubscriptionAnswer<String>, ProvisionerError> {
        self.create_event_subscription(node, request).await
    }

    async fn delete_subscription(
        &self,
        node: &NodeRef,
        id: &str,
    ) -> Result<SubscriptionAnswer<()>, ProvisionerError> {
        self.delete_event_subscription(node, id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    #[test]
    fn only_a_conductor_that_died_reads_as_one() {
        let node = |last_error: Option<&str>| -> Node {
            serde_json::from_value(json!({
                "uuid": "u", "driver": "fake-hardware",
                "provision_state": "deploy failed", "last_error": last_error,
            }))
            .expect("node")
        };
        for died in [
            "Operation was aborted due to conductor take over",
            "The deploying state can't be resumed by conductor 127.0.0.2. Moving to fail state.",
            "The inspecting state can't be resumed by conductor ironic-0. Moving to fail state.",
        ] {
            assert!(conductor_died(&node(Some(died))), "{died}");
        }
        for other in [
            None,
            Some("Deploy step deploy.deploy failed: image checksum mismatch."),
            // A power request aborted by a take-over says nothing about the deploy.
            Some("Pending power operation was aborted due to conductor take over"),
        ] {
            assert!(!conductor_died(&node(other)), "{other:?}");
        }
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
