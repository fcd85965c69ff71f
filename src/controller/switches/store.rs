//! Every Kubernetes read and write of the BareMetalSwitch controller.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::api::{BareMetalSwitch, BareMetalSwitchStatus};
use crate::controller::runtime::store::{KubeClient, StatusApply, StoreError, conflict_or, found};

/// Field manager of the Secrets bmo writes for the switches and of their status.
pub const SWITCH_FIELD_MANAGER: &str = "bmo-switches";

/// The Kubernetes side of the BareMetalSwitch controller.
#[derive(Clone)]
pub struct KubeSwitchStore {
    client: Client,
}

impl KubeSwitchStore {
    pub fn new(client: Client) -> Self {
        KubeSwitchStore { client }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The data of Secret `namespace/name`, or `None` when it does not exist.
    pub async fn secret_data(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, StoreError> {
        let secret = found(
            Api::<Secret>::namespaced(self.client.clone(), namespace)
                .get(name)
                .await,
        )?;
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
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .patch(
                name,
                &PatchParams::apply(SWITCH_FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
            .map_err(conflict_or)?;
        Ok(())
    }

    /// Writes the switch's status (its conditions).
    pub async fn apply_status(
        &self,
        switch: &BareMetalSwitch,
        status: &BareMetalSwitchStatus,
    ) -> Result<(), StoreError> {
        let how = StatusApply {
            manager: SWITCH_FIELD_MANAGER,
            named: true,
            ..StatusApply::PLAIN
        };
        KubeClient::new(self.client.clone(), None)
            .apply_status(switch, status, how)
            .await
    }
}
