//! Calls on what Ironic knows of a node beyond its record: inspection data,
//! validation, boot device, BIOS, firmware, virtual media, history and the driver's
//! own (vendor passthru) calls.

use reqwest::Method;
use serde_json::{Value, json};

use super::client::IronicClient;
use super::error::{IronicError, unless_not_found, without_credentials};
use super::types::{BiosSetting, FirmwareComponent, Microversion, VirtualMedia};

/// The first microversion that reads a node's virtual media (`GET .../vmedia`).
const GET_VMEDIA: Microversion = Microversion::new(1, 93);

#[derive(serde::Deserialize)]
struct BiosSettingList {
    bios: Vec<BiosSetting>,
}

#[derive(serde::Deserialize)]
struct FirmwareComponentList {
    firmware: Vec<FirmwareComponent>,
}

impl IronicClient {
    /// `{inventory, plugin_data}` from the last inspection; `None` when there is none.
    pub async fn get_inventory(&self, ident: &str) -> Result<Option<Value>, IronicError> {
        Ok(unless_not_found(self.get(&["nodes", ident, "inventory"]).await)?.flatten())
    }

    /// `GET /v1/nodes/{id}/validate`: per interface `{result, reason}`.
    pub async fn validate_node(&self, ident: &str) -> Result<Value, IronicError> {
        Ok(self
            .get(&["nodes", ident, "validate"])
            .await?
            .unwrap_or(Value::Null))
    }

    /// `GET /v1/nodes/{id}/management/boot_device`: asks the BMC itself (Ironic does
    /// not answer from a cache), so it proves that Ironic can talk to the BMC.
    pub async fn get_boot_device(&self, ident: &str) -> Result<Value, IronicError> {
        Ok(self
            .get(&["nodes", ident, "management", "boot_device"])
            .await?
            .unwrap_or(Value::Null))
    }

    /// The node's BIOS settings with their registry details, as Ironic last cached
    /// them from the BMC; `None` when Ironic has no such node.
    pub async fn get_bios(&self, ident: &str) -> Result<Option<Vec<BiosSetting>>, IronicError> {
        let list: Result<Option<BiosSettingList>, IronicError> = self
            .get_with_query(&["nodes", ident, "bios"], &[("detail", "True")])
            .await;
        Ok(unless_not_found(list)?.map(|list| list.map(|l| l.bios).unwrap_or_default()))
    }

    /// The node's firmware components (BIOS, BMC, NICs) with their versions, as
    /// Ironic last cached them from the BMC (on verify, inspection and cleaning);
    /// `None` when Ironic has no such node. Needs microversion 1.86 (bmo's floor is
    /// above it).
    pub async fn get_firmware(
        &self,
        ident: &str,
    ) -> Result<Option<Vec<FirmwareComponent>>, IronicError> {
        let list: Result<Option<FirmwareComponentList>, IronicError> =
            self.get(&["nodes", ident, "firmware"]).await;
        Ok(unless_not_found(list)?.map(|list| list.map(|l| l.firmware).unwrap_or_default()))
    }

    /// `GET /v1/nodes/{id}/vmedia` (microversion 1.93): the node's virtual media
    /// devices as its BMC reports them; `None` when Ironic has no such node.
    pub async fn get_virtual_media(
        &self,
        ident: &str,
    ) -> Result<Option<Vec<VirtualMedia>>, IronicError> {
        if self.microversion() < GET_VMEDIA {
            return Err(IronicError::MicroversionTooOld {
                endpoint: without_credentials(self.endpoint()),
                max: self.microversion(),
                needed: GET_VMEDIA,
            });
        }
        let list = self.get(&["nodes", ident, "vmedia"]).await;
        Ok(unless_not_found(list)?.map(Option::unwrap_or_default))
    }

    /// The node's history (`GET /v1/nodes/{id}/history`): events such as the start
    /// and end of each cleaning with the steps it ran, oldest first.
    pub async fn node_history(&self, ident: &str) -> Result<Vec<Value>, IronicError> {
        let list: Option<Value> = self.get(&["nodes", ident, "history"]).await?;
        Ok(list
            .and_then(|mut l| l.get_mut("history").map(Value::take))
            .and_then(|h| match h {
                Value::Array(items) => Some(items),
                _ => None,
            })
            .unwrap_or_default())
    }

    /// `POST /v1/nodes/{id}/vmedia`: starts inserting `image_url` as the node's
    /// virtual CD. Ironic answers at once; the conductor downloads the image, serves
    /// it from its own HTTP server and inserts it in the background, and a failure
    /// ends up in the node's `last_error`.
    pub async fn attach_virtual_media(
        &self,
        ident: &str,
        image_url: &str,
    ) -> Result<(), IronicError> {
        self.call::<Value, _>(
            Method::POST,
            &["nodes", ident, "vmedia"],
            Some(&json!({ "device_type": "cdrom", "image_url": image_url })),
        )
        .await
        .map(drop)
    }

    /// `DELETE /v1/nodes/{id}/vmedia?device_types=cdrom`: starts ejecting the
    /// node's virtual CD (in the background, as attaching).
    pub async fn detach_virtual_media(&self, ident: &str) -> Result<(), IronicError> {
        self.call_with_query::<Value, ()>(
            Method::DELETE,
            &["nodes", ident, "vmedia"],
            &[("device_types", "cdrom")],
            None,
        )
        .await
        .map(drop)
    }

    /// `{POST,DELETE,GET} /v1/nodes/{id}/vendor_passthru?method=METHOD`: a driver's own
    /// call (the redfish driver's event subscriptions). Its answer, if any.
    pub async fn vendor_passthru(
        &self,
        ident: &str,
        http_method: Method,
        method: &str,
        body: &Value,
    ) -> Result<Option<Value>, IronicError> {
        self.call_with_query(
            http_method,
            &["nodes", ident, "vendor_passthru"],
            &[("method", method)],
            Some(body),
        )
        .await
    }

    /// `POST /v1/continue_inspection`: what the inspection ramdisk sends when it has
    /// collected the inventory (tests play the ramdisk with it).
    pub async fn continue_inspection(&self, body: &Value) -> Result<Value, IronicError> {
        Ok(self
            .call(Method::POST, &["continue_inspection"], Some(body))
            .await?
            .unwrap_or(Value::Null))
    }
}
