//! The Secrets a host names: BMC credentials, and user, network and meta data.

use k8s_openapi::api::core::v1::SecretReference;
use kube::ResourceExt;

use super::state_machine::CredentialsCheck;
use super::store::{Store, StoreError, secret_is_held, secret_is_owned};
use crate::api::BareMetalHost;
use crate::credentials::{Credentials, SecretString};
use crate::provisioner::parse_document;

/// The BMC Secret as the reconciler found it.
pub struct LoadedCredentials {
    pub credentials: Credentials,
    pub check: CredentialsCheck,
    /// The Secret's resourceVersion, when there is a Secret.
    pub version: Option<String>,
    /// Its resourceVersion before bmo's own write of its label, owner and finalizer
    /// in this load: the same credentials.
    pub claimed_over: Option<String>,
}

impl LoadedCredentials {
    fn unusable(check: CredentialsCheck, version: Option<String>) -> Self {
        Self {
            credentials: Credentials {
                username: String::new(),
                password: SecretString::default(),
            },
            check,
            version,
            claimed_over: None,
        }
    }

    /// Whether the credentials changed since the version last tried: bmo's own write
    /// of the Secret's metadata is no change (a Secret another operator left is
    /// claimed on the first look, and its credentials were tried under that
    /// operator).
    pub fn changed_since(&self, tried: Option<&str>) -> bool {
        self.version.is_some()
            && self.version.as_deref() != tried
            && (self.claimed_over.is_none() || self.claimed_over.as_deref() != tried)
    }
}

/// Reads the BMC Secret, labels it and makes the host its owner so that a change to it
/// wakes the host up, and holds it with [`super::store::SECRET_FINALIZER`] while the
/// host uses it.
pub async fn load_credentials<S: Store>(
    host: &BareMetalHost,
    store: &S,
) -> Result<LoadedCredentials, StoreError> {
    let Some(bmc) = host.spec.bmc.as_ref() else {
        let check = CredentialsCheck::Invalid("spec.bmc is missing".into());
        return Ok(LoadedCredentials::unusable(check, None));
    };
    if bmc.credentials_name.is_empty() {
        let check = CredentialsCheck::Invalid("spec.bmc.credentialsName is empty: name the Secret holding the BMC username and password".into());
        return Ok(LoadedCredentials::unusable(check, None));
    }
    let ns = host.namespace().unwrap_or_default();
    let Some(secret) = store.secret(&ns, &bmc.credentials_name).await? else {
        tracing::info!(secret = %bmc.credentials_name, "BMC credentials Secret not found yet");
        let check = CredentialsCheck::Missing(format!(
            "BMC credentials Secret {ns}/{} not found: create it with keys username and password",
            bmc.credentials_name
        ));
        return Ok(LoadedCredentials::unusable(check, None));
    };
    // Upstream's finalizer, as upstream puts it: while the host uses the Secret, so
    // the Secret cannot go from under it. Not once the host (or the Secret) is being
    // deleted: the host's release removes it then.
    let hold =
        host.metadata.deletion_timestamp.is_none() && secret.metadata.deletion_timestamp.is_none();
    let mut version = secret.metadata.resource_version.clone();
    let mut claimed_over = None;
    if (!secret_is_owned(host, &secret) || (hold && !secret_is_held(&secret)))
        && let Some(after) = store.own_secret(host, &secret, hold).await?
    {
        claimed_over = version.replace(after);
    }
    if let Some(previous) = previous_credentials_name(host)
        && previous != bmc.credentials_name
    {
        release(host, store, &[previous]).await?;
    }
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
    let fake = bmc.address.starts_with("fake://");
    if !fake && (username.is_empty() || password.is_empty()) {
        let missing = if username.is_empty() {
            "username"
        } else {
            "password"
        };
        let check = CredentialsCheck::Invalid(format!(
            "BMC credentials Secret {ns}/{} has no {missing} key (or it is empty)",
            bmc.credentials_name
        ));
        return Ok(LoadedCredentials::unusable(check, version));
    }
    Ok(LoadedCredentials {
        credentials: Credentials {
            username,
            password: SecretString::new(password),
        },
        check: CredentialsCheck::Valid,
        version,
        claimed_over,
    })
}

/// The first of `keys` in the Secret `reference` names (in the host's namespace);
/// `None` when no Secret is named, it is missing, or it has none of the keys.
pub async fn read_data<S: Store>(
    host: &BareMetalHost,
    store: &S,
    reference: Option<&SecretReference>,
    keys: &[&str],
) -> Result<Option<Vec<u8>>, StoreError> {
    let Some(name) = reference.and_then(|r| r.name.as_deref()) else {
        return Ok(None);
    };
    let secret = store
        .secret(&host.namespace().unwrap_or_default(), name)
        .await?;
    Ok(secret
        .and_then(|s| s.data)
        .and_then(|data| keys.iter().find_map(|k| data.get(*k).map(|v| v.0.clone()))))
}

/// The key of a network data Secret that holds the data; `value` is read when it is
/// missing, as upstream does.
const NETWORK_DATA_KEY: &str = "networkData";

/// The network data of the host's `spec.preprovisioningNetworkDataName`, checked to
/// be a JSON or YAML mapping: `None` when the field is empty. The inner error names
/// the Secret and the key and says what to fix. A host being deleted needs no
/// network data, so a missing Secret does not keep its node.
pub async fn preprovisioning_network_data<S: Store>(
    host: &BareMetalHost,
    store: &S,
) -> Result<Result<Option<Vec<u8>>, String>, StoreError> {
    let Some(name) = host
        .spec
        .preprovisioning_network_data_name
        .as_deref()
        .filter(|n| !n.is_empty() && host.metadata.deletion_timestamp.is_none())
    else {
        return Ok(Ok(None));
    };
    let namespace = host.namespace().unwrap_or_default();
    let field = "spec.preprovisioningNetworkDataName";
    let Some(secret) = store.secret(&namespace, name).await? else {
        return Ok(Err(format!(
            "{field}: Secret {namespace}/{name} does not exist; create it with the network data under the key {NETWORK_DATA_KEY}, or clear the field"
        )));
    };
    let data = secret.data.as_ref().and_then(|d| {
        d.get(NETWORK_DATA_KEY)
            .or_else(|| d.get("value"))
            .map(|v| v.0.clone())
    });
    let Some(bytes) = data else {
        return Ok(Err(format!(
            "{field}: Secret {namespace}/{name} has no key {NETWORK_DATA_KEY}; put the network data (JSON or YAML) under it"
        )));
    };
    let problem = match parse_document("networkData", &bytes) {
        Ok(document) if document.is_object() => return Ok(Ok(Some(bytes))),
        Ok(_) => "is not a mapping (links, networks, services)".to_owned(),
        Err(e) => e.message,
    };
    Ok(Err(format!(
        "{field}: Secret {namespace}/{name}, key {NETWORK_DATA_KEY}: the network data {problem}"
    )))
}

/// The BMC Secret the host's status says was last tried.
fn previous_credentials_name(host: &BareMetalHost) -> Option<&str> {
    host.status
        .as_ref()?
        .tried_credentials
        .as_ref()?
        .credentials
        .as_ref()?
        .name
        .as_deref()
}

/// Removes the Secret finalizer (bmo's or upstream's: the same name) from those of
/// the Secrets `names` (in the host's namespace) that carry it: the host no longer
/// needs them, so deleting them must not wait.
pub async fn release<S: Store>(
    host: &BareMetalHost,
    store: &S,
    names: &[&str],
) -> Result<(), StoreError> {
    let ns = host.namespace().unwrap_or_default();
    for name in names.iter().filter(|n| !n.is_empty()) {
        if let Some(secret) = store.secret(&ns, name).await?
            && secret_is_held(&secret)
        {
            store.release_secret(&secret).await?;
            tracing::info!(secret = %name, "removed the Secret finalizer");
        }
    }
    Ok(())
}

/// Every Secret the host names that upstream's operator put its finalizer on: the
/// BMC credentials and the preprovisioning network data.
pub fn finalized_secret_names(host: &BareMetalHost) -> Vec<&str> {
    let bmc = host.spec.bmc.as_ref().map(|b| b.credentials_name.as_str());
    let network = host.spec.preprovisioning_network_data_name.as_deref();
    bmc.into_iter().chain(network).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(version: Option<&str>, claimed_over: Option<&str>) -> LoadedCredentials {
        LoadedCredentials {
            version: version.map(str::to_owned),
            claimed_over: claimed_over.map(str::to_owned),
            ..LoadedCredentials::unusable(CredentialsCheck::Valid, None)
        }
    }

    #[test]
    fn bmos_own_write_of_the_secrets_metadata_is_no_credentials_change() {
        // Upstream tried version 282; bmo's label, owner and finalizer made it 300.
        assert!(!loaded(Some("300"), Some("282")).changed_since(Some("282")));
        // Next look: 300 was recorded as tried.
        assert!(!loaded(Some("300"), None).changed_since(Some("300")));
        // The user changed the Secret (283), bmo claimed it in the same look.
        assert!(loaded(Some("301"), Some("283")).changed_since(Some("282")));
        assert!(loaded(Some("283"), None).changed_since(Some("282")));
        // A new host: nothing tried yet.
        assert!(loaded(Some("2"), Some("1")).changed_since(None));
        // No Secret: nothing to send.
        assert!(!loaded(None, None).changed_since(Some("282")));
    }
}
