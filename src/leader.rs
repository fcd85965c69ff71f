//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several bmo
//! replicas only one reconciles hosts and answers DHCP at a time.
//!
//! The rules are client-go's: a candidate takes the Lease when it has no holder, or
//! when its record has not changed for `leaseDurationSeconds` as measured by the
//! candidate's own clock (so clock skew between nodes does not matter); the holder
//! renews it every retry period and gives up leadership when it could not renew for
//! the renew deadline. Updates carry the `resourceVersion` they read, so two
//! candidates can never both win.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

/// Upstream's leader election ID, used as the Lease name.
pub const LEASE_NAME: &str = "baremetal-operator";

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("Lease {namespace}/{name}: Kubernetes API call failed: {source}")]
    Kube {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Timings, as upstream's `LEASE_DURATION_SECONDS`, `RENEW_DEADLINE_SECONDS` and
/// `RETRY_PERIOD_SECONDS`.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// One candidate for leadership.
pub struct Elector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timings: Timings,
    /// The last record seen from another holder and when it was first seen.
    observed: Option<(String, Instant)>,
}

/// What one attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the Lease (newly or still).
    Leading,
    /// Someone else holds it and it has not expired.
    Follower { holder: String },
}

impl Elector {
    pub fn new(client: kube::Client, namespace: &str, identity: String, timings: Timings) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: LEASE_NAME.to_owned(),
            identity,
            timings,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn kube_err(&self) -> impl FnOnce(kube::Error) -> LeaderError + '_ {
        move |source| LeaderError::Kube {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    /// The Lease as it is now; `None` when nobody created it yet.
    async fn current_lease(&self) -> Result<Option<Lease>, LeaderError> {
        self.api.get_opt(&self.name).await.map_err(self.kube_err())
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.timings.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// Tries once to take or renew the Lease. A lost update race counts as
    /// "someone else holds it".
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, LeaderError> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let Some(mut lease) = self.current_lease().await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.duration_secs()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Leading),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Follower {
                    holder: "(another candidate, just now)".into(),
                }),
                Err(e) => Err(self.kube_err()(e)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        if !ours && !holder.is_empty() {
            // Expired only if its record stayed the same for a whole lease duration.
            let version = lease.metadata.resource_version.clone().unwrap_or_default();
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs)
                .unwrap_or(self.timings.lease_duration);
            match &self.observed {
                Some((seen, since)) if *seen == version => {
                    if since.elapsed() < duration {
                        return Ok(Attempt::Follower { holder });
                    }
                }
                _ => {
                    self.observed = Some((version, Instant::now()));
                    return Ok(Attempt::Follower { holder });
                }
            }
            tracing::info!(lease = %self.lease(), previous = %holder, "Lease expired; taking it over");
        }
        let mut new_spec = spec.clone();
        new_spec.holder_identity = Some(self.identity.clone());
        new_spec.lease_duration_seconds = Some(self.duration_secs());
        new_spec.renew_time = Some(now.clone());
        if !ours {
            new_spec.acquire_time = Some(now);
            new_spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        lease.spec = Some(new_spec);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                self.observed = None;
                Ok(Attempt::Leading)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Attempt::Follower { holder }),
            Err(e) => Err(self.kube_err()(e)),
        }
    }

    /// Waits until this candidate leads. Errors are logged and retried: the API
    /// server being briefly away is no reason to stop trying.
    pub async fn acquire(&mut self) {
        let mut last_holder = String::new();
        loop {
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Leading) => {
                    tracing::info!(lease = %self.lease(), identity = %self.identity, "became the leader");
                    return;
                }
                Ok(Attempt::Follower { holder }) => {
                    if holder != last_holder {
                        tracing::info!(lease = %self.lease(), %holder, "another instance leads; waiting");
                        last_holder = holder;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot acquire the leader Lease; retrying"),
            }
            tokio::time::sleep(self.timings.retry_period).await;
        }
    }

    /// Renews the Lease every retry period; returns when leadership is lost (not
    /// renewed for the renew deadline, or taken by someone else).
    pub async fn keep_leading(&mut self) {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.timings.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Leading) => renewed = Instant::now(),
                Ok(Attempt::Follower { holder }) => {
                    tracing::error!(lease = %self.lease(), %holder, "leadership lost to another instance");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "cannot renew the leader Lease"),
            }
            if renewed.elapsed() >= self.timings.renew_deadline {
                tracing::error!(lease = %self.lease(), deadline = ?self.timings.renew_deadline, "Lease not renewed within the deadline; leadership lost");
                return;
            }
        }
    }

    /// Gives the Lease up at shutdown, so a standby takes over at once instead of
    /// after the lease duration.
    pub async fn release(&self) -> Result<(), LeaderError> {
        let Some(mut lease) = self.current_lease().await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map_err(self.kube_err())?;
        Ok(())
    }
}

/// Leader election settings, flattened into [`crate::config::Config`].
#[derive(Debug, Clone, clap::Args)]
pub struct LeaderSettings {
    /// Run only while holding the `baremetal-operator` Lease, so that one of several
    /// replicas reconciles hosts and serves the network boot at a time.
    #[arg(long = "enable-leader-election", env = "BMO_LEADER_ELECTION")]
    pub leader_election: bool,

    /// Namespace of the leader Lease (defaults to `WATCH_NAMESPACE`).
    #[arg(long = "leader-election-namespace", env = "POD_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// Seconds a leader Lease is valid without renewal.
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub lease_duration_seconds: u64,

    /// Seconds the leader keeps trying to renew before it gives up leadership.
    #[arg(long, env = "RENEW_DEADLINE_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub renew_deadline_seconds: u64,

    /// Seconds between attempts to acquire or renew the Lease.
    #[arg(long, env = "RETRY_PERIOD_SECONDS", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub retry_period_seconds: u64,
}

/// Leader election settings that cannot work together; each names the variables to fix.
#[derive(Debug, thiserror::Error)]
pub enum LeaderSettingsError {
    #[error(
        "leader election needs a namespace for its Lease: set POD_NAMESPACE (or --leader-election-namespace) or WATCH_NAMESPACE"
    )]
    LeaseNamespace,
    #[error(
        "leader election timings must satisfy RETRY_PERIOD_SECONDS ({retry}) < RENEW_DEADLINE_SECONDS ({renew}) < LEASE_DURATION_SECONDS ({lease})"
    )]
    LeaseTimings { lease: u64, renew: u64, retry: u64 },
}

impl LeaderSettings {
    /// The Lease namespace (else `watch_namespace`) and timings, when leader election
    /// is on.
    pub fn election(
        &self,
        watch_namespace: Option<&str>,
    ) -> Result<Option<(String, Timings)>, LeaderSettingsError> {
        if !self.leader_election {
            return Ok(None);
        }
        let namespace = [self.leader_election_namespace.as_deref(), watch_namespace]
            .into_iter()
            .flatten()
            .find(|ns| !ns.is_empty())
            .map(str::to_owned)
            .ok_or(LeaderSettingsError::LeaseNamespace)?;
        let timings = Timings {
            lease_duration: Duration::from_secs(self.lease_duration_seconds),
            renew_deadline: Duration::from_secs(self.renew_deadline_seconds),
            retry_period: Duration::from_secs(self.retry_period_seconds),
        };
        if timings.renew_deadline >= timings.lease_duration
            || timings.retry_period >= timings.renew_deadline
        {
            return Err(LeaderSettingsError::LeaseTimings {
                lease: self.lease_duration_seconds,
                renew: self.renew_deadline_seconds,
                retry: self.retry_period_seconds,
            });
        }
        Ok(Some((namespace, timings)))
    }
}

/// `pod_name` (`POD_NAME`, else the host name) plus a random suffix: unique per
/// process, and readable in `kubectl get lease`.
pub fn identity(pod_name: Option<&str>) -> String {
    use std::hash::{BuildHasher, Hasher};
    let base = pod_name
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "bmo".into());
    let random = std::hash::RandomState::new().build_hasher().finish();
    format!("{base}_{random:016x}")
}
