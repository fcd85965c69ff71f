//! Every Kubernetes read and write of the host controller, behind one trait.
//!
//! [`KubeStore`] talks to the API server; [`MemoryStore`] keeps objects in memory so the
//! reconciler can be tested without a cluster. Lists that other controllers share
//! (finalizers, a Secret's ownerReferences) are never written blind: each write carries
//! a precondition (JSON Patch `test` of the list as read, or of the resourceVersion when
//! the list is absent; [`crate::controller::runtime::store::patches`]), and a lost race
//! comes back as [`StoreError::Conflict`].

mod kube_store;
mod memory;

use std::future::Future;

use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use serde_json::Value;

use crate::api::firmware::{FirmwareUpdate, HostFirmwareComponents};
use crate::api::host::FINALIZER;
use crate::api::{
    BareMetalHost, BareMetalHostStatus, HardwareData, HardwareDetails, PreprovisioningImage,
};
use crate::controller::runtime::store::events::{HOST_REPORTER, Reporter};
use crate::controller::runtime::store::managed_fields::without_empty_objects;
pub use crate::controller::runtime::store::{HostEvent, StoreError};
use crate::controller::runtime::store::{
    Kind, Object, ObjectStore, Read, StatusApply, has_finalizer,
};

pub use kube_store::KubeStore;
pub use memory::{MemoryStore, RecordedEvent};

/// A host's status is applied without its empty objects, a refusal as it came; its
/// events are posted as upstream's host controller posts them, with the host's
/// consumer as the related object.
impl Kind for BareMetalHost {
    const STATUS_APPLY: StatusApply = StatusApply {
        refusal_is_conflict: false,
        ..StatusApply::PLAIN
    };

    fn status_body(status: &BareMetalHostStatus) -> Result<Value, serde_json::Error> {
        let mut status = serde_json::to_value(status)?;
        without_empty_objects(&mut status);
        Ok(status)
    }

    fn reporter() -> Reporter {
        HOST_REPORTER
    }

    fn related(&self) -> Option<ObjectReference> {
        self.spec.consumer_ref.clone()
    }
}

/// The object of kind `K` named as `host`, in its namespace, if there is one.
async fn namesake<K: Object>(
    objects: &impl ObjectStore,
    host: &BareMetalHost,
) -> Result<Option<K>, StoreError> {
    let namespace = host.namespace().unwrap_or_default();
    objects.get(&namespace, &host.name_any()).await
}

/// The Kubernetes side of the host controller: what every kind's store does, on
/// [`Store::objects`], and the host's own writes.
pub trait Store: Send + Sync {
    /// Where the host's objects and those named as it are read and written.
    type Objects: ObjectStore;

    fn objects(&self) -> &Self::Objects;

    /// Adds bmo's finalizer to the host, if the finalizers are still as read.
    fn add_finalizer(
        &self,
        host: &BareMetalHost,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.objects().set_finalizer(host, FINALIZER, true)
    }

    /// Removes bmo's finalizer from the host, if the finalizers are still as read.
    fn remove_finalizer(
        &self,
        host: &BareMetalHost,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.objects().set_finalizer(host, FINALIZER, false)
    }

    /// Makes bmo the only owner of the status fields that any field manager wrote with
    /// an Update (upstream's operator saves status that way), if the host is still
    /// as read; the host as it is afterwards, or `None` when there was nothing to
    /// take over.
    fn take_over_status(
        &self,
        host: &BareMetalHost,
    ) -> impl Future<Output = Result<Option<BareMetalHost>, StoreError>> + Send;

    /// The host's resourceVersion as the API server has it now (a quorum read, not
    /// the watch's copy); `None` when the host is gone. Destructive steps compare it
    /// with the copy they decided on.
    fn newest_version(
        &self,
        host: &BareMetalHost,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// Writes the whole status (server-side apply on the status subresource).
    fn apply_status(
        &self,
        host: &BareMetalHost,
        status: &BareMetalHostStatus,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.objects().apply_status(host, status)
    }

    /// Removes these annotation keys from the host.
    fn remove_annotations(
        &self,
        host: &BareMetalHost,
        keys: &[&str],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Writes the host's HardwareData object (owned by the host).
    fn apply_hardware_data(
        &self,
        host: &BareMetalHost,
        details: &HardwareDetails,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The hardware in the host's HardwareData object, when there is one.
    fn hardware_data(
        &self,
        host: &BareMetalHost,
    ) -> impl Future<Output = Result<Option<HardwareDetails>, StoreError>> + Send {
        async move {
            let data = namesake::<HardwareData>(self.objects(), host).await?;
            Ok(data.and_then(|d| d.spec.hardware))
        }
    }

    /// The object of kind `K` named as the host (its HostFirmwareSettings,
    /// HostFirmwareComponents, HostUpdatePolicy, PreprovisioningImage), when it exists.
    fn namesake<K: Object>(
        &self,
        host: &BareMetalHost,
    ) -> impl Future<Output = Result<Option<K>, StoreError>> + Send {
        namesake(self.objects(), host)
    }

    /// Records in the host's HostFirmwareComponents that preparing started to flash
    /// `updates` (`status.updates`, and `status.lastUpdated` now), as upstream does
    /// when the clean steps start.
    fn record_firmware_updates(
        &self,
        host: &BareMetalHost,
        updates: &[FirmwareUpdate],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Forgets the updates recorded in the host's HostFirmwareComponents while its
    /// `ChangeDetected` is still `True` (the firmware controller has not seen them
    /// through): preparing failed, so a retry flashes them again, as upstream.
    fn forget_firmware_updates(
        &self,
        host: &BareMetalHost,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Writes the host's PreprovisioningImage: labels, owner and spec (server-side
    /// apply; its status is the image builder's).
    fn apply_preprovisioning_image(
        &self,
        host: &BareMetalHost,
        image: &PreprovisioningImage,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The Secret `name` in `namespace`, when it exists: from the cache of the
    /// Secrets bmo labelled when it is one of them.
    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Secret>, StoreError>> + Send {
        self.objects().read(namespace, name, Read::CachedIfPresent)
    }

    /// Labels `secret` as bmo's and adds the host to its owners, if its owners are
    /// still as read; with `hold`, also adds [`SECRET_FINALIZER`], if its finalizers
    /// are still as read. One write; the Secret's resourceVersion after it.
    fn own_secret(
        &self,
        host: &BareMetalHost,
        secret: &Secret,
        hold: bool,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// Removes upstream's [`SECRET_FINALIZER`] from `secret`, if its finalizers are
    /// still as read.
    fn release_secret(
        &self,
        secret: &Secret,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.objects()
            .set_finalizer(secret, SECRET_FINALIZER, false)
    }

    /// Publishes an event about the host; a failure is logged, not returned.
    fn publish(&self, host: &BareMetalHost, event: HostEvent) -> impl Future<Output = ()> + Send {
        async move { self.objects().publish(host, &event).await }
    }
}

/// Label bmo puts on the BMC Secrets it uses; only labelled Secrets are watched.
pub const SECRET_LABEL: (&str, &str) = ("environment.metal3.io", "baremetal");

/// The finalizer on the BMC Secret of a host (upstream's `metal3.io` host finalizer
/// plus `/secret`, upstream's name): added while a host uses the Secret, so it cannot
/// be deleted from under the host, and removed once no host needs it any more, as
/// upstream does (see docs/migration.md).
pub const SECRET_FINALIZER: &str = "baremetalhost.metal3.io/secret";

/// Whether `secret` carries [`SECRET_FINALIZER`].
pub fn secret_is_held(secret: &Secret) -> bool {
    has_finalizer(secret, SECRET_FINALIZER)
}

/// Whether `secret` already carries bmo's label and the host as an owner.
pub fn secret_is_owned(host: &BareMetalHost, secret: &Secret) -> bool {
    let labelled = secret
        .labels()
        .get(SECRET_LABEL.0)
        .is_some_and(|v| v == SECRET_LABEL.1);
    labelled && secret.owner_references().iter().any(|o| host_owns(host, o))
}

fn host_owns(host: &BareMetalHost, owner: &OwnerReference) -> bool {
    Some(&owner.uid) == host.metadata.uid.as_ref()
}

/// Updates are recorded in `object` that the firmware controller has not yet seen
/// through (`ChangeDetected` still `True`).
pub fn unconfirmed_updates(object: &HostFirmwareComponents) -> bool {
    object.status.as_ref().is_some_and(|s| {
        !s.updates.is_empty()
            && s.conditions.iter().any(|c| {
                c.type_ == crate::api::firmware::COMPONENTS_CHANGE_DETECTED && c.status == "True"
            })
    })
}
