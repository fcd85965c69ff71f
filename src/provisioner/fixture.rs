//! An in-memory provisioner for unit tests of the host state machine: every
//! long-running operation takes a configurable number of calls to finish, and any
//! operation can be told to fail.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::types::{
    AutomatedCleaningMode, DeployRamdisk, Host, InspectStatus, Outcome, PowerMode, PowerState,
    PrepareRequest, PrepareStatus, Progress, ProvisionRequest, Registration, ServiceRequest,
    StepKind,
};
use super::{
    BiosSettings, DataImageProvisioner, FirmwareReader, NodeRef, Provisioner, ProvisionerError,
    ProvisionerResult, VirtualCd, hardware,
};
use crate::api::HardwareDetails;
use crate::api::firmware::FirmwareComponentStatus;

const POLL: Duration = Duration::from_millis(1);

/// The operations a test can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FixtureOperation {
    Register,
    Inspect,
    Prepare,
    Provision,
    Deprovision,
    Adopt,
    Power,
    Delete,
    Service,
}

/// Where a fixture host is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FixtureState {
    /// Registered, credentials not yet checked.
    Enrolled,
    Manageable,
    Available,
    Active,
    /// A long operation (inspect, prepare, provision, deprovision, adopt) runs.
    Running {
        operation: FixtureOperation,
        calls_left: u32,
    },
}

/// A fixture host's record.
#[derive(Debug, Clone, PartialEq)]
pub struct FixtureHost {
    pub id: String,
    pub state: FixtureState,
    pub powered_on: bool,
    pub inspected: bool,
    pub image_url: Option<String>,
    pub last_clean_steps: Vec<String>,
    /// The deploy ramdisk of the last registration (Ironic's `driver_info`).
    pub deploy_ramdisk: DeployRamdisk,
    /// Registrations that delivered changed credentials.
    pub credential_updates: u32,
}

/// In-memory [`Provisioner`].
#[derive(Debug)]
pub struct FixtureProvisioner {
    hosts: Mutex<HashMap<String, FixtureHost>>,
    failures: Mutex<HashMap<(String, FixtureOperation), String>>,
    /// Records the provisioner is busy with (Ironic's transient states): changed
    /// credentials wait.
    busy: Mutex<std::collections::HashSet<String>>,
    /// Calls an operation takes from start to done.
    pub steps: u32,
    /// What inspection reports; by default what an empty inventory gives.
    pub hardware: HardwareDetails,
    /// BIOS settings by node name (empty for a record without an entry).
    bios: Mutex<HashMap<String, BiosSettings>>,
    /// Firmware components by node name (none for a record without an entry).
    firmware: Mutex<HashMap<String, Vec<FirmwareComponentStatus>>>,
    /// The image in each node's virtual CD, by node name.
    virtual_cds: Mutex<HashMap<String, String>>,
}

impl Default for FixtureProvisioner {
    fn default() -> Self {
        Self::new(2)
    }
}

impl FixtureProvisioner {
    pub fn new(steps: u32) -> Self {
        Self {
            hosts: Mutex::default(),
            failures: Mutex::default(),
            busy: Mutex::default(),
            steps,
            hardware: hardware::from_inventory(&serde_json::Value::Null),
            bios: Mutex::default(),
            firmware: Mutex::default(),
            virtual_cds: Mutex::default(),
        }
    }

    /// The image in `node_name`'s virtual CD, if one is inserted.
    pub fn virtual_cd_image(&self, node_name: &str) -> Option<String> {
        lock(&self.virtual_cds).get(node_name).cloned()
    }

    /// What `node_name`'s BMC reports as its BIOS settings from now on (a node with
    /// settings exists for reads even when never registered).
    pub fn set_bios(&self, node_name: &str, settings: BiosSettings) {
        lock(&self.bios).insert(node_name.to_owned(), settings);
    }

    /// What `node_name`'s BMC reports as its firmware components from now on (a node
    /// with components exists for reads even when never registered).
    pub fn set_firmware_components(
        &self,
        node_name: &str,
        components: Vec<FirmwareComponentStatus>,
    ) {
        lock(&self.firmware).insert(node_name.to_owned(), components);
    }

    /// Every call of `operation` on `host` (the `namespace~name`) fails with `message`
    /// until [`Self::clear_failure`].
    pub fn fail(&self, node_name: &str, operation: FixtureOperation, message: &str) {
        lock(&self.failures).insert((node_name.to_owned(), operation), message.to_owned());
    }

    pub fn clear_failure(&self, node_name: &str, operation: FixtureOperation) {
        lock(&self.failures).remove(&(node_name.to_owned(), operation));
    }

    /// Marks `node_name`'s record busy (as Ironic's `verifying`, `cleaning`, …) or
    /// resting again.
    pub fn set_busy(&self, node_name: &str, busy: bool) {
        let mut set = lock(&self.busy);
        if busy {
            set.insert(node_name.to_owned());
        } else {
            set.remove(node_name);
        }
    }

    /// A snapshot of a host's record.
    pub fn host(&self, node_name: &str) -> Option<FixtureHost> {
        lock(&self.hosts).get(node_name).cloned()
    }

    /// Forgets a host, as if the provisioner's database was wiped.
    pub fn forget(&self, node_name: &str) {
        lock(&self.hosts).remove(node_name);
    }

    fn failure(&self, host: &Host, op: FixtureOperation) -> Option<String> {
        lock(&self.failures)
            .get(&(host.id.node_name(), op))
            .cloned()
    }

    fn with_host<T>(
        &self,
        host: &Host,
        op: FixtureOperation,
        fallback: T,
        f: impl FnOnce(&mut FixtureHost, u32) -> Outcome<T>,
    ) -> ProvisionerResult<T> {
        if let Some(message) = self.failure(host, op) {
            return Ok(Outcome::failed(fallback, message));
        }
        let mut hosts = lock(&self.hosts);
        let record = hosts.get_mut(&host.id.node_name()).ok_or_else(|| {
            ProvisionerError::NeedsRegistration {
                host: host.id.to_string(),
            }
        })?;
        Ok(f(record, self.steps))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl FixtureHost {
    /// Starts the long operation `operation`, which takes `calls` calls.
    fn start<T>(&mut self, operation: FixtureOperation, calls: u32, value: T) -> Outcome<T> {
        self.state = FixtureState::Running {
            operation,
            calls_left: calls,
        };
        Outcome::changed(value, POLL)
    }

    /// One more call of `operation`, if it runs: waits with `waiting`, or on its last
    /// call `finish`es it and is done. `None` when `operation` does not run.
    fn advance<T>(
        &mut self,
        operation: FixtureOperation,
        waiting: T,
        finish: impl FnOnce(&mut Self) -> T,
    ) -> Option<Outcome<T>> {
        let FixtureState::Running {
            operation: running,
            calls_left,
        } = &mut self.state
        else {
            return None;
        };
        if *running != operation {
            return None;
        }
        *calls_left = calls_left.saturating_sub(1);
        if *calls_left > 0 {
            return Some(Outcome::wait(waiting, POLL));
        }
        Some(Outcome::done(finish(self)))
    }
}

impl FirmwareReader for FixtureProvisioner {
    async fn bios_settings(
        &self,
        node: &NodeRef,
    ) -> Result<Option<BiosSettings>, ProvisionerError> {
        let name = node.id.node_name();
        if let Some(bios) = lock(&self.bios).get(&name) {
            return Ok(Some(bios.clone()));
        }
        Ok(lock(&self.hosts)
            .contains_key(&name)
            .then(BiosSettings::default))
    }

    /// Without [`Self::set_firmware_components`], a node has none (as with Ironic's
    /// fake firmware interface, which caches none).
    async fn firmware_components(
        &self,
        node: &NodeRef,
    ) -> Result<Option<Vec<FirmwareComponentStatus>>, ProvisionerError> {
        let name = node.id.node_name();
        if let Some(components) = lock(&self.firmware).get(&name) {
            return Ok(Some(components.clone()));
        }
        Ok(lock(&self.hosts).contains_key(&name).then(Vec::new))
    }
}

/// Attaching and detaching take effect at once; [`FixtureOperation::Power`] failures
/// (virtual media lives on the BMC as power does) refuse them.
impl DataImageProvisioner for FixtureProvisioner {
    async fn virtual_cd(&self, node: &NodeRef) -> Result<Option<VirtualCd>, ProvisionerError> {
        let name = node.id.node_name();
        if !lock(&self.hosts).contains_key(&name) {
            return Ok(None);
        }
        Ok(Some(VirtualCd {
            inserted: lock(&self.virtual_cds).contains_key(&name),
            busy: lock(&self.busy).contains(&name),
            failure: None,
        }))
    }

    async fn attach_virtual_cd(
        &self,
        node: &NodeRef,
        url: &str,
    ) -> Result<Option<String>, ProvisionerError> {
        let name = node.id.node_name();
        if let Some(message) = lock(&self.failures).get(&(name.clone(), FixtureOperation::Power)) {
            return Ok(Some(message.clone()));
        }
        lock(&self.virtual_cds).insert(name, url.to_owned());
        Ok(None)
    }

    async fn detach_virtual_cd(&self, node: &NodeRef) -> Result<Option<String>, ProvisionerError> {
        lock(&self.virtual_cds).remove(&node.id.node_name());
        Ok(None)
    }
}

impl Provisioner for FixtureProvisioner {
    async fn register(&self, host: &Host) -> ProvisionerResult<Registration> {
        if let Some(message) = self.failure(host, FixtureOperation::Register) {
            return Ok(Outcome::failed(Registration::default(), message));
        }
        let mut hosts = lock(&self.hosts);
        let name = host.id.node_name();
        let record = hosts.entry(name.clone()).or_insert_with(|| FixtureHost {
            id: format!("fixture-{name}"),
            state: FixtureState::Enrolled,
            powered_on: false,
            inspected: false,
            image_url: None,
            last_clean_steps: Vec::new(),
            deploy_ramdisk: DeployRamdisk::default(),
            credential_updates: 0,
        });
        record.deploy_ramdisk = host.deploy_ramdisk.clone();
        let busy = lock(&self.busy).contains(&name);
        if host.credentials_changed && !busy {
            record.credential_updates += 1;
        }
        let registration = Registration {
            provisioning_id: Some(record.id.clone()),
            credentials_valid: record.state != FixtureState::Enrolled,
            power: if record.powered_on {
                PowerState::On
            } else {
                PowerState::Off
            },
            // Servicing keeps the instance, as in Ironic.
            deployed: matches!(
                record.state,
                FixtureState::Active
                    | FixtureState::Running {
                        operation: FixtureOperation::Service,
                        ..
                    }
            ),
            credentials_pending: host.credentials_changed && busy,
            node_state: None,
        };
        if busy {
            return Ok(Outcome::wait(registration, POLL));
        }
        if record.state == FixtureState::Enrolled {
            record.state = FixtureState::Manageable;
            return Ok(Outcome::changed(registration, POLL));
        }
        // New credentials on a registered record are checked against the BMC, as
        // Ironic's boot-device read does: a change, looked at again shortly.
        if host.credentials_changed {
            return Ok(Outcome::changed(registration, POLL));
        }
        Ok(Outcome::done(registration))
    }

    async fn inspect(&self, host: &Host, refresh: bool) -> ProvisionerResult<InspectStatus> {
        let op = FixtureOperation::Inspect;
        let hardware = self.hardware.clone();
        self.with_host(host, op, InspectStatus::InProgress, |h, steps| {
            let finished = h.advance(op, InspectStatus::InProgress, |h| {
                h.state = FixtureState::Manageable;
                h.inspected = true;
                InspectStatus::Complete(Box::new(hardware.clone()))
            });
            if let Some(outcome) = finished {
                return outcome;
            }
            match &h.state {
                FixtureState::Manageable | FixtureState::Available if h.inspected && !refresh => {
                    Outcome::done(InspectStatus::Complete(Box::new(hardware)))
                }
                FixtureState::Manageable | FixtureState::Available => {
                    h.start(op, steps, InspectStatus::Started)
                }
                other => Outcome::failed(
                    InspectStatus::InProgress,
                    format!("cannot inspect a host in state {other:?}"),
                ),
            }
        })
    }

    async fn prepare(
        &self,
        host: &Host,
        request: &PrepareRequest,
    ) -> ProvisionerResult<PrepareStatus> {
        let op = FixtureOperation::Prepare;
        let work = request.unprepared
            && (request.raid.is_some()
                || !request.bios_settings.is_empty()
                || !request.firmware_updates.is_empty()
                || request.full_disk_wipe);
        self.with_host(host, op, PrepareStatus::default(), |h, steps| {
            let waiting = Progress::running(StepKind::Clean, h.last_clean_steps.first().cloned());
            let finished = h.advance(op, waiting, |h| {
                h.state = FixtureState::Available;
                PrepareStatus::default()
            });
            if let Some(outcome) = finished {
                return outcome;
            }
            match &h.state {
                FixtureState::Manageable | FixtureState::Available if work => {
                    h.last_clean_steps = Vec::new();
                    if request.raid.is_some() {
                        h.last_clean_steps.push("raid.create_configuration".into());
                    }
                    if !request.bios_settings.is_empty() {
                        h.last_clean_steps.push("bios.apply_configuration".into());
                    }
                    if !request.firmware_updates.is_empty() {
                        h.last_clean_steps.push("firmware.update".into());
                    }
                    if request.full_disk_wipe {
                        h.last_clean_steps.push("deploy.erase_devices".into());
                    }
                    h.start(op, steps, Progress::started())
                }
                FixtureState::Manageable | FixtureState::Available => {
                    h.state = FixtureState::Available;
                    Outcome::done(PrepareStatus::default())
                }
                other => Outcome::failed(
                    PrepareStatus::default(),
                    format!("cannot prepare a host in state {other:?}"),
                ),
            }
        })
    }

    async fn service(&self, host: &Host, request: &ServiceRequest) -> ProvisionerResult<Progress> {
        let op = FixtureOperation::Service;
        let mut steps_asked = Vec::new();
        if !request.bios_settings.is_empty() {
            steps_asked.push("bios.apply_configuration".to_owned());
        }
        if !request.firmware_updates.is_empty() {
            steps_asked.push("firmware.update".to_owned());
        }
        self.with_host(host, op, Progress::default(), |h, steps| {
            let waiting = Progress::running(StepKind::Service, h.last_clean_steps.first().cloned());
            if let Some(outcome) = h.advance(op, waiting, |h| {
                h.state = FixtureState::Active;
                Progress::default()
            }) {
                return outcome;
            }
            match &h.state {
                FixtureState::Active if steps_asked.is_empty() => {
                    Outcome::done(Progress::default())
                }
                FixtureState::Active => {
                    h.last_clean_steps = steps_asked;
                    h.start(op, steps, Progress::started())
                }
                other => Outcome::failed(
                    Progress::default(),
                    format!("cannot service a host in state {other:?}"),
                ),
            }
        })
    }

    async fn provision(
        &self,
        host: &Host,
        request: &ProvisionRequest,
    ) -> ProvisionerResult<Progress> {
        let op = FixtureOperation::Provision;
        let url = request.image.as_ref().map(|i| i.url.clone());
        self.with_host(host, op, Progress::default(), |h, steps| {
            let finished = h.advance(op, Progress::default(), |h| {
                h.state = FixtureState::Active;
                h.powered_on = true;
                Progress::default()
            });
            if let Some(outcome) = finished {
                return outcome;
            }
            match &h.state {
                FixtureState::Active => Outcome::done(Progress::default()),
                FixtureState::Available | FixtureState::Manageable => {
                    h.image_url = url;
                    h.start(op, steps, Progress::started())
                }
                other => Outcome::failed(
                    Progress::default(),
                    format!("cannot provision a host in state {other:?}"),
                ),
            }
        })
    }

    async fn deprovision(&self, host: &Host) -> ProvisionerResult<Progress> {
        let op = FixtureOperation::Deprovision;
        let wipe = host.cleaning_mode == AutomatedCleaningMode::Full;
        self.with_host(host, op, Progress::default(), |h, steps| {
            let finished = h.advance(op, Progress::default(), |h| {
                h.state = FixtureState::Available;
                h.image_url = None;
                h.powered_on = false;
                Progress::default()
            });
            if let Some(outcome) = finished {
                return outcome;
            }
            match &h.state {
                FixtureState::Active
                | FixtureState::Running {
                    operation: FixtureOperation::Provision,
                    ..
                } => {
                    // As the Ironic provisioner's manual clean after the undeploy.
                    if wipe {
                        h.last_clean_steps = vec!["deploy.erase_devices".into()];
                    }
                    h.start(op, steps, Progress::started())
                }
                _ => {
                    h.state = FixtureState::Available;
                    Outcome::done(Progress::default())
                }
            }
        })
    }

    async fn adopt(&self, host: &Host, request: &ProvisionRequest) -> ProvisionerResult<Progress> {
        let op = FixtureOperation::Adopt;
        let url = request.image.as_ref().map(|i| i.url.clone());
        self.with_host(host, op, Progress::default(), |h, steps| {
            let finished = h.advance(op, Progress::default(), |h| {
                h.state = FixtureState::Active;
                Progress::default()
            });
            if let Some(outcome) = finished {
                return outcome;
            }
            match &h.state {
                FixtureState::Active => Outcome::done(Progress::default()),
                FixtureState::Manageable => {
                    h.image_url = url;
                    h.start(op, steps, Progress::started())
                }
                other => Outcome::failed(
                    Progress::default(),
                    format!("cannot adopt a host in state {other:?}"),
                ),
            }
        })
    }

    async fn power_on(&self, host: &Host) -> ProvisionerResult<PowerState> {
        self.with_host(
            host,
            FixtureOperation::Power,
            PowerState::Unknown,
            |h, _| {
                if h.powered_on {
                    Outcome::done(PowerState::On)
                } else {
                    h.powered_on = true;
                    Outcome::changed(PowerState::Off, POLL)
                }
            },
        )
    }

    async fn power_off(&self, host: &Host, _mode: PowerMode) -> ProvisionerResult<PowerState> {
        self.with_host(
            host,
            FixtureOperation::Power,
            PowerState::Unknown,
            |h, _| {
                if h.powered_on {
                    h.powered_on = false;
                    Outcome::changed(PowerState::On, POLL)
                } else {
                    Outcome::done(PowerState::Off)
                }
            },
        )
    }

    async fn detach(&self, host: &Host) -> ProvisionerResult<()> {
        self.forget(&host.id.node_name());
        Ok(Outcome::done(()))
    }

    async fn delete(&self, host: &Host) -> ProvisionerResult<()> {
        if let Some(message) = self.failure(host, FixtureOperation::Delete) {
            return Ok(Outcome::failed((), message));
        }
        self.forget(&host.id.node_name());
        Ok(Outcome::done(()))
    }

    /// The fixture gives no state digests (`Registration::node_state` is `None`), so
    /// hosts at rest are looked at on a timer and this list is never asked for.
    async fn node_states(
        &self,
    ) -> Result<std::collections::HashMap<String, u64>, ProvisionerError> {
        Ok(Default::default())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::Image;
    use crate::bmc::BmcAddress;
    use crate::credentials::{Credentials, SecretString};
    use crate::provisioner::types::*;

    pub(crate) fn host() -> Host {
        Host {
            id: HostId::new("ns", "h"),
            provisioning_id: None,
            bmc: BmcAddress::parse("fake://h").unwrap(),
            credentials: Credentials {
                username: "u".into(),
                password: SecretString::new("p"),
            },
            credentials_changed: false,
            disable_certificate_verification: false,
            boot_mac: None,
            boot_mode: BootMode::Uefi,
            inspection_mode: InspectionMode::Agent,
            cleaning_mode: AutomatedCleaningMode::Metadata,
            architecture: None,
            externally_provisioned: false,
            disable_power_off: false,
            deploy_ramdisk: DeployRamdisk::default(),
            preprovisioning_network_data: None,
            restart_on_failure: false,
        }
    }

    /// Calls `f` until the outcome is done; panics after 20 calls.
    async fn until_done<T, Fut: std::future::Future<Output = ProvisionerResult<T>>>(
        mut f: impl FnMut() -> Fut,
    ) -> T {
        for _ in 0..20 {
            let o = f().await.unwrap();
            assert_eq!(o.error, None);
            if o.is_done() {
                return o.value;
            }
        }
        panic!("never done");
    }

    #[tokio::test]
    async fn walks_the_whole_lifecycle() {
        let p = FixtureProvisioner::new(3);
        let h = host();
        assert!(matches!(
            p.inspect(&h, false).await,
            Err(ProvisionerError::NeedsRegistration { .. })
        ));
        let reg = until_done(|| p.register(&h)).await;
        assert!(reg.credentials_valid);
        let hw = until_done(|| p.inspect(&h, false)).await;
        assert!(matches!(hw, InspectStatus::Complete(_)));
        let prep = PrepareRequest {
            bios_settings: vec![("ProcVirtualization".into(), "Enabled".into())],
            unprepared: true,
            ..Default::default()
        };
        let first = p.prepare(&h, &prep).await.unwrap();
        assert!(first.value.started);
        let during = p.prepare(&h, &prep).await.unwrap();
        assert_eq!(
            during.value.current_step.map(|s| s.name).as_deref(),
            Some("bios.apply_configuration")
        );
        until_done(|| p.prepare(&h, &prep)).await;
        let req = ProvisionRequest {
            image: Some(Image {
                url: "http://i".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        until_done(|| p.provision(&h, &req)).await;
        assert_eq!(p.host("ns~h").unwrap().state, FixtureState::Active);
        assert!(p.host("ns~h").unwrap().powered_on);
        until_done(|| p.power_off(&h, PowerMode::Soft)).await;
        assert!(!p.host("ns~h").unwrap().powered_on);
        until_done(|| p.deprovision(&h)).await;
        assert_eq!(p.host("ns~h").unwrap().state, FixtureState::Available);
        until_done(|| p.delete(&h)).await;
        assert!(p.host("ns~h").is_none());
    }

    #[tokio::test]
    async fn injected_failures_repeat_until_cleared() {
        let p = FixtureProvisioner::default();
        let h = host();
        p.fail("ns~h", FixtureOperation::Register, "BMC said no");
        for _ in 0..2 {
            let o = p.register(&h).await.unwrap();
            assert_eq!(o.error.as_deref(), Some("BMC said no"));
        }
        p.clear_failure("ns~h", FixtureOperation::Register);
        until_done(|| p.register(&h)).await;
    }

    #[tokio::test]
    async fn a_forgotten_active_host_is_adopted_not_reprovisioned() {
        let p = FixtureProvisioner::new(1);
        let h = host();
        until_done(|| p.register(&h)).await;
        p.forget("ns~h");
        until_done(|| p.register(&h)).await;
        let req = ProvisionRequest::default();
        until_done(|| p.adopt(&h, &req)).await;
        assert_eq!(p.host("ns~h").unwrap().state, FixtureState::Active);
    }
}
