//! The BareMetalSwitch controller: turns the switches of each namespace, with their
//! credentials Secrets, into the configuration Ironic's networking service reads
//! (upstream's switch configuration Secret, an INI file with one section per switch,
//! and a second Secret with the switches' SSH keys), and marks each switch `Valid`.
//!
//! The unit of work is a namespace: every switch change (also a deletion) writes that
//! namespace's whole file again. `render` decides (pure), `store` reads and writes,
//! `run` watches. Off unless IRONIC_NETWORKING_ENABLED, as upstream.

pub mod attachments;
mod render;
mod run;
pub mod store;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::api::network::SWITCH_VALID;
use crate::api::{BareMetalSwitch, BareMetalSwitchStatus};
use crate::controller::runtime::conditions;
use crate::controller::runtime::store::StoreError;
pub use render::{CONFIG_KEY, CredentialError, Rendered, credentials_ref, render};
pub use run::run;
pub use store::KubeSwitchStore;

/// Pause before a switch whose credentials Secret is missing is looked at again
/// (upstream's); a Secret that appears meanwhile wakes it at once.
pub const MISSING_SECRET_RETRY: Duration = Duration::from_secs(10);

/// `Valid` reasons (upstream's).
const RECONCILED: &str = "Reconciled";
const CREDENTIAL_ERROR: &str = "CredentialError";

/// Settings of the BareMetalSwitch controller, under upstream's variable names.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SwitchSettings {
    /// Runs the BareMetalSwitch controller, which writes the switch configuration
    /// for Ironic's networking service.
    #[arg(long = "ironic-networking", env = "IRONIC_NETWORKING_ENABLED")]
    pub networking_enabled: bool,

    /// Secret (in each switch's namespace) that receives the switch configuration
    /// file, key `switch-configs.conf`; needed with --ironic-networking.
    #[arg(long = "switch-configs-secret", env = "IRONIC_SWITCH_CONFIGS_SECRET")]
    pub configs_secret: Option<String>,

    /// Secret (in each switch's namespace) that receives the switches' SSH private
    /// keys, one file per switch; needed with --ironic-networking.
    #[arg(
        long = "switch-credentials-secret",
        env = "IRONIC_SWITCH_CREDENTIALS_SECRET"
    )]
    pub credentials_secret: Option<String>,

    /// Where Ironic's networking service mounts the credentials Secret; the
    /// configuration's `key_file` paths start with it. Needed with
    /// --ironic-networking.
    #[arg(
        long = "switch-credentials-path",
        env = "IRONIC_SWITCH_CREDENTIALS_PATH"
    )]
    pub credentials_path: Option<String>,
}

/// The settings a running controller needs, all present.
#[derive(Debug, Clone)]
pub struct SwitchTargets {
    pub configs_secret: String,
    pub credentials_secret: String,
    pub credentials_path: String,
}

/// IRONIC_NETWORKING_ENABLED without a setting it needs.
#[derive(Debug, thiserror::Error)]
#[error("IRONIC_NETWORKING_ENABLED is set but {variable} ({flag}) is not: {fix}")]
pub struct SwitchSettingsError {
    variable: &'static str,
    flag: &'static str,
    fix: &'static str,
}

impl SwitchSettings {
    /// What the controller writes to, when it is on.
    pub fn targets(&self) -> Result<Option<SwitchTargets>, SwitchSettingsError> {
        if !self.networking_enabled {
            return Ok(None);
        }
        let given = |value: &Option<String>, variable, flag, fix| {
            value
                .clone()
                .filter(|v| !v.is_empty())
                .ok_or(SwitchSettingsError {
                    variable,
                    flag,
                    fix,
                })
        };
        Ok(Some(SwitchTargets {
            configs_secret: given(
                &self.configs_secret,
                "IRONIC_SWITCH_CONFIGS_SECRET",
                "--switch-configs-secret",
                "name the Secret that receives the switch configuration",
            )?,
            credentials_secret: given(
                &self.credentials_secret,
                "IRONIC_SWITCH_CREDENTIALS_SECRET",
                "--switch-credentials-secret",
                "name the Secret that receives the switches' SSH keys",
            )?,
            credentials_path: given(
                &self.credentials_path,
                "IRONIC_SWITCH_CREDENTIALS_PATH",
                "--switch-credentials-path",
                "give the directory where Ironic's networking service mounts that Secret",
            )?,
        }))
    }
}

/// Writes namespace `namespace`'s configuration from `switches` (all of that
/// namespace) and each switch's `Valid` condition. Returns whether a switch waits for
/// its credentials Secret to appear.
pub async fn reconcile_namespace(
    store: &KubeSwitchStore,
    targets: &SwitchTargets,
    namespace: &str,
    switches: &[&BareMetalSwitch],
) -> Result<bool, StoreError> {
    let mut credentials = BTreeMap::new();
    for switch in switches {
        let data = match credentials_ref(switch) {
            Some((ns, name)) => store.secret_data(&ns, &name).await?,
            None => None,
        };
        credentials.insert(switch.name_any(), data);
    }
    let rendered = render(switches, &credentials, &targets.credentials_path);
    store
        .apply_secret_data(
            namespace,
            &targets.configs_secret,
            BTreeMap::from([(CONFIG_KEY.to_owned(), rendered.config.into_bytes())]),
        )
        .await?;
    store
        .apply_secret_data(namespace, &targets.credentials_secret, rendered.key_files)
        .await?;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut waiting = false;
    for switch in switches
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
    {
        let error = rendered.errors.get(&switch.name_any());
        waiting |= error.is_some_and(CredentialError::is_missing_secret);
        let old = switch.status.clone().unwrap_or_default();
        let mut status = BareMetalSwitchStatus {
            conditions: old.conditions.clone(),
        };
        let (ok, reason, message) = match error {
            Some(e) => (false, CREDENTIAL_ERROR, e.to_string()),
            None => (
                true,
                RECONCILED,
                format!(
                    "the switch is in the configuration Secret {namespace}/{}",
                    targets.configs_secret
                ),
            ),
        };
        conditions::set_condition(
            &mut status.conditions,
            switch.metadata.generation,
            SWITCH_VALID,
            ok,
            reason,
            &message,
            &now,
        );
        if status != old {
            match error {
                Some(e) => {
                    tracing::warn!(switch = %switch.name_any(), %namespace, error = %e, "switch left out of the configuration")
                }
                None => {
                    tracing::info!(switch = %switch.name_any(), %namespace, "switch configured")
                }
            }
            store.apply_status(switch, &status).await?;
        }
    }
    Ok(waiting)
}
