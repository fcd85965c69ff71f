//! Image kinds: `DataImage` (an ISO to attach to a host through the BMC's virtual
//! media) and `PreprovisioningImage` (the deploy ramdisk or ISO built for one host).
//!
//! Both are named after their BareMetalHost. DataImages are acted on by
//! `controller::dataimage`; no controller acts on PreprovisioningImages yet.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Finalizer upstream's DataImage controller keeps until the image is detached.
pub const DATA_IMAGE_FINALIZER: &str = "dataimage.metal3.io";
/// Condition type: the PreprovisioningImage can be used.
pub const IMAGE_READY: &str = "Ready";
/// Condition type: building the PreprovisioningImage failed.
pub const IMAGE_ERROR: &str = "Error";

super::metal3_kind! {
    /// An ISO to attach to the BareMetalHost of the same name as virtual media.
    #[kube(
        kind = "DataImage", plural = "dataimages", singular = "dataimage",
        status = "DataImageStatus",
        doc = "An ISO attached as virtual media to the BareMetalHost of the same name."
    )]
    pub struct DataImageSpec {
        /// Where the BMC downloads the ISO from.
        pub url: String,
    }
}

/// What is attached now.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataImageStatus {
    /// When the image was last reconciled.
    pub last_reconciled: Option<Time>,

    /// The image attached to the host.
    pub attached_image: Option<AttachedImageReference>,

    /// The last failure to attach or detach.
    pub error: Option<DataImageError>,
}

/// An attached image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct AttachedImageReference {
    pub url: String,
}

/// Failure to attach or detach a DataImage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DataImageError {
    /// Failed attempts in a row.
    pub count: i64,
    /// What went wrong.
    pub message: String,
}

/// Format of a preprovisioning image.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PreprovisioningImageFormat {
    /// A bootable ISO.
    Iso,
    /// A kernel and initramfs.
    Initrd,
}

super::metal3_kind! {
    /// The deploy image built for the BareMetalHost of the same name.
    #[kube(
        kind = "PreprovisioningImage", plural = "preprovisioningimages", singular = "preprovisioningimage",
        status = "PreprovisioningImageStatus", shortname = "ppimg",
        doc = "The deploy ramdisk or ISO for the BareMetalHost of the same name, with its network data built in.",
        printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type=='Ready')].status", description = "Whether the image can be used"),
        printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type=='Ready')].reason", description = "Why the image is or is not ready")
    )]
    pub struct PreprovisioningImageSpec {
        /// Secret with the network data to build into the image.
        pub network_data_name: Option<String>,

        /// CPU architecture the image is for.
        pub architecture: Option<String>,

        /// Formats the host can boot, in order of preference.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub accept_formats: Vec<PreprovisioningImageFormat>,
    }
}

/// The built image.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreprovisioningImageStatus {
    /// URL of the ISO or initramfs.
    #[serde(rename = "imageUrl")]
    pub image_url: Option<String>,

    /// URL of the kernel (initrd format only).
    #[serde(rename = "kernelUrl")]
    pub kernel_url: Option<String>,

    /// Kernel command line the image needs (initrd format only).
    pub extra_kernel_params: Option<String>,

    /// Format of the image.
    pub format: Option<PreprovisioningImageFormat>,

    /// The network data Secret built in, and its resource version.
    pub network_data: Option<SecretStatus>,

    /// CPU architecture of the image.
    pub architecture: Option<String>,

    /// `Ready` and `Error`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A Secret at a given version.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SecretStatus {
    pub name: Option<String>,
    pub version: Option<String>,
}

/// The CPU architecture of this machine as `uname -m` names it: upstream's default
/// for hosts that name none.
pub fn controller_architecture() -> &'static str {
    std::env::consts::ARCH
}
