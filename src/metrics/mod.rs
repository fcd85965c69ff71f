//! Prometheus metrics with upstream baremetal-operator's `metal3_*` names, labels and
//! histogram buckets, so existing dashboards and alerts keep working. Served as
//! OpenMetrics text at `/metrics` on the health address. bmo's own series are named
//! `bmo_*`; those of the running parts are registered by `bmo run`
//! (`activity::metrics`).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

/// Content type of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upstream's buckets for the long operations (inspect, provision, deprovision), seconds.
const LONG_OPERATION_BUCKETS: [f64; 6] = [30.0, 90.0, 180.0, 360.0, 720.0, 1440.0];
/// Prometheus' default buckets, which upstream uses for registration.
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostLabels {
    pub namespace: String,
    pub host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PowerLabels {
    namespace: String,
    host: String,
    on_off: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    error_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateChangeLabels {
    prev_state: String,
    new_state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DataTypeLabels {
    host_data_type: String,
}

/// The long-running operations whose durations are recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimedOperation {
    Register,
    Inspect,
    Provision,
    Deprovision,
}

/// Simple counters without labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    ReconcileError,
    CredentialsMissing,
    CredentialsInvalid,
    CredentialsUnhandledError,
    CredentialsUpdated,
    CredentialsNoManagementAccess,
    HostRegistrationRequired,
    HostUnmanaged,
    DeleteWithoutDeprovisioning,
    ProvisionerNotReady,
    DeleteDelayedForDetached,
}

impl Event {
    const ALL: [Self; 11] = [
        Self::ReconcileError,
        Self::CredentialsMissing,
        Self::CredentialsInvalid,
        Self::CredentialsUnhandledError,
        Self::CredentialsUpdated,
        Self::CredentialsNoManagementAccess,
        Self::HostRegistrationRequired,
        Self::HostUnmanaged,
        Self::DeleteWithoutDeprovisioning,
        Self::ProvisionerNotReady,
        Self::DeleteDelayedForDetached,
    ];

    /// The counter's upstream name (without `_total`) and help.
    fn name_and_help(self) -> (&'static str, &'static str) {
        match self {
            Self::ReconcileError => (
                "metal3_reconcile_error",
                "Number of reconcile loops that returned an error",
            ),
            Self::CredentialsMissing => (
                "metal3_credentials_missing",
                "Number of times a host's credentials are found to be missing",
            ),
            Self::CredentialsInvalid => (
                "metal3_credentials_invalid",
                "Number of times a host's credentials are found to be invalid",
            ),
            Self::CredentialsUnhandledError => (
                "metal3_credentials_unhandled_error",
                "Number of times getting a host's credentials fails in an unexpected way",
            ),
            Self::CredentialsUpdated => (
                "metal3_credentials_updated",
                "Number of times a host's credentials change",
            ),
            Self::CredentialsNoManagementAccess => (
                "metal3_credentials_no_management_access",
                "Number of times a host management interface is unavailable",
            ),
            Self::HostRegistrationRequired => (
                "metal3_host_registration_required",
                "Number of times a host is found to be unregistered",
            ),
            Self::HostUnmanaged => (
                "metal3_host_unmanaged",
                "Number of times a host is found to be unmanaged",
            ),
            Self::DeleteWithoutDeprovisioning => (
                "metal3_delete_without_deprovisioning",
                "Number of times a host is deleted despite deprovisioning failing",
            ),
            Self::ProvisionerNotReady => (
                "metal3_provisioner_not_ready",
                "Number of times a host is not provision ready",
            ),
            Self::DeleteDelayedForDetached => (
                "metal3_delete_delayed_for_detached",
                "Number of times a detached host's deletion is delayed",
            ),
        }
    }
}

type HistogramFamily = Family<HostLabels, Histogram, fn() -> Histogram>;

/// Every metric bmo exports. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct Metrics {
    registry: Registry,
    reconcile: Family<HostLabels, Counter>,
    host_error: Family<ErrorLabels, Counter>,
    power_change: Family<PowerLabels, Counter>,
    config_data_error: Family<DataTypeLabels, Counter>,
    delayed_provisioning: Family<HostLabels, Counter>,
    delayed_deprovisioning: Family<HostLabels, Counter>,
    state_change: Family<StateChangeLabels, Counter>,
    register_duration: HistogramFamily,
    inspect_duration: HistogramFamily,
    provision_duration: HistogramFamily,
    deprovision_duration: HistogramFamily,
    events: Vec<(Event, Counter)>,
    certificate: CertificateExpiry,
    /// UIDs of the hosts whose deletion is done ([`Metrics::forget_host`]), the
    /// latest [`FORGOTTEN_HOSTS`] of them.
    forgotten: std::sync::Mutex<std::collections::VecDeque<String>>,
}

/// How many deleted hosts' UIDs [`Metrics`] keeps to ignore their late wake-ups.
const FORGOTTEN_HOSTS: usize = 4096;

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// `bmo_metrics_certificate_expiry_timestamp_seconds`, once the secured endpoint has
/// its certificate (Unix seconds; 0 before). Clones share the value.
#[derive(Debug, Clone, Default)]
struct CertificateExpiry(Arc<AtomicI64>);

impl Collector for CertificateExpiry {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let not_after = self.0.load(Ordering::Relaxed);
        if not_after == 0 {
            return Ok(());
        }
        let gauge = ConstGauge::new(not_after);
        let metric = encoder.encode_descriptor(
            "bmo_metrics_certificate_expiry_timestamp_seconds",
            "When the secured metrics endpoint's certificate expires, Unix seconds",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)
    }
}

fn default_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

fn long_histogram() -> Histogram {
    Histogram::new(LONG_OPERATION_BUCKETS)
}

/// Registers `metric` under `name` and gives it back for recording.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// A counter family registered under `name`.
fn counters<L>(registry: &mut Registry, name: &str, help: &str) -> Family<L, Counter>
where
    Family<L, Counter>: Metric + Clone + Default,
{
    registered(registry, name, help, Family::default())
}

/// A per-host duration histogram family registered under `name`, with the buckets
/// `histogram` makes.
fn durations(
    registry: &mut Registry,
    name: &str,
    help: &str,
    histogram: fn() -> Histogram,
) -> HistogramFamily {
    registered(
        registry,
        name,
        help,
        HistogramFamily::new_with_constructor(histogram),
    )
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Self::with(|_| {})
    }

    /// The metrics, with what `more` registers too (series kept elsewhere, such as
    /// controller-runtime's, which the controllers' runtime counts, and the running
    /// parts' `bmo_*`).
    pub fn with(more: impl FnOnce(&mut Registry)) -> Self {
        let mut registry = Registry::default();
        more(&mut registry);
        let certificate = CertificateExpiry::default();
        registry.register_collector(Box::new(certificate.clone()));
        // Registered in upstream's order. prometheus-client appends `_total` to
        // counter names.
        Self {
            reconcile: counters(
                &mut registry,
                "metal3_reconcile",
                "Number of reconcile loops executed",
            ),
            host_error: counters(
                &mut registry,
                "metal3_host_error",
                "Number of times a host got into an error state",
            ),
            power_change: counters(
                &mut registry,
                "metal3_operation_power_change",
                "Number of times a host has been powered on or off",
            ),
            config_data_error: counters(
                &mut registry,
                "metal3_host_config_data_error",
                "Number of times the operator has failed to retrieve host configuration data",
            ),
            delayed_provisioning: counters(
                &mut registry,
                "metal3_delayed__provisioning",
                "Number of times provisioning was delayed by the provisioning limit",
            ),
            delayed_deprovisioning: counters(
                &mut registry,
                "metal3_delayed__deprovisioning",
                "Number of times deprovisioning was delayed by the provisioning limit",
            ),
            state_change: counters(
                &mut registry,
                "metal3_provisioning_state_change",
                "Number of times a state transition has occurred",
            ),
            register_duration: durations(
                &mut registry,
                "metal3_operation_register_duration_seconds",
                "Length of time per registration per host",
                default_histogram,
            ),
            inspect_duration: durations(
                &mut registry,
                "metal3_operation_inspect_duration_seconds",
                "Length of time per hardware inspection per host",
                long_histogram,
            ),
            provision_duration: durations(
                &mut registry,
                "metal3_operation_provision_duration_seconds",
                "Length of time per provisioning operation per host",
                long_histogram,
            ),
            deprovision_duration: durations(
                &mut registry,
                "metal3_operation_deprovision_duration_seconds",
                "Length of time per deprovisioning operation per host",
                long_histogram,
            ),
            events: Event::ALL
                .into_iter()
                .map(|event| {
                    let (name, help) = event.name_and_help();
                    let counter = registered(&mut registry, name, help, Counter::default());
                    (event, counter)
                })
                .collect(),
            forgotten: std::sync::Mutex::default(),
            certificate,
            registry,
        }
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// When the secured `/metrics` endpoint's certificate expires, Unix seconds.
    pub fn set_certificate_not_after(&self, unix: i64) {
        self.certificate.0.store(unix, Ordering::Relaxed);
    }

    pub fn count(&self, event: Event) {
        if let Some((_, counter)) = self.events.iter().find(|(e, _)| *e == event) {
            counter.inc();
        }
    }

    /// Counts a reconcile of `host` (`uid`). A host being deleted is counted only
    /// while its series exists, and a host whose deletion is done
    /// ([`Self::forget_host`]) not at all: a last wake-up (the change to its Secret
    /// that the deletion itself makes) must not bring the series back.
    pub fn reconcile(&self, host: &HostLabels, uid: &str, being_deleted: bool) {
        let forgotten = self
            .forgotten
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|f| f == uid);
        if forgotten && !uid.is_empty() {
            return;
        }
        if being_deleted {
            if let Some(counter) = self.reconcile.get(host) {
                counter.inc();
            }
            return;
        }
        self.reconcile.get_or_create(host).inc();
    }

    /// `error_type` is the reason of the event published with the error.
    pub fn host_error(&self, error_type: &str) {
        self.host_error
            .get_or_create(&ErrorLabels {
                error_type: error_type.to_owned(),
            })
            .inc();
    }

    pub fn power_change(&self, host: &HostLabels, on: bool) {
        self.power_change
            .get_or_create(&PowerLabels {
                namespace: host.namespace.clone(),
                host: host.host.clone(),
                on_off: if on { "on" } else { "off" }.to_owned(),
            })
            .inc();
    }

    /// `data_type` is the spec field whose Secret could not be read, e.g. `userData`.
    pub fn config_data_error(&self, data_type: &str) {
        self.config_data_error
            .get_or_create(&DataTypeLabels {
                host_data_type: data_type.to_owned(),
            })
            .inc();
    }

    pub fn delayed(&self, host: &HostLabels, deprovisioning: bool) {
        let family = if deprovisioning {
            &self.delayed_deprovisioning
        } else {
            &self.delayed_provisioning
        };
        family.get_or_create(host).inc();
    }

    pub fn state_change(&self, prev: &str, new: &str) {
        self.state_change
            .get_or_create(&StateChangeLabels {
                prev_state: prev.to_owned(),
                new_state: new.to_owned(),
            })
            .inc();
    }

    pub fn operation_duration(&self, host: &HostLabels, op: TimedOperation, seconds: f64) {
        let family = match op {
            TimedOperation::Register => &self.register_duration,
            TimedOperation::Inspect => &self.inspect_duration,
            TimedOperation::Provision => &self.provision_duration,
            TimedOperation::Deprovision => &self.deprovision_duration,
        };
        family.get_or_create(host).observe(seconds);
    }

    /// Drops the per-host series of a deleted host (`uid`), so they do not pile up.
    pub fn forget_host(&self, host: &HostLabels, uid: &str) {
        {
            let mut forgotten = self
                .forgotten
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !uid.is_empty() && !forgotten.iter().any(|f| f == uid) {
                if forgotten.len() >= FORGOTTEN_HOSTS {
                    forgotten.pop_front();
                }
                forgotten.push_back(uid.to_owned());
            }
        }
        self.reconcile.remove(host);
        self.delayed_provisioning.remove(host);
        self.delayed_deprovisioning.remove(host);
        for family in [
            &self.register_duration,
            &self.inspect_duration,
            &self.provision_duration,
            &self.deprovision_duration,
        ] {
            family.remove(host);
        }
        for on_off in ["on", "off"] {
            self.power_change.remove(&PowerLabels {
                namespace: host.namespace.clone(),
                host: host.host.clone(),
                on_off: on_off.to_owned(),
            });
        }
    }
}

#[cfg(test)]
mod tests;
