//! PreprovisioningImages: the deploy ramdisk or ISO built for one host.
//!
//! Two parts, each behind a setting of its own ([`PreprovImageSettings`]):
//! - the host controller's (upstream's `-build-preprov-image`): each host that will
//!   boot the agent gets a PreprovisioningImage of its name (owned by it, with its
//!   labels, the spec upstream gives it), and its node boots the image's URLs once
//!   the image is ready (`crate::controller::host::preprov_image`);
//! - beyond upstream, bmo fulfils `initrd` images itself ([`build`], [`run`]): bmo's
//!   IPA ramdisk with the host's network data appended as a small cpio archive,
//!   served by bmo's HTTP server, so no image-customization service is needed.

pub mod build;
pub mod run;
#[cfg(test)]
mod tests;

use clap::Args;

pub use run::run;

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
}

/// Why the PreprovisioningImage settings cannot work together with the others.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PreprovImageSettingsError {
    #[error(
        "BMO_PREPROV_IMAGE_INITRD serves the images over bmo's HTTP boot server, which is off; set BMO_HTTP=true or unset BMO_PREPROV_IMAGE_INITRD"
    )]
    NeedsHttp,
}

impl PreprovImageSettings {
    /// Checks the settings against whether bmo's HTTP server runs.
    pub fn check(&self, http: bool) -> Result<(), PreprovImageSettingsError> {
        if self.preprov_image_initrd && !http {
            return Err(PreprovImageSettingsError::NeedsHttp);
        }
        Ok(())
    }
}
