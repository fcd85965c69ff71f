//! Installing bmo's CRDs and admission policies into a cluster: server-side apply with
//! a fixed field manager, so running it again (or from several places at once) is a
//! no-op, then waiting until the API server serves the new types.

use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{admission, crd, kinds};

/// Field manager of everything bmo installs.
pub const FIELD_MANAGER: &str = "bmo-install";

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(transparent)]
    Generate(#[from] crd::CrdError),
    #[error(
        "applying {what} {name} failed: {source}; check that the user may manage {what}s (cluster-admin)"
    )]
    Apply {
        what: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("CRD {name} was not Established within {timeout:?}; last conditions: {last}")]
    NotEstablished {
        name: String,
        timeout: Duration,
        last: String,
    },
}

/// Applies every CRD bmo serves (BareMetalHost, HardwareData and the eleven other
/// kinds) and the admission policies, and
/// waits up to `timeout` for the CRDs to be Established.
pub async fn install(client: &kube::Client, timeout: Duration) -> Result<(), InstallError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    let mut definitions = vec![crd::baremetalhost_crd()?, crd::hardwaredata_crd()?];
    definitions.extend(kinds::crds()?.into_iter().map(|(_, crd)| crd));
    for definition in definitions {
        let name = definition.metadata.name.clone().unwrap_or_default();
        apply(&crds, &name, &definition, "CustomResourceDefinition").await?;
        names.push(name);
    }
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    for policy in admission::policies() {
        let name = policy.policy.metadata.name.clone().unwrap_or_default();
        apply(
            &policies,
            &name,
            &policy.policy,
            "ValidatingAdmissionPolicy",
        )
        .await?;
        apply(
            &bindings,
            &name,
            &policy.binding,
            "ValidatingAdmissionPolicyBinding",
        )
        .await?;
    }
    for name in names {
        wait_established(&crds, &name, timeout).await?;
    }
    Ok(())
}

/// Server-side applies `object` as bmo's field manager, taking over its fields.
async fn apply<K>(
    api: &Api<K>,
    name: &str,
    object: &K,
    what: &'static str,
) -> Result<(), InstallError>
where
    K: Clone + DeserializeOwned + Serialize + Debug,
{
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(name, &params, &Patch::Apply(object))
        .await
        .map_err(|source| InstallError::Apply {
            what,
            name: name.to_owned(),
            source,
        })?;
    Ok(())
}

async fn wait_established(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
    timeout: Duration,
) -> Result<(), InstallError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match crds.get_opt(name).await {
            Ok(Some(found)) => {
                let conditions = found.status.and_then(|s| s.conditions).unwrap_or_default();
                if conditions
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                {
                    return Ok(());
                }
                conditions
                    .iter()
                    .map(|c| {
                        format!(
                            "{}={} ({})",
                            c.type_,
                            c.status,
                            c.message.as_deref().unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            }
            Ok(None) => "not found".to_owned(),
            Err(e) => e.to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(InstallError::NotEstablished {
                name: name.to_owned(),
                timeout,
                last,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
