//! Every Kubernetes read and write of the BareMetalSwitch controller.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use serde_json::json;

use crate::api::{BareMetalSwitch, BareMetalSwitchStatus};
use crate::controller::runtime::store::{
    Kind, KubeClient, ObjectStore, StatusApply, StoreError, apply_as, conflict_or,
};

/// Field manager of the Secrets bmo writes for the switches and of their status.
pub const SWITCH_FIELD_MANAGER: &str = "bmo-switches";

/// Its status (its conditions) is applied as the switches' field manager.
impl Kind for BareMetalSwitch {
    const STATUS_APPLY: StatusApply = StatusApply {
        manager: SWITCH_FIELD_MANAGER,
        named: true,
        ..StatusApply::PLAIN
    };
}

/// The Kubernetes side of the BareMetalSwitch controller.
#[derive(Clone)]
pub struct KubeSwitchStore {
    kube: KubeClient,
}

impl KubeSwitchStore {
    pub fn new(client: Client) -> Self {
        KubeSwitchStore {
            kube: KubeClient::new(client, None),
        }
    }

    pub fn client(&self) -> &Client {
        self.kube.client()
    }

    /// The data of Secret `namespace/name`, or `None` when it does not exist.
    pub async fn secret_data(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, StoreError> {
        let secret = self.kube.get::<Secret>(namespace, name).await?;
        Ok(secret.map(|s| {
            s.data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect()
        }))
    }

    /// Makes Secret `namespace/name` hold exactly `data` among the keys bmo wrote
    /// (server-side apply: keys bmo no longer writes are removed, others' stay).
    pub async fn apply_secret_data(
        &self,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, Vec<u8>>,
    ) -> Result<(), StoreError> {
        let data: BTreeMap<String, ByteString> =
            data.into_iter().map(|(k, v)| (k, ByteString(v))).collect();
        let body = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "bmo"},
            },
            "data": data,
        });
        let api = self.kube.api::<Secret>(namespace);
        let applied = apply_as(&api, name, SWITCH_FIELD_MANAGER, &body).await;
        applied.map_err(conflict_or)?;
        Ok(())
    }

    /// Writes the switch's status (its conditions).
    pub async fn apply_status(
        &self,
        switch: &BareMetalSwitch,
        status: &BareMetalSwitchStatus,
    ) -> Result<(), StoreError> {
        self.kube.apply_status(switch, status).await
    }
}
