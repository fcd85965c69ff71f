//! The host controller's use of PreprovisioningImages, as upstream's: which hosts
//! want one, the spec it must have, and when a ready image gives the node its
//! deploy ramdisk or ISO. Pure but for [`deploy_ramdisk`], which reads and writes
//! through the host's [`Store`].

use kube::ResourceExt;

use super::store::{Store, StoreError};
use crate::api::images::{IMAGE_ERROR, IMAGE_READY};
use crate::api::{
    AutomatedCleaningMode, BareMetalHost, InspectionMode, OperationalStatus, PreprovisioningImage,
    PreprovisioningImageFormat, PreprovisioningImageSpec, ProvisioningState,
};
use crate::bmc::BmcAddress;
use crate::controller::runtime::store::owner_reference;
use crate::provisioner::DeployRamdisk;

/// Whether `host` should have a PreprovisioningImage now: not while registering or
/// being deleted (nor once deletion was asked), not when provisioned (unless servicing), not when nothing will
/// boot the agent (deprovisioning without cleaning, fast inspection).
pub fn wants_image(host: &BareMetalHost) -> bool {
    if host.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let servicing = host
        .status
        .as_ref()
        .is_some_and(|s| s.operational_status == OperationalStatus::Servicing);
    match host.provisioning_state() {
        ProvisioningState::None
        | ProvisioningState::Unmanaged
        | ProvisioningState::Registering
        | ProvisioningState::Deleting
        | ProvisioningState::PoweringOffBeforeDelete => false,
        ProvisioningState::Provisioned | ProvisioningState::ExternallyProvisioned => servicing,
        ProvisioningState::Deprovisioning => {
            host.spec.automated_cleaning_mode != AutomatedCleaningMode::Disabled
        }
        ProvisioningState::Inspecting => host.spec.inspection_mode != Some(InspectionMode::Fast),
        _ => true,
    }
}

/// Whether the host's next step boots the agent, so that it must wait for a ready
/// image (upstream's states that need one: inspecting, preparing, deprovisioning
/// and servicing).
pub fn needs_image(host: &BareMetalHost) -> bool {
    wants_image(host)
        && matches!(
            host.provisioning_state(),
            ProvisioningState::Inspecting
                | ProvisioningState::Preparing
                | ProvisioningState::Deprovisioning
                | ProvisioningState::Provisioned
                | ProvisioningState::ExternallyProvisioned
        )
}

/// The host's CPU architecture: the spec's, else the inspected one, else this
/// machine's.
pub fn host_architecture(host: &BareMetalHost) -> String {
    let inspected = host
        .status
        .as_ref()
        .and_then(|s| s.hardware.as_ref())
        .and_then(|h| h.cpu.as_ref())
        .and_then(|c| c.arch.clone());
    host.spec
        .architecture
        .clone()
        .filter(|a| !a.is_empty())
        .or(inspected.filter(|a| !a.is_empty()))
        .unwrap_or_else(|| crate::api::images::controller_architecture().to_owned())
}

/// The spec the host's image must have: its preprovisioning network data, its
/// architecture, and ISO (when its BMC boots virtual media) before initrd.
pub fn expected_spec(host: &BareMetalHost) -> PreprovisioningImageSpec {
    let iso = host
        .spec
        .bmc
        .as_ref()
        .and_then(|b| BmcAddress::parse(&b.address).ok())
        .is_some_and(|a| a.kind.supports_iso_boot());
    let mut accept_formats = Vec::new();
    if iso {
        accept_formats.push(PreprovisioningImageFormat::Iso);
    }
    accept_formats.push(PreprovisioningImageFormat::Initrd);
    PreprovisioningImageSpec {
        network_data_name: host
            .spec
            .preprovisioning_network_data_name
            .clone()
            .filter(|n| !n.is_empty()),
        architecture: Some(host_architecture(host)),
        accept_formats,
    }
}

/// The image the host wants written: its name, the host as controlling owner, the
/// host's labels and `spec`.
pub fn desired_image(host: &BareMetalHost, spec: PreprovisioningImageSpec) -> PreprovisioningImage {
    let mut image = PreprovisioningImage::new(&host.name_any(), spec);
    image.metadata.namespace = host.namespace();
    image.metadata.labels = Some(host.labels().clone()).filter(|l| !l.is_empty());
    image.metadata.owner_references = Some(vec![owner_reference(host, true)]);
    image
}

/// Whether `image` lacks the spec, a label or the owner the host gives it.
pub fn out_of_date(
    image: &PreprovisioningImage,
    host: &BareMetalHost,
    spec: &PreprovisioningImageSpec,
) -> bool {
    let labels_missing = host
        .labels()
        .iter()
        .any(|(k, v)| image.labels().get(k) != Some(v));
    let owned = image
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == host.metadata.uid.as_ref() && o.controller == Some(true));
    &image.spec != spec || labels_missing || !owned
}

/// What a host can take from its image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageUse {
    /// The image is ready: boot this.
    Ready(DeployRamdisk),
    /// Not (yet) usable, and why.
    Pending(String),
    /// Building the image failed; its `Error` condition says why.
    Failed(String),
}

/// What `image` gives a host that expects `spec`, whose network data Secret is at
/// `secret_version` now; `default_kernel` is the kernel for an initrd image that
/// names none. Upstream's checks, in its order: architecture, format, network data
/// version and name, the `Error` condition, then `Ready` at the current generation.
pub fn image_use(
    image: &PreprovisioningImage,
    spec: &PreprovisioningImageSpec,
    secret_version: Option<&str>,
    default_kernel: Option<&str>,
) -> ImageUse {
    let Some(status) = &image.status else {
        return ImageUse::Pending("the image has no status yet".into());
    };
    if image.metadata.deletion_timestamp.is_some() {
        return ImageUse::Pending("the image is being deleted".into());
    }
    if status.architecture != spec.architecture {
        return ImageUse::Pending("the image is for another architecture".into());
    }
    let Some(format) = status.format.filter(|f| spec.accept_formats.contains(f)) else {
        return ImageUse::Pending("the image has no accepted format".into());
    };
    let network = status.network_data.clone().unwrap_or_default();
    if spec.network_data_name.is_some() && network.version.as_deref() != secret_version {
        return ImageUse::Pending("the image's network data is out of date".into());
    }
    if network.name != spec.network_data_name {
        return ImageUse::Pending("the image holds another Secret's network data".into());
    }
    let condition = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_);
    if let Some(error) = condition(IMAGE_ERROR).filter(|c| c.status == "True") {
        return ImageUse::Failed(error.message.clone());
    }
    let ready = condition(IMAGE_READY)
        .is_some_and(|c| c.status == "True" && c.observed_generation == image.metadata.generation);
    let Some(url) = status.image_url.clone().filter(|u| ready && !u.is_empty()) else {
        return ImageUse::Pending("the image is not ready".into());
    };
    let extra_kernel_params = status.extra_kernel_params.clone().filter(|p| !p.is_empty());
    match format {
        PreprovisioningImageFormat::Iso => ImageUse::Ready(DeployRamdisk {
            iso_url: Some(url),
            extra_kernel_params,
            ..DeployRamdisk::default()
        }),
        PreprovisioningImageFormat::Initrd => {
            let kernel = status
                .kernel_url
                .clone()
                .filter(|k| !k.is_empty())
                .or(default_kernel.map(str::to_owned));
            match kernel {
                Some(kernel) => ImageUse::Ready(DeployRamdisk {
                    kernel_url: Some(kernel),
                    ramdisk_url: Some(url),
                    extra_kernel_params,
                    iso_url: None,
                }),
                None => ImageUse::Pending(
                    "the initrd image names no kernel and DEPLOY_KERNEL_URL is unset".into(),
                ),
            }
        }
    }
}

/// Makes sure the host's PreprovisioningImage exists as [`expected_spec`] says, and
/// what the host can take from it; `default` gives the kernel for an initrd image
/// that names none.
pub async fn deploy_ramdisk<S: Store>(
    host: &BareMetalHost,
    store: &S,
    default: &DeployRamdisk,
) -> Result<ImageUse, StoreError> {
    let spec = expected_spec(host);
    let image = store.namesake::<PreprovisioningImage>(host).await?;
    let Some(image) =
        image.filter(|i| i.metadata.deletion_timestamp.is_some() || !out_of_date(i, host, &spec))
    else {
        tracing::info!("writing the host's PreprovisioningImage");
        store
            .apply_preprovisioning_image(host, &desired_image(host, spec))
            .await?;
        return Ok(ImageUse::Pending("the image was just written".into()));
    };
    let secret_version = match &spec.network_data_name {
        Some(name) => store
            .secret(&host.namespace().unwrap_or_default(), name)
            .await?
            .and_then(|s| s.metadata.resource_version),
        None => None,
    };
    Ok(image_use(
        &image,
        &spec,
        secret_version.as_deref(),
        default.kernel_url.as_deref(),
    ))
}
