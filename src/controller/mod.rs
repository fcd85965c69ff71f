//! The host controller: a kube-runtime reconciler around the pure state machine.
//!
//! Each reconcile loads the host and its BMC Secret, asks the provisioner what it
//! needs to know, lets [`state_machine::plan`] pick one step, carries it out, and
//! saves the status (server-side apply on the status subresource) with conditions and
//! an event. Nothing about the lifecycle is decided here.

pub mod conditions;
pub mod discovery;
pub mod mapping;
pub mod state_machine;

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::Instrument;

use crate::api::host::{
    FINALIZER, HARDWARE_DETAILS_ANNOTATION, PAUSED_ANNOTATION, REBOOT_ANNOTATION_PREFIX,
    STATUS_ANNOTATION,
};
use crate::api::{
    BareMetalHost, BareMetalHostStatus, ErrorType, HardwareData, HardwareDataSpec,
    ProvisioningState as State,
};
use crate::credentials::{Credentials, SecretString};
use crate::metrics::{self, HostLabels, Metrics, TimedOperation};
use crate::netboot::leases::LeaseTable;
use crate::provisioner::{
    DeployRamdisk, InspectStatus, Outcome, PowerMode, PowerState, PrepareRequest, ProvisionRequest,
    Provisioner, ProvisionerError,
};
use state_machine::{
    CallResult, CredentialsCheck, ErrorChange, Facts, Operation, RebootRequest, Requeue, Step,
    Update,
};

/// Provisioning attempts for one image before bmo stops retrying.
pub const MAX_PROVISIONING_RETRIES: i64 = 5;
/// Label bmo puts on the BMC Secrets it uses; only labelled Secrets are watched.
pub const SECRET_LABEL: (&str, &str) = ("environment.metal3.io", "baremetal");
/// Field manager for everything bmo writes.
pub const FIELD_MANAGER: &str = "bmo";

/// Settings of the controller, from the one [`crate::config::Config`].
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// `WATCH_NAMESPACE`: only hosts in this namespace; all when `None`.
    pub namespace: Option<String>,
    /// `BMO_CONCURRENCY`: hosts reconciled at once.
    pub concurrency: u16,
    /// `PROVISIONING_LIMIT`: hosts inspecting, provisioning or deprovisioning at once.
    pub provisioning_limit: usize,
    /// Cap of the error backoff.
    pub max_backoff: Duration,
    pub deploy_ramdisk: DeployRamdisk,
}

/// Why a reconcile could not finish; retried with backoff by the controller.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("host {host}: Kubernetes API call failed: {source}")]
    Kube {
        host: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Provisioner(#[from] ProvisionerError),
}

/// What every reconcile shares.
pub struct Context<P> {
    pub client: kube::Client,
    pub provisioner: P,
    pub settings: ControllerSettings,
    /// What `/metrics` exports.
    pub metrics: Arc<Metrics>,
    /// What bmo's DHCP server learned, when it runs: NICs in the hardware details get
    /// their DHCP hostname and leased address from it.
    pub leases: Option<LeaseTable>,
    recorder: Recorder,
    /// Hosts holding a provisioning slot.
    busy: Mutex<HashSet<String>>,
}

impl<P: Provisioner> Context<P> {
    pub fn new(client: kube::Client, provisioner: P, settings: ControllerSettings) -> Self {
        let reporter = Reporter {
            controller: "metal3-baremetal-controller".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            provisioner,
            settings,
            metrics: Arc::new(Metrics::new()),
            leases: None,
            busy: Mutex::new(HashSet::new()),
        }
    }

    /// Counts into `metrics` (shared with the `/metrics` endpoint) instead of a
    /// registry of its own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Fills hardware details from `leases` (bmo's DHCP server's lease table).
    pub fn with_leases(mut self, leases: LeaseTable) -> Self {
        self.leases = Some(leases);
        self
    }

    /// Adds lease details (DHCP hostname, leased address) to `details`; whether
    /// anything changed.
    fn add_lease_details(&self, details: &mut crate::api::HardwareDetails) -> bool {
        match &self.leases {
            Some(leases) => mapping::add_lease_details(details, |mac| leases.get(mac)),
            None => false,
        }
    }

    /// Whether `key` may start (or keep) a slot-consuming operation.
    fn has_capacity(&self, key: &str, state: State) -> bool {
        let Ok(mut busy) = self.busy.lock() else {
            return true;
        };
        let consumes = matches!(
            state,
            State::Inspecting | State::Provisioning | State::Deprovisioning
        );
        if !consumes {
            busy.remove(key);
        }
        if busy.contains(key) {
            return true;
        }
        busy.len() < self.settings.provisioning_limit
    }

    fn claim_slot(&self, key: &str, state: State) {
        if let Ok(mut busy) = self.busy.lock() {
            if matches!(
                state,
                State::Inspecting | State::Provisioning | State::Deprovisioning
            ) {
                busy.insert(key.to_owned());
            } else {
                busy.remove(key);
            }
        }
    }
}

/// Runs the host controller until `shutdown` resolves.
pub async fn run<P: Provisioner + 'static>(
    ctx: Arc<Context<P>>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    // Secrets are watched as metadata only, and only those bmo labelled.
    let (hosts, secrets): (Api<BareMetalHost>, Api<PartialObjectMeta<Secret>>) =
        match &ctx.settings.namespace {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (Api::all(client.clone()), Api::all(client.clone())),
        };
    let secret_filter =
        watcher::Config::default().labels(&format!("{}={}", SECRET_LABEL.0, SECRET_LABEL.1));
    let concurrency = ctx.settings.concurrency.max(1);
    Controller::new(hosts, watcher::Config::default())
        .watches(secrets, secret_filter, |secret| {
            let ns = secret.metadata.namespace.clone().unwrap_or_default();
            secret
                .metadata
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .filter(|o| o.kind == "BareMetalHost")
                .map(move |o| ObjectRef::new(&o.name).within(&ns))
                .collect::<Vec<_>>()
        })
        .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile did not finish");
            }
        })
        .await;
}

fn error_policy<P: Provisioner>(
    host: Arc<BareMetalHost>,
    error: &ReconcileError,
    ctx: Arc<Context<P>>,
) -> Action {
    tracing::warn!(host = %host.namespaced_name(), %error, "reconcile failed; retrying");
    ctx.metrics.count(metrics::Event::ReconcileError);
    let count = host
        .status
        .as_ref()
        .map(|s| s.error_count)
        .unwrap_or(0)
        .max(1);
    Action::requeue(backoff(count, ctx.settings.max_backoff).min(Duration::from_secs(30)))
}

/// `2^min(count, 9)` minutes less up to half of it, capped at `max`.
pub fn backoff(error_count: i64, max: Duration) -> Duration {
    let exp = u32::try_from(error_count.clamp(0, 9)).unwrap_or(9);
    let full = Duration::from_secs(60 * (1u64 << exp)).min(max);
    let random = std::hash::RandomState::new().build_hasher().finish();
    let fraction = 0.5 + (random % 500) as f64 / 1000.0;
    full.mul_f64(fraction).max(Duration::from_secs(1))
}

fn annotations(host: &BareMetalHost) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    host.metadata.annotations.as_ref().unwrap_or(&EMPTY)
}

/// The reboot annotations, combined.
fn reboot_request(host: &BareMetalHost, state: State) -> Option<RebootRequest> {
    let mut found: Option<RebootRequest> = None;
    for (key, value) in annotations(host) {
        let one_shot = key == REBOOT_ANNOTATION_PREFIX;
        if !one_shot && !key.starts_with(&format!("{REBOOT_ANNOTATION_PREFIX}/")) {
            continue;
        }
        let parsed: serde_json::Value =
            serde_json::from_str(value).unwrap_or(serde_json::Value::Null);
        let hard = parsed.get("mode").and_then(|m| m.as_str()) == Some("hard");
        let force = parsed
            .get("force")
            .and_then(|f| f.as_bool())
            .unwrap_or(false);
        // Outside provisioned states only forced reboots count.
        if !matches!(state, State::Provisioned | State::ExternallyProvisioned) && !force {
            continue;
        }
        let prev = found.unwrap_or(RebootRequest {
            hard: false,
            one_shot: true,
        });
        found = Some(RebootRequest {
            hard: prev.hard || hard,
            one_shot: prev.one_shot && one_shot,
        });
    }
    found
}

fn host_labels(host: &BareMetalHost) -> HostLabels {
    HostLabels {
        namespace: host.namespace().unwrap_or_default(),
        host: host.name_any(),
    }
}

fn kube_err(host: &str) -> impl FnOnce(kube::Error) -> ReconcileError + '_ {
    move |source| ReconcileError::Kube {
        host: host.to_owned(),
        source,
    }
}

async fn reconcile<P: Provisioner>(
    host: Arc<BareMetalHost>,
    ctx: Arc<Context<P>>,
) -> Result<Action, ReconcileError> {
    let name = host.namespaced_name();
    ctx.metrics.reconcile(&host_labels(&host));
    let span = tracing::info_span!("host", host = %name);
    reconcile_host(&host, &ctx).instrument(span).await
}

async fn reconcile_host<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
) -> Result<Action, ReconcileError> {
    let name = host.namespaced_name();
    let ns = host.namespace().unwrap_or_default();
    let hosts: Api<BareMetalHost> = Api::namespaced(ctx.client.clone(), &ns);
    if annotations(host).contains_key(PAUSED_ANNOTATION) {
        tracing::debug!("paused; leaving the host alone");
        return Ok(Action::await_change());
    }
    if let Some(action) = apply_status_annotations(host, ctx).await? {
        return Ok(action);
    }
    let deleting = host.metadata.deletion_timestamp.is_some();
    if !deleting && !host.finalizers().iter().any(|f| f == FINALIZER) {
        let mut finalizers = host.finalizers().to_vec();
        finalizers.push(FINALIZER.to_owned());
        hosts
            .patch(
                &host.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
            )
            .await
            .map_err(kube_err(&name))?;
        return Ok(Action::requeue(Duration::ZERO));
    }
    if deleting && !host.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }

    let state = host.provisioning_state();
    // A DHCP exchange after inspection (a renewal, the provisioned OS) reaches the
    // stored hardware details on the next reconcile; nothing else changes.
    if !deleting
        && let Some(mut details) = host.status.as_ref().and_then(|s| s.hardware.clone())
        && ctx.add_lease_details(&mut details)
    {
        tracing::info!("NIC DHCP details updated from the lease table");
        write_hardware_data(host, ctx, &details).await?;
        return save(host, ctx, Update::default(), Some(details), None).await;
    }
    let (credentials, credentials_check, secret_version) = match load_credentials(host, ctx).await {
        Ok(loaded) => loaded,
        Err(e) => {
            ctx.metrics.count(metrics::Event::CredentialsUnhandledError);
            return Err(e);
        }
    };
    match &credentials_check {
        CredentialsCheck::Missing(_) => ctx.metrics.count(metrics::Event::CredentialsMissing),
        CredentialsCheck::Invalid(_) => ctx.metrics.count(metrics::Event::CredentialsInvalid),
        CredentialsCheck::Valid => {}
    }
    let previous_version = host
        .status
        .as_ref()
        .and_then(|s| s.tried_credentials.as_ref())
        .and_then(|c| c.credentials_version.clone());
    let credentials_changed = secret_version.is_some() && secret_version != previous_version;
    if credentials_changed && previous_version.is_some() {
        ctx.metrics.count(metrics::Event::CredentialsUpdated);
    }

    let provisioner_host = match mapping::host_input(
        host,
        credentials,
        credentials_changed,
        &ctx.settings.deploy_ramdisk,
    ) {
        Ok(h) => Some(h),
        Err(e) if !deleting && !matches!(state, State::None | State::Unmanaged) => {
            // A spec problem only the user can fix: one error, no retries until the spec changes.
            let update = Update {
                error: ErrorChange::Set(ErrorType::Registration, e.to_string()),
                event: Some(("RegistrationError".into(), e.to_string(), true)),
                requeue: Requeue::OnChange,
                ..Default::default()
            };
            return save(host, ctx, update, None, None).await;
        }
        Err(_) => None,
    };

    let mut facts = Facts {
        credentials: credentials_check,
        power: None,
        has_capacity: ctx.has_capacity(&name, state),
        reboot: reboot_request(host, state),
    };

    // Registration is checked on every reconcile: it re-creates a vanished node and
    // sends changed credentials.
    if let Some(phost) = provisioner_host.as_ref()
        && state_machine::needs_registration(host)
        && facts.credentials == CredentialsCheck::Valid
    {
        let outcome = ctx.provisioner.register(phost).await?;
        let provisioning_id = outcome.value.provisioning_id.clone();
        if !outcome.is_done() {
            ctx.metrics.count(metrics::Event::HostRegistrationRequired);
        }
        if !outcome.is_done() || (state == State::Registering) {
            let result = call_result(&outcome);
            let update = state_machine::after(host, Operation::Register, &result);
            let creds = Some((secret_version.clone(), outcome.is_done()));
            return save_with(host, ctx, update, provisioning_id, creds, None, None).await;
        }
        if host
            .status
            .as_ref()
            .is_some_and(|s| s.error_type == Some(ErrorType::Registration))
        {
            let update = state_machine::after(host, Operation::Register, &CallResult::Done);
            return save_with(
                host,
                ctx,
                update,
                provisioning_id,
                Some((secret_version, true)),
                None,
                None,
            )
            .await;
        }
        if matches!(state, State::Provisioned | State::ExternallyProvisioned)
            && !outcome.value.deployed
        {
            let request = provision_request(host, ctx).await?;
            let adopted = ctx.provisioner.adopt(phost, &request).await?;
            if !adopted.is_done() {
                let update = state_machine::after(host, Operation::Adopt, &call_result(&adopted));
                return save(host, ctx, update, None, None).await;
            }
        }
        if matches!(
            state,
            State::Available | State::Ready | State::Provisioned | State::ExternallyProvisioned
        ) {
            facts.power = match outcome.value.power {
                PowerState::On => Some(true),
                PowerState::Off => Some(false),
                PowerState::Unknown => None,
            };
        }
    }

    let step = state_machine::plan(host, &facts);
    tracing::debug!(?step, %state, "planned");
    match step {
        Step::Transition(update) => save(host, ctx, update, None, None).await,
        Step::Wait(after) => {
            if deleting && state_machine::delete_delayed_by_detach(host) {
                ctx.metrics.count(metrics::Event::DeleteDelayedForDetached);
            }
            // Keep conditions and lastUpdated fresh only when something changed.
            Ok(Action::requeue(after))
        }
        Step::Call(op) => {
            let Some(phost) = provisioner_host else {
                if matches!(op, Operation::Delete | Operation::PowerOff { .. }) {
                    // No usable BMC details: nothing to remove in the provisioner.
                    return finish_delete(host, ctx).await;
                }
                return Ok(Action::requeue(Duration::from_secs(60)));
            };
            let mut phost = phost;
            phost.restart_on_failure = host
                .status
                .as_ref()
                .and_then(|s| s.error_type)
                .is_some_and(|t| t == op.error_type(state));
            execute(host, ctx, op, &phost).await
        }
    }
}

fn call_result<T>(outcome: &Outcome<T>) -> CallResult {
    if let Some(error) = &outcome.error {
        CallResult::Failed(error.clone())
    } else if let Some(after) = outcome.requeue_after {
        CallResult::InProgress {
            after,
            changed: outcome.changed,
        }
    } else {
        CallResult::Done
    }
}

async fn execute<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
    op: Operation,
    phost: &crate::provisioner::Host,
) -> Result<Action, ReconcileError> {
    let state = host.provisioning_state();
    let mut hardware = None;
    let mut progress = None;
    let result = match op {
        Operation::Register => call_result(&ctx.provisioner.register(phost).await?),
        Operation::Inspect { refresh } => {
            let outcome = ctx.provisioner.inspect(phost, refresh).await?;
            if let InspectStatus::Complete(details) = &outcome.value {
                let mut details = mapping::hardware_details(details);
                ctx.add_lease_details(&mut details);
                hardware = Some(details);
            }
            if matches!(
                outcome.value,
                InspectStatus::Started | InspectStatus::InProgress
            ) && outcome.error.is_none()
            {
                ctx.claim_slot(&host.namespaced_name(), state);
                progress = Some("inspecting hardware".to_owned());
                let after = outcome.requeue_after.unwrap_or(Duration::from_secs(10));
                CallResult::InProgress {
                    after,
                    changed: outcome.changed,
                }
            } else {
                call_result(&outcome)
            }
        }
        Operation::Prepare => {
            let request = PrepareRequest {
                raid: host.spec.raid.as_ref().map(mapping::raid),
                unprepared: host.spec.raid
                    != host
                        .status
                        .as_ref()
                        .and_then(|s| s.provisioning.raid.clone()),
                ..Default::default()
            };
            let outcome = ctx.provisioner.prepare(phost, &request).await?;
            progress = outcome
                .value
                .current_step
                .clone()
                .map(|s| format!("running clean step {s}"));
            call_result(&outcome)
        }
        Operation::Provision => {
            ctx.claim_slot(&host.namespaced_name(), state);
            let request = provision_request(host, ctx).await?;
            let outcome = ctx.provisioner.provision(phost, &request).await?;
            progress = outcome
                .value
                .current_step
                .clone()
                .map(|s| format!("running deploy step {s}"));
            call_result(&outcome)
        }
        Operation::Deprovision => {
            ctx.claim_slot(&host.namespaced_name(), state);
            let outcome = ctx.provisioner.deprovision(phost).await?;
            progress = outcome
                .value
                .current_step
                .clone()
                .map(|s| format!("running clean step {s}"));
            call_result(&outcome)
        }
        Operation::Adopt => {
            let request = provision_request(host, ctx).await?;
            call_result(&ctx.provisioner.adopt(phost, &request).await?)
        }
        Operation::PowerOn => {
            let outcome = ctx.provisioner.power_on(phost).await?;
            if outcome.changed {
                ctx.metrics.power_change(&host_labels(host), true);
            }
            call_result(&outcome)
        }
        Operation::PowerOff { hard } => {
            let mode = if hard {
                PowerMode::Hard
            } else {
                PowerMode::Soft
            };
            let outcome = ctx.provisioner.power_off(phost, mode).await?;
            if outcome.changed {
                ctx.metrics.power_change(&host_labels(host), false);
            }
            call_result(&outcome)
        }
        Operation::Detach => call_result(&ctx.provisioner.detach(phost).await?),
        Operation::Delete => {
            let outcome = ctx.provisioner.delete(phost).await?;
            if outcome.is_done() {
                return finish_delete(host, ctx).await;
            }
            call_result(&outcome)
        }
    };
    let update = state_machine::after(host, op, &result);
    if let Some(next) = update.state {
        ctx.claim_slot(&host.namespaced_name(), next);
    }
    if let Some(details) = &hardware {
        write_hardware_data(host, ctx, details).await?;
    }
    save(host, ctx, update, hardware, progress).await
}

/// Provisioner input for provision/adopt: image, hints and the config-drive data.
async fn provision_request<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
) -> Result<ProvisionRequest, ReconcileError> {
    let name = host.namespaced_name();
    let ns = host.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let read = |reference: Option<&k8s_openapi::api::core::v1::SecretReference>,
                keys: &'static [&'static str]| {
        let secrets = secrets.clone();
        let name = name.clone();
        let secret_name = reference.and_then(|r| r.name.clone());
        async move {
            let Some(secret_name) = secret_name else {
                return Ok(None);
            };
            let secret = secrets
                .get_opt(&secret_name)
                .await
                .map_err(kube_err(&name))?;
            Ok::<_, ReconcileError>(
                secret
                    .and_then(|s| s.data)
                    .and_then(|data| keys.iter().find_map(|k| data.get(*k).map(|v| v.0.clone()))),
            )
        }
    };
    let mut user_data = read(host.spec.user_data.as_ref(), &["userData", "value"]).await?;
    // A Secret that is named but missing (or lacks the key) is counted, as upstream does.
    let note_missing = |reference: Option<&k8s_openapi::api::core::v1::SecretReference>,
                        found: &Option<Vec<u8>>,
                        data_type: &str| {
        if reference.and_then(|r| r.name.as_ref()).is_some() && found.is_none() {
            ctx.metrics.config_data_error(data_type);
        }
    };
    note_missing(host.spec.user_data.as_ref(), &user_data, "userData");
    if user_data.is_none() {
        user_data = host
            .spec
            .inline_user_data
            .as_ref()
            .map(|d| d.expose().as_bytes().to_vec());
    }
    let network_data = read(host.spec.network_data.as_ref(), &["networkData", "value"]).await?;
    let meta_data = read(host.spec.meta_data.as_ref(), &["metaData", "value"]).await?;
    note_missing(
        host.spec.network_data.as_ref(),
        &network_data,
        "networkData",
    );
    note_missing(host.spec.meta_data.as_ref(), &meta_data, "metaData");
    Ok(ProvisionRequest {
        image: host.spec.image.as_ref().map(mapping::image),
        custom_deploy: host.spec.custom_deploy.as_ref().map(|c| c.method.clone()),
        root_device_hints: host
            .spec
            .root_device_hints
            .as_ref()
            .map(mapping::root_device_hints),
        instance_uuid: host.metadata.uid.clone().unwrap_or_default(),
        user_data,
        network_data,
        meta_data,
        hardware: None,
    })
}

/// Reads the BMC Secret, labels it and makes the host its owner so that a change to it
/// wakes the host up.
async fn load_credentials<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
) -> Result<(Credentials, CredentialsCheck, Option<String>), ReconcileError> {
    let name = host.namespaced_name();
    let empty = Credentials {
        username: String::new(),
        password: SecretString::default(),
    };
    let Some(bmc) = host.spec.bmc.as_ref() else {
        return Ok((
            empty,
            CredentialsCheck::Invalid("spec.bmc is missing".into()),
            None,
        ));
    };
    if bmc.credentials_name.is_empty() {
        return Ok((empty, CredentialsCheck::Invalid("spec.bmc.credentialsName is empty: name the Secret holding the BMC username and password".into()), None));
    }
    let ns = host.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(secret) = secrets
        .get_opt(&bmc.credentials_name)
        .await
        .map_err(kube_err(&name))?
    else {
        tracing::info!(secret = %bmc.credentials_name, "BMC credentials Secret not found yet");
        return Ok((
            empty,
            CredentialsCheck::Missing(format!(
                "BMC credentials Secret {ns}/{} not found: create it with keys username and password",
                bmc.credentials_name
            )),
            None,
        ));
    };
    ensure_secret_owned(host, ctx, &secret).await?;
    let data = secret.data.clone().unwrap_or_default();
    let field = |key: &str| {
        data.get(key).map(|v| {
            String::from_utf8_lossy(&v.0)
                .trim_end_matches(['\r', '\n'])
                .to_owned()
        })
    };
    let username = field("username").unwrap_or_default();
    let password = field("password").unwrap_or_default();
    let version = secret.metadata.resource_version.clone();
    let fake = bmc.address.starts_with("fake://");
    if !fake && (username.is_empty() || password.is_empty()) {
        let missing = if username.is_empty() {
            "username"
        } else {
            "password"
        };
        return Ok((
            empty,
            CredentialsCheck::Invalid(format!(
                "BMC credentials Secret {ns}/{} has no {missing} key (or it is empty)",
                bmc.credentials_name
            )),
            version,
        ));
    }
    Ok((
        Credentials {
            username,
            password: SecretString::new(password),
        },
        CredentialsCheck::Valid,
        version,
    ))
}

async fn ensure_secret_owned<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
    secret: &Secret,
) -> Result<(), ReconcileError> {
    let labelled = secret
        .labels()
        .get(SECRET_LABEL.0)
        .is_some_and(|v| v == SECRET_LABEL.1);
    let uid = host.metadata.uid.clone().unwrap_or_default();
    let owned = secret.owner_references().iter().any(|o| o.uid == uid);
    if labelled && owned {
        return Ok(());
    }
    let mut owners = secret.owner_references().to_vec();
    if !owned {
        owners.push(OwnerReference {
            api_version: "metal3.io/v1alpha1".into(),
            kind: "BareMetalHost".into(),
            name: host.name_any(),
            uid,
            controller: Some(false),
            block_owner_deletion: None,
        });
    }
    let secrets: Api<Secret> =
        Api::namespaced(ctx.client.clone(), &host.namespace().unwrap_or_default());
    let patch = json!({"metadata": {"labels": {SECRET_LABEL.0: SECRET_LABEL.1}, "ownerReferences": owners}});
    secrets
        .patch(
            &secret.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(kube_err(&host.namespaced_name()))?;
    Ok(())
}

async fn write_hardware_data<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
    details: &crate::api::HardwareDetails,
) -> Result<(), ReconcileError> {
    let ns = host.namespace().unwrap_or_default();
    let api: Api<HardwareData> = Api::namespaced(ctx.client.clone(), &ns);
    let mut data = HardwareData::new(
        &host.name_any(),
        HardwareDataSpec {
            hardware: Some(details.clone()),
        },
    );
    data.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "metal3.io/v1alpha1".into(),
        kind: "BareMetalHost".into(),
        name: host.name_any(),
        uid: host.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    api.patch(
        &host.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&data),
    )
    .await
    .map_err(kube_err(&host.namespaced_name()))?;
    Ok(())
}

async fn finish_delete<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
) -> Result<Action, ReconcileError> {
    let name = host.namespaced_name();
    let ns = host.namespace().unwrap_or_default();
    ctx.claim_slot(&name, State::Deleting);
    ctx.metrics.forget_host(&host_labels(host));
    publish(
        host,
        ctx,
        "Deleted",
        "host removed from the provisioner; releasing it",
        false,
    )
    .await;
    let hosts: Api<BareMetalHost> = Api::namespaced(ctx.client.clone(), &ns);
    let finalizers: Vec<String> = host
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    hosts
        .patch(
            &host.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await
        .map_err(kube_err(&name))?;
    Ok(Action::await_change())
}

async fn save<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
    update: Update,
    hardware: Option<crate::api::HardwareDetails>,
    progress: Option<String>,
) -> Result<Action, ReconcileError> {
    save_with(host, ctx, update, None, None, hardware, progress).await
}

/// Applies `update` to the status, recomputes conditions, saves it and publishes the
/// event. `credentials` = (Secret resourceVersion, they worked).
async fn save_with<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
    update: Update,
    provisioning_id: Option<String>,
    credentials: Option<(Option<String>, bool)>,
    hardware: Option<crate::api::HardwareDetails>,
    progress: Option<String>,
) -> Result<Action, ReconcileError> {
    let ns = host.namespace().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut status: BareMetalHostStatus = host.status.clone().unwrap_or_default();
    let before = status.clone();
    let old_state = status.provisioning.state;
    state_machine::apply(host, &mut status, &update, &now);
    if let Some(id) = provisioning_id.filter(|id| !id.is_empty()) {
        status.provisioning.id = id;
    }
    if let Some((version, worked)) = credentials {
        let reference =
            host.spec
                .bmc
                .as_ref()
                .map(|b| k8s_openapi::api::core::v1::SecretReference {
                    name: Some(b.credentials_name.clone()),
                    namespace: Some(ns.clone()),
                });
        let record = crate::api::CredentialsStatus {
            credentials: reference,
            credentials_version: version,
        };
        status.tried_credentials = Some(record.clone());
        if worked {
            status.good_credentials = Some(record);
        }
    }
    if let Some(details) = hardware {
        status.hardware = Some(details);
    }
    status.conditions =
        conditions::compute(&status, host.metadata.generation, progress.as_deref(), &now);
    let changed = status != before;
    if changed {
        status.last_updated = Some(now.clone());
        patch_status(host, ctx, &status).await?;
    }
    if status.provisioning.state != old_state {
        tracing::info!(from = %old_state, to = %status.provisioning.state, "state changed");
    }
    record_metrics(host, ctx, &update, &before, &status, &now);
    if let Some((reason, message, warning)) = &update.event {
        publish(host, ctx, reason, message, *warning).await;
    }
    remove_annotations(host, ctx, &update).await?;
    Ok(match update.requeue {
        Requeue::Now => Action::requeue(Duration::from_millis(200)),
        Requeue::After(d) => Action::requeue(d),
        Requeue::Backoff => Action::requeue(backoff(status.error_count, ctx.settings.max_backoff)),
        Requeue::OnChange => Action::await_change(),
    })
}

/// Counts what a status update shows: a state change (and how long the state it
/// leaves lasted), a new error, a delay by the provisioning limit.
fn record_metrics<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
    update: &Update,
    before: &BareMetalHostStatus,
    after: &BareMetalHostStatus,
    now: &Time,
) {
    let labels = host_labels(host);
    let (old, new) = (before.provisioning.state, after.provisioning.state);
    if old != new {
        ctx.metrics.state_change(&old.to_string(), &new.to_string());
        if new == State::Unmanaged {
            ctx.metrics.count(metrics::Event::HostUnmanaged);
        }
        let history = before.operation_history.as_ref();
        let timed = history.and_then(|h| match old {
            State::Registering => Some((TimedOperation::Register, h.register.as_ref())),
            State::Inspecting => Some((TimedOperation::Inspect, h.inspect.as_ref())),
            State::Provisioning => Some((TimedOperation::Provision, h.provision.as_ref())),
            State::Deprovisioning => Some((TimedOperation::Deprovision, h.deprovision.as_ref())),
            _ => None,
        });
        if let Some((op, Some(metric))) = timed
            && let Some(start) = &metric.start
        {
            let seconds = now.0.duration_since(start.0).as_secs_f64();
            if seconds >= 0.0 {
                ctx.metrics.operation_duration(&labels, op, seconds);
            }
        }
    }
    if matches!(&update.event, Some((reason, _, _)) if reason == "DeprovisioningSkipped") {
        ctx.metrics
            .count(metrics::Event::DeleteWithoutDeprovisioning);
    }
    if let (ErrorChange::Set(..), Some((reason, _, true))) = (&update.error, &update.event) {
        ctx.metrics.host_error(reason);
    }
    if after.operational_status == crate::api::OperationalStatus::Delayed
        && before.operational_status != crate::api::OperationalStatus::Delayed
    {
        ctx.metrics.delayed(&labels, new == State::Deprovisioning);
    }
}

/// Writes the whole status (server-side apply on the status subresource).
async fn patch_status<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
    status: &BareMetalHostStatus,
) -> Result<(), ReconcileError> {
    let hosts: Api<BareMetalHost> =
        Api::namespaced(ctx.client.clone(), &host.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "status": status,
    });
    hosts
        .patch_status(
            &host.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(kube_err(&host.namespaced_name()))?;
    Ok(())
}

/// Upstream's two annotations that bring status in from outside: the status saved
/// before a move between clusters, and hardware details inspected by other means.
/// Each is consumed (removed) once looked at. Returns an action when it changed
/// something, so the reconcile starts again from the new state.
async fn apply_status_annotations<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
) -> Result<Option<Action>, ReconcileError> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    if let Some(raw) = annotations(host).get(STATUS_ANNOTATION) {
        let never_saved = host
            .status
            .as_ref()
            .and_then(|s| s.last_updated.as_ref())
            .is_none();
        if never_saved {
            match serde_json::from_str::<BareMetalHostStatus>(raw) {
                Ok(mut restored) => {
                    // The HardwareData object, when there is one, wins for the hardware.
                    let data: Api<HardwareData> =
                        Api::namespaced(ctx.client.clone(), &host.namespace().unwrap_or_default());
                    if let Some(hardware) = data
                        .get_opt(&host.name_any())
                        .await
                        .map_err(kube_err(&host.namespaced_name()))?
                        .and_then(|d| d.spec.hardware)
                    {
                        restored.hardware = Some(hardware);
                    }
                    restored.last_updated = Some(now.clone());
                    patch_status(host, ctx, &restored).await?;
                    let message =
                        format!("status restored from the {STATUS_ANNOTATION} annotation");
                    publish(host, ctx, "StatusRestored", &message, false).await;
                }
                Err(e) => {
                    let message = format!(
                        "annotation {STATUS_ANNOTATION} is not a BareMetalHost status ({e}); ignored and removed"
                    );
                    publish(host, ctx, "InvalidAnnotation", &message, true).await;
                }
            }
        }
        remove_annotation_keys(host, ctx, &[STATUS_ANNOTATION]).await?;
        return Ok(Some(Action::requeue(Duration::ZERO)));
    }
    if let Some(raw) = annotations(host).get(HARDWARE_DETAILS_ANNOTATION) {
        let status = host.status.clone().unwrap_or_default();
        if status.hardware.is_none() || host.inspection_disabled() {
            match serde_json::from_str::<crate::api::HardwareDetails>(raw) {
                Ok(details) => {
                    write_hardware_data(host, ctx, &details).await?;
                    let mut status = status;
                    status.hardware = Some(details);
                    status.last_updated = Some(now);
                    patch_status(host, ctx, &status).await?;
                    let message = format!(
                        "hardware details taken from the {HARDWARE_DETAILS_ANNOTATION} annotation"
                    );
                    publish(host, ctx, "UpdateHardwareDetails", &message, false).await;
                }
                Err(e) => {
                    let message = format!(
                        "annotation {HARDWARE_DETAILS_ANNOTATION} is not hardware details ({e}); ignored and removed"
                    );
                    publish(host, ctx, "InvalidAnnotation", &message, true).await;
                }
            }
        } else {
            let message = format!(
                "annotation {HARDWARE_DETAILS_ANNOTATION} ignored: the host has inspection data and inspection is not disabled"
            );
            publish(host, ctx, "RemoveAnnotation", &message, false).await;
        }
        remove_annotation_keys(host, ctx, &[HARDWARE_DETAILS_ANNOTATION]).await?;
        return Ok(Some(Action::requeue(Duration::ZERO)));
    }
    Ok(None)
}

async fn remove_annotations<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
    update: &Update,
) -> Result<(), ReconcileError> {
    let mut remove = Vec::new();
    if update.clear_reboot && annotations(host).contains_key(REBOOT_ANNOTATION_PREFIX) {
        remove.push(REBOOT_ANNOTATION_PREFIX);
    }
    if update.clear_inspect_annotation
        && annotations(host).contains_key(crate::api::host::INSPECT_ANNOTATION)
    {
        remove.push(crate::api::host::INSPECT_ANNOTATION);
    }
    remove_annotation_keys(host, ctx, &remove).await
}

/// Removes the given annotation keys (a merge patch with nulls).
async fn remove_annotation_keys<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
    remove: &[&str],
) -> Result<(), ReconcileError> {
    if remove.is_empty() {
        return Ok(());
    }
    let nulls: serde_json::Map<String, serde_json::Value> = remove
        .iter()
        .map(|k| ((*k).to_owned(), serde_json::Value::Null))
        .collect();
    let hosts: Api<BareMetalHost> =
        Api::namespaced(ctx.client.clone(), &host.namespace().unwrap_or_default());
    hosts
        .patch(
            &host.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": nulls}})),
        )
        .await
        .map_err(kube_err(&host.namespaced_name()))?;
    Ok(())
}

async fn publish<P: Provisioner>(
    host: &BareMetalHost,
    ctx: &Context<P>,
    reason: &str,
    message: &str,
    warning: bool,
) {
    let reference: ObjectReference = host.object_ref(&());
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_owned(),
        note: Some(message.chars().take(1000).collect()),
        action: reason.to_owned(),
        secondary: host.spec.consumer_ref.clone(),
    };
    if let Err(e) = ctx.recorder.publish(&event, &reference).await {
        tracing::debug!(error = %e, reason, "could not publish event");
    }
}
