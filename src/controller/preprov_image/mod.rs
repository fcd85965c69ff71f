//! PreprovisioningImages: the deploy ramdisk or ISO built for one host.
//!
//! Two parts, each behind a setting of its own ([`PreprovImageSettings`]):
//! - the host controller's (upstream's `-build-preprov-image`): each host that will
//!   boot the agent gets a PreprovisioningImage of its name (owned by it, with its
//!   labels, the spec upstream gives it), and its node boots the image's URLs once
//!   the image is ready (`crate::controller::host::preprov_image`);
//! - beyond upstream, bmo fulfils `initrd` images itself ([`build`], [`run`]): bmo's
//!   IPA ramdisk with the host's network data appended as a small cpio archive,
//!   served by bmo's HTTP server, so no image-customization service is needed;
//!   and `iso` images ([`agent_iso`], [`iso`]): an ISO 9660 image written by bmo
//!   (no outside tool) holding the IPA kernel, that ramdisk and boot loaders for
//!   UEFI and BIOS, served by the same HTTP server.

pub mod agent_iso;
pub mod build;
pub mod iso;
pub mod run;
#[cfg(test)]
mod tests;

use clap::Args;

pub use run::{Builds, IsoBuild, run};

/// The PreprovisioningImage settings, flattened into [`crate::config::Config`].
#[derive(Debug, Clone, Default, Args)]
pub struct PreprovImageSettings {
    /// Give each host a PreprovisioningImage and boot the agent from the ramdisk or
    /// ISO it names, once ready (upstream's `-build-preprov-image`).
    #[arg(long = "build-preprov-image", env = "BMO_BUILD_PREPROV_IMAGE")]
    pub build_preprov_image: bool,

    /// Build `initrd` PreprovisioningImages here: bmo's IPA ramdisk with the host's
    /// network data appended, served by bmo's HTTP server (needs BMO_HTTP).
    #[arg(long = "preprov-image-initrd", env = "BMO_PREPROV_IMAGE_INITRD")]
    pub preprov_image_initrd: bool,

    /// Build `iso` PreprovisioningImages here too (for hosts whose BMC boots virtual
    /// media): an ISO of bmo's IPA kernel and ramdisk with the host's network data,
    /// bootable with the loaders found in BMO_IMAGES_DIR (esp.img for UEFI,
    /// isolinux.bin and ldlinux.c32 for BIOS), written under BMO_HTTP_ROOT and
    /// served by bmo's HTTP server (needs BMO_HTTP).
    #[arg(long = "preprov-image-iso", env = "BMO_PREPROV_IMAGE_ISO")]
    pub preprov_image_iso: bool,

    /// The agent's kernel command line in the ISOs bmo builds; it must name Ironic
    /// as hosts reach it (`ipa-api-url=http://IP:6385`), as nothing else does for
    /// an ISO.
    #[arg(
        long = "preprov-image-iso-kernel-params",
        env = "BMO_PREPROV_IMAGE_ISO_KERNEL_PARAMS",
        default_value = "ipa-insecure=1"
    )]
    pub preprov_image_iso_kernel_params: String,
}

/// Why the PreprovisioningImage settings cannot work together with the others.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PreprovImageSettingsError {
    #[error(
        "BMO_PREPROV_IMAGE_INITRD and BMO_PREPROV_IMAGE_ISO serve the images over bmo's HTTP boot server, which is off; set BMO_HTTP=true or unset them"
    )]
    NeedsHttp,
}

impl PreprovImageSettings {
    /// Whether bmo builds PreprovisioningImages itself, in any format.
    pub fn builds_images(&self) -> bool {
        self.preprov_image_initrd || self.preprov_image_iso
    }

    /// Checks the settings against whether bmo's HTTP server runs.
    pub fn check(&self, http: bool) -> Result<(), PreprovImageSettingsError> {
        if self.builds_images() && !http {
            return Err(PreprovImageSettingsError::NeedsHttp);
        }
        Ok(())
    }
}
