//! Fulfilling a PreprovisioningImage in the `initrd` or `iso` format, decided without
//! I/O: the format (the first the image accepts that bmo builds), the status
//! upstream's image-customization service would write (URLs, format, architecture,
//! network data name and version, `Ready` and `Error` with upstream's reasons), the
//! cpio archive to append to bmo's IPA ramdisk (served after it, or written into the
//! ISO after it: [`super::agent_iso`]), and the event to post.
//!
//! The network data goes in at `mnt/config/openstack/latest/network_data.json`: the
//! OpenStack config drive layout, at the mount point where the agent ramdisks built
//! by ironic-python-agent-builder (its `simple-init` element runs glean) look for a
//! config drive. It is the file Ironic itself puts on the virtual media config drive
//! of a ramdisk, so the agent reads it the same way whichever way it came.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use crate::api::images::SecretStatus;
use crate::api::images::{IMAGE_ERROR, IMAGE_READY};
use crate::api::{PreprovisioningImage, PreprovisioningImageFormat, PreprovisioningImageStatus};
use crate::controller::preprov_image::agent_iso::{ESP_IMAGE, ISOLINUX_BIN, LDLINUX_C32, Loaders};
use crate::controller::runtime::conditions::{HasConditions, set_in as set_condition};
use crate::controller::runtime::store::HostEvent;
use crate::netboot::cpio;

/// Where the network data goes in the ramdisk (see the module's comment).
pub const NETWORK_DATA_PATH: &str = "mnt/config/openstack/latest/network_data.json";
/// The Secret keys the network data is read from, first found wins (the host's).
pub const NETWORK_DATA_KEYS: &[&str] = &["networkData", "value"];
/// Path segment of an image without network data.
pub const NO_NETWORK_DATA: &str = "none";

/// Upstream's condition reasons.
pub const REASON_SUCCESS: &str = "ImageSuccess";
pub const REASON_CONFIGURATION_ERROR: &str = "ConfigurationError";
pub const REASON_MISSING_NETWORK_DATA: &str = "MissingNetworkData";
pub const REASON_BUILD_INVALID: &str = "ImageBuildInvalid";

/// The image's network data Secret, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkData {
    /// The image names none.
    None,
    /// The image names `name`, which does not exist.
    Missing { name: String },
    /// Secret `name` at `version`; `data` from its first [`NETWORK_DATA_KEYS`] key.
    Found {
        name: String,
        version: String,
        data: Option<Vec<u8>>,
    },
}

/// What building needs to know of bmo's HTTP server, as of now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Whether bmo builds `initrd` images (`BMO_PREPROV_IMAGE_INITRD`).
    pub initrd: bool,
    /// How bmo builds `iso` images, when it does (`BMO_PREPROV_IMAGE_ISO`).
    pub iso: Option<IsoServer>,
    /// Whether bmo's IPA ramdisk is in the images directory.
    pub base_ramdisk: bool,
    /// Where it should be (for messages).
    pub base_ramdisk_path: String,
    /// The kernel URL to give with the ramdisk.
    pub kernel_url: String,
    /// The URL the image gets for a network data version.
    pub ramdisk_url: String,
}

/// What building an ISO needs to know, as of now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsoServer {
    /// The URL the image's ISO gets for a network data version.
    pub url: String,
    /// The boot loaders in the images directory.
    pub loaders: Loaders,
    /// The agent's kernel command line written into the ISO.
    pub kernel_params: String,
}

/// The kernel parameter that tells the agent where Ironic is.
pub const API_URL_PARAM: &str = "ipa-api-url=";

/// What a reconcile of an image does.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub status: PreprovisioningImageStatus,
    /// The archive to serve after the IPA ramdisk, at this version.
    pub archive: Option<(String, Vec<u8>)>,
    /// An event to post (only when the status changes).
    pub event: Option<HostEvent>,
}

/// The host the image is for: its controlling owner, else the image's name.
fn host_of(image: &PreprovisioningImage) -> String {
    let name = image
        .owner_references()
        .iter()
        .find(|o| o.kind == "BareMetalHost")
        .map_or_else(|| image.name_any(), |o| o.name.clone());
    format!("{}/{name}", image.namespace().unwrap_or_default())
}

/// The version segment of an image's URL for `network`.
pub fn version_of(network: &NetworkData) -> &str {
    match network {
        NetworkData::Found { version, .. } => version,
        _ => NO_NETWORK_DATA,
    }
}

/// Decides the status of `image` (read at `now`), the archive and the event.
/// `architecture` is the one bmo's IPA ramdisk is built for.
pub fn decide(
    image: &PreprovisioningImage,
    network: &NetworkData,
    server: &Server,
    architecture: &str,
    now: &Time,
) -> Decision {
    let (format, status_network, json) = match inputs(image, network, server, architecture) {
        Ok(inputs) => inputs,
        Err((reason, message)) => return failed(image, reason, message, now),
    };
    let entries: Vec<cpio::Entry> = json
        .map(|data| cpio::Entry {
            path: NETWORK_DATA_PATH.into(),
            data,
        })
        .into_iter()
        .collect();
    let mut status = image.status.clone().unwrap_or_default();
    match (format, &server.iso) {
        (PreprovisioningImageFormat::Iso, Some(iso)) => {
            status.image_url = Some(iso.url.clone());
            status.kernel_url = None;
        }
        _ => {
            status.image_url = Some(server.ramdisk_url.clone());
            status.kernel_url = Some(server.kernel_url.clone());
        }
    }
    status.extra_kernel_params = None;
    status.format = Some(format);
    status.architecture = image.spec.architecture.clone().filter(|a| !a.is_empty());
    status.network_data = status_network;
    set_condition(
        &mut status,
        image,
        IMAGE_READY,
        true,
        REASON_SUCCESS,
        "Generated image",
        now,
    );
    set_condition(
        &mut status,
        image,
        IMAGE_ERROR,
        false,
        REASON_SUCCESS,
        "",
        now,
    );
    Decision {
        status,
        archive: Some((version_of(network).to_owned(), cpio::archive(&entries))),
        event: None,
    }
}

/// The format, the network data Secret for the status, and the network data as JSON.
type Inputs = (
    PreprovisioningImageFormat,
    Option<SecretStatus>,
    Option<Vec<u8>>,
);

/// The first format `image` accepts that bmo builds, or why there is none.
fn format_of(
    image: &PreprovisioningImage,
    server: &Server,
) -> Result<PreprovisioningImageFormat, (&'static str, String)> {
    let built = |f: &PreprovisioningImageFormat| match f {
        PreprovisioningImageFormat::Initrd => server.initrd,
        PreprovisioningImageFormat::Iso => server.iso.is_some(),
    };
    if let Some(format) = image.spec.accept_formats.iter().copied().find(built) {
        return Ok(format);
    }
    let builds: Vec<&str> = [
        (server.initrd, "initrd (BMO_PREPROV_IMAGE_INITRD)"),
        (server.iso.is_some(), "iso (BMO_PREPROV_IMAGE_ISO)"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    Err((
        REASON_CONFIGURATION_ERROR,
        format!(
            "No acceptable image format supported: bmo builds {}",
            if builds.is_empty() {
                "none".to_owned()
            } else {
                builds.join(" and ")
            }
        ),
    ))
}

/// Why the ISO cannot be built: no boot loader, or no Ironic URL for the agent.
fn iso_problem(iso: &IsoServer, base_dir: &str) -> Option<(&'static str, String)> {
    if !iso.loaders.uefi && !iso.loaders.bios {
        return Some((
            REASON_BUILD_INVALID,
            format!(
                "no boot loader for the ISO next to bmo's IPA ramdisk ({base_dir}): put {ESP_IMAGE} there (UEFI), or {ISOLINUX_BIN} and {LDLINUX_C32} (BIOS), or both"
            ),
        ));
    }
    if !iso
        .kernel_params
        .split_whitespace()
        .any(|p| p.starts_with(API_URL_PARAM))
    {
        return Some((
            REASON_CONFIGURATION_ERROR,
            format!(
                "an ISO gets no kernel parameters from Ironic, so the agent on it must be told where Ironic is: add {API_URL_PARAM}<Ironic's URL as hosts reach it> to BMO_PREPROV_IMAGE_ISO_KERNEL_PARAMS"
            ),
        ));
    }
    None
}

/// What building `image` takes (its format, the network data Secret for the status,
/// and the network data as JSON), or why it cannot be built (reason, message).
fn inputs(
    image: &PreprovisioningImage,
    network: &NetworkData,
    server: &Server,
    architecture: &str,
) -> Result<Inputs, (&'static str, String)> {
    let wanted_arch = image.spec.architecture.as_deref().filter(|a| !a.is_empty());
    let secret = image.spec.network_data_name.clone().unwrap_or_default();
    let namespace = image.namespace().unwrap_or_default();
    if wanted_arch.is_some_and(|a| a != architecture) {
        return Err((
            REASON_CONFIGURATION_ERROR,
            format!(
                "Architecture not supported: bmo's IPA ramdisk is for {architecture}; set the host's spec.architecture to {architecture} or build this image elsewhere"
            ),
        ));
    }
    let format = format_of(image, server)?;
    let (status_network, data) = match network {
        NetworkData::None => (None, None),
        NetworkData::Missing { name } => {
            return Err((
                REASON_MISSING_NETWORK_DATA,
                format!(
                    "NetworkData secret not found: host {host} names Secret {namespace}/{name} in spec.preprovisioningNetworkDataName, which does not exist; create it with the network data under the key networkData, or clear the field",
                    host = host_of(image)
                ),
            ));
        }
        NetworkData::Found {
            name,
            version,
            data,
        } => (
            Some(SecretStatus {
                name: Some(name.clone()),
                version: Some(version.clone()),
            }),
            data.as_deref(),
        ),
    };
    let json = match data.map(network_data_json) {
        None => None,
        Some(Ok(json)) => Some(json),
        Some(Err(problem)) => {
            return Err((
                REASON_BUILD_INVALID,
                format!(
                    "the network data in Secret {namespace}/{secret} (host {host}) {problem}; fix the Secret",
                    host = host_of(image)
                ),
            ));
        }
    };
    if !server.base_ramdisk {
        return Err((
            REASON_BUILD_INVALID,
            format!(
                "bmo's IPA ramdisk is not at {}; put it there (BMO_IMAGES_DIR) to build host {}'s image",
                server.base_ramdisk_path,
                host_of(image)
            ),
        ));
    }
    if let (PreprovisioningImageFormat::Iso, Some(iso)) = (format, &server.iso) {
        let dir = std::path::Path::new(&server.base_ramdisk_path)
            .parent()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        if let Some(problem) = iso_problem(iso, &dir) {
            return Err(problem);
        }
    }
    Ok((format, status_network, json))
}

/// The network data as JSON text: JSON is kept as written, YAML converted.
fn network_data_json(bytes: &[u8]) -> Result<Vec<u8>, &'static str> {
    if serde_json::from_slice::<serde_json::Value>(bytes).is_ok() {
        return Ok(bytes.to_vec());
    }
    let text = std::str::from_utf8(bytes).map_err(|_| "is not UTF-8 text")?;
    let value = serde_saphyr::from_str::<serde_json::Value>(text)
        .map_err(|_| "is neither JSON nor YAML")?;
    serde_json::to_vec(&value).map_err(|_| "cannot be written as JSON")
}

/// The status of an image that cannot be built: no URL, `Ready` false and `Error`
/// true with `reason`; an event when that is news.
pub fn failed(image: &PreprovisioningImage, reason: &str, message: String, now: &Time) -> Decision {
    let before = image.status.clone().unwrap_or_default();
    let mut status = before.clone();
    status.image_url = None;
    set_condition(&mut status, image, IMAGE_READY, false, reason, "", now);
    set_condition(&mut status, image, IMAGE_ERROR, true, reason, &message, now);
    let news = before.conditions.iter().all(|c| {
        c.type_ != IMAGE_ERROR || c.status != "True" || c.reason != reason || c.message != message
    });
    Decision {
        status,
        archive: None,
        event: news.then(|| HostEvent::warning(reason, &message)),
    }
}

impl HasConditions for PreprovisioningImageStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}
