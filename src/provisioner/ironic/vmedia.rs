//! A node's virtual CD for DataImages: `GET`, `POST` and `DELETE /v1/nodes/{id}/vmedia`.

use reqwest::StatusCode;

use super::{IronicProvisioner, sentence};
use crate::ironic::IronicError;
use crate::provisioner::{NodeRef, ProvisionerError, VirtualCd};

/// How Ironic's conductor words a failed attach or detach in the node's `last_error`.
const VMEDIA_FAILURES: [&str; 2] = ["Could not attach device", "Could not detach device"];

impl IronicProvisioner {
    pub(in crate::provisioner) async fn read_virtual_cd(
        &self,
        node: &NodeRef,
    ) -> Result<Option<VirtualCd>, ProvisionerError> {
        let err = node_err(node);
        // Read afresh rather than from the shared list: the lock and last error of
        // an attach started a moment ago are what counts.
        let Some(found) = self.client.get_node(&ident(node)).await.map_err(err)? else {
            return Ok(None);
        };
        let failure = found
            .last_error
            .as_deref()
            .filter(|e| VMEDIA_FAILURES.iter().any(|f| e.starts_with(f)))
            .map(sentence);
        // A node locked by a conductor (an attach or detach running) cannot be
        // asked; upstream waits for the lock too.
        if found.reservation.is_some() {
            return Ok(Some(VirtualCd {
                inserted: false,
                busy: true,
                failure: None,
            }));
        }
        let Some(devices) = self
            .client
            .get_virtual_media(&found.uuid)
            .await
            .map_err(node_err(node))?
        else {
            return Ok(None);
        };
        Ok(Some(VirtualCd {
            inserted: devices.iter().any(|d| d.inserted),
            busy: false,
            failure,
        }))
    }

    pub(in crate::provisioner) async fn insert_virtual_cd(
        &self,
        node: &NodeRef,
        url: &str,
    ) -> Result<Option<String>, ProvisionerError> {
        let result = self.client.attach_virtual_media(&ident(node), url).await;
        refused_or(node, result, "Ironic refused to attach the image")
    }

    pub(in crate::provisioner) async fn eject_virtual_cd(
        &self,
        node: &NodeRef,
    ) -> Result<Option<String>, ProvisionerError> {
        let result = self.client.detach_virtual_media(&ident(node)).await;
        refused_or(node, result, "Ironic refused to detach the image")
    }
}

fn ident(node: &NodeRef) -> String {
    match node.provisioning_id.as_deref().filter(|id| !id.is_empty()) {
        Some(id) => id.to_owned(),
        None => node.id.node_name(),
    }
}

fn node_err(node: &NodeRef) -> impl FnOnce(IronicError) -> ProvisionerError + '_ {
    move |source| ProvisionerError::Ironic {
        host: node.id.to_string(),
        source,
    }
}

/// A refusal (400: a URL scheme Ironic does not take, a driver without virtual
/// media) as its reason; any other failure as an error.
fn refused_or(
    node: &NodeRef,
    result: Result<(), IronicError>,
    refused: &str,
) -> Result<Option<String>, ProvisionerError> {
    match result {
        Ok(()) => Ok(None),
        Err(e) if e.status() == Some(StatusCode::BAD_REQUEST) => {
            Ok(Some(format!("{refused}: {}", sentence(&e.to_string()))))
        }
        Err(e) => Err(node_err(node)(e)),
    }
}
