//! [`Store`] on the Kubernetes API.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::{
    SECRET_FINALIZER, SECRET_LABEL, Store, StoreError, secret_is_held, unconfirmed_updates,
};
use crate::api::firmware::{FirmwareUpdate, HostFirmwareComponents};
use crate::api::{
    BareMetalHost, HardwareData, HardwareDataSpec, HardwareDetails, PreprovisioningImage,
};
use crate::controller::runtime::store::patches::{guarded_list_write, pointer_segment};
use crate::controller::runtime::store::{
    FIELD_MANAGER, KubeClient, Object, apply_as, conflict_or, owner_reference, patch_guarded,
    take_over,
};

/// [`Store`] on a Kubernetes client.
#[derive(Clone)]
pub struct KubeStore {
    /// Also names this bmo in the events' `reportingInstance`, and keeps the cache of
    /// the Secrets bmo labelled, as the controller's watch of them sees them, once
    /// that watch runs. A Secret not in it is read from the API server.
    kube: KubeClient,
}

impl KubeStore {
    /// `instance` names this bmo in the events it publishes (`POD_NAME`).
    pub fn new(client: kube::Client, instance: Option<String>) -> Self {
        Self {
            kube: KubeClient::new(client, instance),
        }
    }

    pub fn client(&self) -> &kube::Client {
        self.kube.client()
    }

    /// Answers [`Store::secret`] from `cache` (a reflector of the Secrets carrying
    /// [`SECRET_LABEL`]) for the Secrets in it; only the first call counts.
    pub fn cache_labelled_secrets(&self, cache: reflector::Store<Secret>) {
        self.kube.cache(cache);
    }

    fn api<K: Object>(&self, host: &BareMetalHost) -> Api<K> {
        self.kube.api(&host.namespace().unwrap_or_default())
    }
}

impl Store for KubeStore {
    type Objects = KubeClient;

    fn objects(&self) -> &KubeClient {
        &self.kube
    }

    async fn take_over_status(
        &self,
        host: &BareMetalHost,
    ) -> Result<Option<BareMetalHost>, StoreError> {
        take_over(&self.api(host), host, "status").await
    }

    async fn newest_version(&self, host: &BareMetalHost) -> Result<Option<String>, StoreError> {
        let meta = self
            .api::<BareMetalHost>(host)
            .get_metadata_opt(&host.name_any())
            .await?;
        Ok(meta.and_then(|m| m.metadata.resource_version))
    }

    async fn remove_annotations(
        &self,
        host: &BareMetalHost,
        keys: &[&str],
    ) -> Result<(), StoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        // A merge patch on a map touches only the named keys.
        let nulls: serde_json::Map<String, Value> = keys
            .iter()
            .map(|k| ((*k).to_owned(), Value::Null))
            .collect();
        self.api::<BareMetalHost>(host)
            .patch(
                &host.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": nulls}})),
            )
            .await?;
        Ok(())
    }

    async fn apply_hardware_data(
        &self,
        host: &BareMetalHost,
        details: &HardwareDetails,
    ) -> Result<(), StoreError> {
        let mut data = HardwareData::new(
            &host.name_any(),
            HardwareDataSpec {
                hardware: Some(details.clone()),
            },
        );
        data.metadata.owner_references = Some(vec![owner_reference(host, true)]);
        let api = self.api::<HardwareData>(host);
        let name = host.name_any();
        let apply = || apply_as(&api, &name, FIELD_MANAGER, &data);
        let applied = apply().await?;
        // HardwareData upstream's operator wrote (with Update) becomes bmo's and is
        // applied again, so that what a new inspection no longer reports goes. Applying
        // first costs one request where there is nothing to take over (always, but
        // for a migration), against a read before every write.
        if take_over(&api, &applied, "").await?.is_some() {
            apply().await?;
        }
        Ok(())
    }

    async fn record_firmware_updates(
        &self,
        host: &BareMetalHost,
        updates: &[FirmwareUpdate],
    ) -> Result<(), StoreError> {
        // A merge patch (an Update), not an apply: bmo's apply of the whole status
        // belongs to the firmware controller, which takes this field over on its
        // next write, as any field written with Update.
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let patch = json!({"status": {"updates": updates, "lastUpdated": now}});
        self.api::<HostFirmwareComponents>(host)
            .patch_status(
                &host.name_any(),
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(&patch),
            )
            .await?;
        Ok(())
    }

    async fn forget_firmware_updates(&self, host: &BareMetalHost) -> Result<(), StoreError> {
        let api = self.api::<HostFirmwareComponents>(host);
        let Some(object) = api.get_opt(&host.name_any()).await? else {
            return Ok(());
        };
        if !unconfirmed_updates(&object) {
            return Ok(());
        }
        // Only if nobody wrote meanwhile (a newer status may have seen them through).
        let patch = json!({
            "metadata": {"resourceVersion": object.resource_version()},
            "status": {"updates": null},
        });
        api.patch_status(
            &host.name_any(),
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(&patch),
        )
        .await
        .map_err(conflict_or)?;
        tracing::info!("preparing failed: the firmware updates will be flashed again on retry");
        Ok(())
    }

    async fn apply_preprovisioning_image(
        &self,
        host: &BareMetalHost,
        image: &PreprovisioningImage,
    ) -> Result<(), StoreError> {
        let api = self.api::<PreprovisioningImage>(host);
        apply_as(&api, &host.name_any(), FIELD_MANAGER, image).await?;
        Ok(())
    }

    async fn own_secret(
        &self,
        host: &BareMetalHost,
        secret: &Secret,
        hold: bool,
    ) -> Result<Option<String>, StoreError> {
        let mut patch = Vec::new();
        let meta = &secret.metadata;
        if hold && !secret_is_held(secret) {
            let wanted = [secret.finalizers(), &[SECRET_FINALIZER.to_owned()]].concat();
            let path = "/metadata/finalizers";
            patch.extend(guarded_list_write(secret, path, &meta.finalizers, &wanted)?);
        }
        let uid = host.metadata.uid.clone().unwrap_or_default();
        if !secret.owner_references().iter().any(|o| o.uid == uid) {
            let owner = owner_reference(host, false);
            let wanted = [secret.owner_references(), &[owner]].concat();
            let (path, current) = ("/metadata/ownerReferences", &meta.owner_references);
            patch.extend(guarded_list_write(secret, path, current, &wanted)?);
        }
        // A label is one key of a map: setting it loses nothing of anyone else's.
        if secret.metadata.labels.is_none() {
            patch.push(json!({"op": "add", "path": "/metadata/labels", "value": {SECRET_LABEL.0: SECRET_LABEL.1}}));
        } else {
            let path = format!("/metadata/labels/{}", pointer_segment(SECRET_LABEL.0));
            patch.push(json!({"op": "add", "path": path, "value": SECRET_LABEL.1}));
        }
        if secret.metadata.labels.is_none() && secret.metadata.owner_references.is_some() {
            // Adding the whole map needs the same guard as a list.
            patch.insert(
                0,
                json!({"op": "test", "path": "/metadata/resourceVersion", "value": secret.metadata.resource_version.as_deref().unwrap_or_default()}),
            );
        }
        let patched = patch_guarded(&self.kube.api_of(secret), secret, patch).await?;
        Ok(patched.metadata.resource_version)
    }
}
