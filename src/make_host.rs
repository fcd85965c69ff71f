//! `bmo make-host`: a BareMetalHost and its BMC Secret from command-line flags.
//!
//! Every input is checked the way the CRD (schema patterns and CEL rules in
//! [`crate::api::crd`]) and the controller check it, so what this prints is accepted
//! by `kubectl apply` and does not fail later on a typo. The output holds the BMC
//! password (it is a Secret manifest); it is written to stdout only, never logged.

use std::collections::BTreeMap;

use clap::Args;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use serde::de::DeserializeOwned;

use crate::api::{
    BareMetalHost, BareMetalHostSpec, BmcDetails, BootMode, ChecksumType, Image, ImageFormat,
};
use crate::bmc::{BmcAddress, BmcAddressError, parse_mac};

use crate::api::host::HARDWARE_PROFILES;

/// Flags of `bmo make-host`.
#[derive(Debug, Clone, Args)]
pub struct MakeHostArgs {
    /// Host name (metadata.name): a DNS subdomain, not a UUID.
    pub name: String,

    /// Namespace of the host and its Secret (omitted from the output when unset).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,

    /// BMC address, as spec.bmc.address (e.g. redfish://10.0.0.5/redfish/v1/Systems/1).
    #[arg(long, value_name = "ADDRESS")]
    pub bmc_address: String,

    /// BMC user name.
    #[arg(long, env = "BMC_USERNAME", value_name = "USER")]
    pub username: String,

    /// BMC password; prefer the environment variable to keep it out of shell history.
    #[arg(
        long,
        env = "BMC_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD"
    )]
    pub password: String,

    /// Accept any TLS certificate from the BMC (spec.bmc.disableCertificateVerification).
    #[arg(long)]
    pub disable_certificate_verification: bool,

    /// MAC address of the NIC the host boots from (spec.bootMACAddress).
    #[arg(long, value_name = "MAC")]
    pub boot_mac: Option<String>,

    /// Image to deploy (spec.image.url): http, https, ftp, gopher or oci URL.
    #[arg(long, value_name = "URL")]
    pub image_url: Option<String>,

    /// The image's checksum or the URL of a checksum file (spec.image.checksum).
    #[arg(long, value_name = "CHECKSUM", requires = "image_url")]
    pub image_checksum: Option<String>,

    /// md5, sha256, sha512 or auto (spec.image.checksumType).
    #[arg(long, value_name = "TYPE", value_parser = api_enum::<ChecksumType>, requires = "image_url")]
    pub image_checksum_type: Option<ChecksumType>,

    /// raw, qcow2, vdi, vmdk or live-iso (spec.image.format).
    #[arg(long, value_name = "FORMAT", value_parser = api_enum::<ImageFormat>, requires = "image_url")]
    pub image_format: Option<ImageFormat>,

    /// UEFI, UEFISecureBoot or legacy (spec.bootMode).
    #[arg(long, value_name = "MODE", value_parser = api_enum::<BootMode>)]
    pub boot_mode: Option<BootMode>,

    /// Deprecated hardware profile (spec.hardwareProfile): unknown, libvirt, dell,
    /// dell-raid, openstack or empty.
    #[arg(long, value_name = "PROFILE")]
    pub hardware_profile: Option<String>,

    /// The object using this host, as KIND/NAME (spec.consumerRef), e.g.
    /// Metal3Machine/worker-0; it lives in the host's namespace.
    #[arg(long, value_name = "KIND/NAME")]
    pub consumer: Option<String>,

    /// apiVersion of the consumer (e.g. infrastructure.cluster.x-k8s.io/v1beta1).
    #[arg(long, value_name = "API_VERSION", requires = "consumer")]
    pub consumer_api_version: Option<String>,

    /// Leave the host powered off (spec.online: false).
    #[arg(long)]
    pub offline: bool,
}

/// An input `bmo make-host` refuses; the message names the flag and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MakeHostError {
    #[error("--{flag} '{value}' is not a valid Kubernetes name: {why}")]
    BadName {
        flag: &'static str,
        value: String,
        why: String,
    },
    #[error("--bmc-address: {0}")]
    BmcAddress(BmcAddressError),
    #[error("--boot-mac: {0}")]
    BootMac(BmcAddressError),
    #[error("--{flag} is empty; the BMC Secret needs a {flag}")]
    EmptyCredential { flag: &'static str },
    #[error("--bmc-address is longer than 2048 characters (spec.bmc.address)")]
    BmcAddressTooLong,
    #[error("--boot-mac is required for libvirt:// BMC addresses (spec.bootMACAddress)")]
    BootMacRequired,
    #[error(
        "--boot-mode UEFISecureBoot is not supported by IPMI or libvirt BMCs: use a Redfish-based --bmc-address or another boot mode"
    )]
    SecureBootUnsupported,
    #[error(
        "--image-url '{0}' must be an absolute URL with scheme http, https, ftp, gopher or oci, without spaces (at most 4096 characters)"
    )]
    BadImageUrl(String),
    #[error(
        "--image-checksum is required unless --image-format is live-iso or the image is oci://"
    )]
    ChecksumRequired,
    #[error("--image-checksum must be empty for oci:// images (the registry digest is checked)")]
    ChecksumForbidden,
    #[error("--hardware-profile '{0}' is unknown; use one of: {profiles}", profiles = HARDWARE_PROFILES.join(", "))]
    UnknownHardwareProfile(String),
    #[error("--consumer '{0}' must be KIND/NAME, e.g. Metal3Machine/worker-0")]
    BadConsumer(String),
}

/// The two manifests `bmo make-host` prints.
#[derive(Debug, Clone)]
pub struct HostManifests {
    pub secret: Secret,
    pub host: BareMetalHost,
}

impl HostManifests {
    /// Both as one YAML stream: the Secret first, so `kubectl apply -f -` creates it
    /// before the host that names it.
    pub fn to_yaml(&self) -> Result<String, serde_norway::Error> {
        Ok(format!(
            "---\n{}---\n{}",
            serde_norway::to_string(&self.secret)?,
            serde_norway::to_string(&self.host)?
        ))
    }
}

/// Name of the BMC Secret for host `name` (upstream's convention).
pub fn secret_name(host: &str) -> String {
    format!("{host}-bmc-secret")
}

/// Checks every flag and builds the manifests.
pub fn make_host(args: &MakeHostArgs) -> Result<HostManifests, MakeHostError> {
    check_subdomain("name", &args.name)?;
    check_not_uuid(&args.name)?;
    if let Some(ns) = &args.namespace {
        check_label("namespace", ns)?;
    }
    if args.bmc_address.len() > 2048 {
        return Err(MakeHostError::BmcAddressTooLong);
    }
    let bmc = BmcAddress::parse(&args.bmc_address).map_err(MakeHostError::BmcAddress)?;
    // The controller trims the Secret's values, so blank ones count as missing.
    if args.username.trim().is_empty() {
        return Err(MakeHostError::EmptyCredential { flag: "username" });
    }
    if args.password.trim().is_empty() {
        return Err(MakeHostError::EmptyCredential { flag: "password" });
    }
    let boot_mac = args
        .boot_mac
        .as_deref()
        .map(parse_mac)
        .transpose()
        .map_err(MakeHostError::BootMac)?;
    if boot_mac.is_none() && bmc.kind.needs_boot_mac() {
        return Err(MakeHostError::BootMacRequired);
    }
    if args.boot_mode == Some(BootMode::UefiSecureBoot) && !bmc.kind.supports_secure_boot() {
        return Err(MakeHostError::SecureBootUnsupported);
    }
    let image = args
        .image_url
        .as_ref()
        .map(|url| image(args, url))
        .transpose()?;
    if let Some(profile) = &args.hardware_profile
        && !HARDWARE_PROFILES.contains(&profile.as_str())
    {
        return Err(MakeHostError::UnknownHardwareProfile(profile.clone()));
    }
    let consumer_ref = args
        .consumer
        .as_ref()
        .map(|c| consumer(c, args))
        .transpose()?;

    let secret_name = secret_name(&args.name);
    let secret = credentials_secret(args, &secret_name);

    let mut host = BareMetalHost::new(
        &args.name,
        BareMetalHostSpec {
            bmc: Some(BmcDetails {
                address: args.bmc_address.trim().to_owned(),
                credentials_name: secret_name,
                disable_certificate_verification: args.disable_certificate_verification,
            }),
            boot_mac_address: boot_mac,
            boot_mode: args.boot_mode,
            online: !args.offline,
            image,
            hardware_profile: args.hardware_profile.clone(),
            consumer_ref,
            ..Default::default()
        },
    );
    host.metadata.namespace = args.namespace.clone();
    Ok(HostManifests { secret, host })
}

/// The BMC credentials Secret `secret_name`, with the values trimmed as the
/// controller reads them.
fn credentials_secret(args: &MakeHostArgs, secret_name: &str) -> Secret {
    let mut secret = Secret {
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([
            (
                "username".to_owned(),
                ByteString(args.username.trim().as_bytes().to_vec()),
            ),
            (
                "password".to_owned(),
                ByteString(args.password.trim().as_bytes().to_vec()),
            ),
        ])),
        ..Default::default()
    };
    secret.metadata.name = Some(secret_name.to_owned());
    secret.metadata.namespace = args.namespace.clone();
    secret
}

fn image(args: &MakeHostArgs, url: &str) -> Result<Image, MakeHostError> {
    let lower = url.to_ascii_lowercase();
    let scheme_ok = ["http://", "https://", "ftp://", "gopher://", "oci://"]
        .iter()
        .any(|s| lower.starts_with(s) && lower.len() > s.len());
    if !scheme_ok || url.len() > 4096 || url.chars().any(char::is_whitespace) {
        return Err(MakeHostError::BadImageUrl(url.to_owned()));
    }
    let oci = lower.starts_with("oci://");
    let checksum = args.image_checksum.clone().filter(|c| !c.is_empty());
    let live_iso = args.image_format == Some(ImageFormat::LiveIso);
    if oci && checksum.is_some() {
        return Err(MakeHostError::ChecksumForbidden);
    }
    if !oci && !live_iso && checksum.is_none() {
        return Err(MakeHostError::ChecksumRequired);
    }
    Ok(Image {
        url: url.to_owned(),
        checksum,
        checksum_type: args.image_checksum_type,
        format: args.image_format,
        oci_auth_secret_name: None,
    })
}

fn consumer(value: &str, args: &MakeHostArgs) -> Result<ObjectReference, MakeHostError> {
    let bad = || MakeHostError::BadConsumer(value.to_owned());
    let (kind, name) = value.split_once('/').ok_or_else(bad)?;
    if kind.is_empty() || !kind.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(bad());
    }
    check_subdomain("consumer", name)?;
    Ok(ObjectReference {
        kind: Some(kind.to_owned()),
        name: Some(name.to_owned()),
        namespace: args.namespace.clone(),
        api_version: args.consumer_api_version.clone(),
        ..Default::default()
    })
}

/// clap parser for an API enum, through its serde names (the CRD's enum values).
fn api_enum<T: DeserializeOwned>(value: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(value.to_owned())).map_err(|_| {
        format!("'{value}' is not one of the values the BareMetalHost CRD accepts (see --help)")
    })
}

/// RFC 1123 subdomain, as kube-apiserver requires of metadata.name.
fn check_subdomain(flag: &'static str, value: &str) -> Result<(), MakeHostError> {
    let why = if value.is_empty() {
        Some("it is empty".to_owned())
    } else if value.len() > 253 {
        Some("it is longer than 253 characters".to_owned())
    } else if !value.split('.').all(is_label) {
        Some(
            "use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
                .to_owned(),
        )
    } else {
        None
    };
    match why {
        Some(why) => Err(MakeHostError::BadName {
            flag,
            value: value.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

/// RFC 1123 label, as kube-apiserver requires of a namespace.
fn check_label(flag: &'static str, value: &str) -> Result<(), MakeHostError> {
    if value.len() <= 63 && is_label(value) {
        Ok(())
    } else {
        Err(MakeHostError::BadName {
            flag,
            value: value.to_owned(),
            why: "use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit".into(),
        })
    }
}

fn is_label(part: &str) -> bool {
    let bytes = part.as_bytes();
    !bytes.is_empty()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// The CRD's first rule: Ironic would take a UUID-shaped name for a node UUID.
fn check_not_uuid(name: &str) -> Result<(), MakeHostError> {
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let plain = name.len() == 32 && hex(name);
    let parts: Vec<&str> = name.split('-').collect();
    let dashed = parts.len() == 5
        && parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts.iter().all(|p| hex(p));
    if plain || dashed {
        Err(MakeHostError::BadName {
            flag: "name",
            value: name.to_owned(),
            why: "it is a UUID, which Ironic would take for a node UUID; choose another name"
                .into(),
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: MakeHostArgs,
    }

    fn parse(extra: &[&str]) -> Result<MakeHostArgs, clap::Error> {
        let mut argv = vec![
            "make-host",
            "worker-0",
            "--bmc-address",
            "redfish://10.0.0.5/redfish/v1/Systems/1",
            "--username",
            "admin",
            "--password",
            "s3cret",
        ];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|c| c.args)
    }

    fn make(extra: &[&str]) -> Result<HostManifests, MakeHostError> {
        make_host(&parse(extra).expect("flags parse"))
    }

    fn yaml_docs(m: &HostManifests) -> Vec<serde_json::Value> {
        m.to_yaml()
            .unwrap()
            .split("---\n")
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_norway::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn full_host_prints_secret_then_host_with_every_flag() {
        let m = make(&[
            "-n",
            "metal3",
            "--boot-mac",
            "52-54-00-AB-CD-EF",
            "--image-url",
            "http://images.example/ubuntu.qcow2",
            "--image-checksum",
            "http://images.example/ubuntu.qcow2.sha256sum",
            "--image-checksum-type",
            "sha256",
            "--image-format",
            "qcow2",
            "--boot-mode",
            "UEFISecureBoot",
            "--hardware-profile",
            "dell",
            "--consumer",
            "Metal3Machine/worker-0-abc",
            "--consumer-api-version",
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "--disable-certificate-verification",
        ])
        .unwrap();
        let docs = yaml_docs(&m);
        assert_eq!(docs.len(), 2);
        assert_eq!(
            docs[0],
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "worker-0-bmc-secret", "namespace": "metal3"},
                "type": "Opaque",
                "data": {"username": "YWRtaW4=", "password": "czNjcmV0"}
            })
        );
        assert_eq!(
            docs[1],
            serde_json::json!({
                "apiVersion": "metal3.io/v1alpha1",
                "kind": "BareMetalHost",
                "metadata": {"name": "worker-0", "namespace": "metal3"},
                "spec": {
                    "online": true,
                    "bootMACAddress": "52:54:00:ab:cd:ef",
                    "bootMode": "UEFISecureBoot",
                    "hardwareProfile": "dell",
                    "automatedCleaningMode": "metadata",
                    "bmc": {
                        "address": "redfish://10.0.0.5/redfish/v1/Systems/1",
                        "credentialsName": "worker-0-bmc-secret",
                        "disableCertificateVerification": true
                    },
                    "image": {
                        "url": "http://images.example/ubuntu.qcow2",
                        "checksum": "http://images.example/ubuntu.qcow2.sha256sum",
                        "checksumType": "sha256",
                        "format": "qcow2"
                    },
                    "consumerRef": {
                        "kind": "Metal3Machine",
                        "name": "worker-0-abc",
                        "namespace": "metal3",
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1"
                    }
                }
            })
        );
        // And it reads back as the API type.
        let host: BareMetalHost = serde_json::from_value(docs[1].clone()).unwrap();
        assert_eq!(host.spec, m.host.spec);
    }

    #[test]
    fn minimal_host_has_no_namespace_image_or_mac() {
        let m = make(&["--offline"]).unwrap();
        let docs = yaml_docs(&m);
        assert_eq!(docs[1]["metadata"], serde_json::json!({"name": "worker-0"}));
        let spec = &docs[1]["spec"];
        assert_eq!(spec["online"], false);
        assert!(spec.get("image").is_none() && spec.get("bootMACAddress").is_none());
        assert!(docs[0]["metadata"].get("namespace").is_none());
    }

    #[test]
    fn credentials_are_trimmed_like_the_controller_reads_them() {
        let args = MakeHostArgs {
            username: " admin\n".into(),
            ..parse(&[]).unwrap()
        };
        let m = make_host(&args).unwrap();
        let data = m.secret.data.unwrap();
        assert_eq!(data["username"].0, b"admin");
    }

    #[test]
    fn live_iso_and_oci_images_need_no_checksum() {
        make(&[
            "--image-url",
            "https://images.example/live.iso",
            "--image-format",
            "live-iso",
        ])
        .unwrap();
        make(&["--image-url", "oci://registry.example/os:1"]).unwrap();
    }

    #[test]
    fn invalid_inputs_are_refused_naming_the_flag() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--image-url", "http://x/os.img"],
                "--image-checksum is required",
            ),
            (
                &["--image-url", "oci://r/os:1", "--image-checksum", "abc"],
                "--image-checksum must be empty",
            ),
            (
                &["--image-url", "file:///os.img", "--image-checksum", "a"],
                "--image-url",
            ),
            (
                &["--image-url", "http://x/a b", "--image-checksum", "a"],
                "--image-url",
            ),
            (&["--boot-mac", "52:54:00:12:34"], "--boot-mac"),
            (&["--hardware-profile", "hp"], "--hardware-profile 'hp'"),
            (&["--consumer", "worker-0"], "--consumer"),
            (&["--consumer", "Metal3Machine/Worker_0"], "--consumer"),
            (&["-n", "Metal3"], "--namespace"),
        ];
        for (flags, expected) in cases {
            let e = make(flags).unwrap_err().to_string();
            assert!(e.contains(expected), "{flags:?}: {e}");
        }
    }

    #[test]
    fn names_follow_kubernetes_and_the_crds_uuid_rule() {
        for bad in [
            "Worker-0",
            "-worker",
            "worker_0",
            "",
            "0123456789abcdef0123456789abcdef",
            "01234567-89ab-cdef-0123-456789abcdef",
        ] {
            let args = MakeHostArgs {
                name: bad.into(),
                ..parse(&[]).unwrap()
            };
            let e = make_host(&args).unwrap_err().to_string();
            assert!(e.starts_with("--name"), "{bad}: {e}");
        }
        for good in ["worker-0", "rack1.worker-0", "0"] {
            let args = MakeHostArgs {
                name: good.into(),
                ..parse(&[]).unwrap()
            };
            make_host(&args).unwrap();
        }
    }

    #[test]
    fn bmc_rules_match_the_crd() {
        let with_bmc = |address: &str, extra: &[&str]| {
            let mut args = parse(extra).unwrap();
            args.bmc_address = address.into();
            make_host(&args)
        };
        let e = with_bmc("bogus://10.0.0.1", &[]).unwrap_err().to_string();
        assert!(
            e.starts_with("--bmc-address") && e.contains("unknown BMC type"),
            "{e}"
        );
        let e = with_bmc("libvirt://10.0.0.1/", &[]).unwrap_err();
        assert!(matches!(e, MakeHostError::BootMacRequired), "{e}");
        with_bmc("libvirt://10.0.0.1/", &["--boot-mac", "52:54:00:12:34:56"]).unwrap();
        let e = with_bmc("ipmi://10.0.0.1", &["--boot-mode", "UEFISecureBoot"]).unwrap_err();
        assert_eq!(e, MakeHostError::SecureBootUnsupported);
        let e = with_bmc("redfish://admin:pw@10.0.0.1/", &[])
            .unwrap_err()
            .to_string();
        assert!(!e.contains("pw@"), "password repeated in {e}");
    }

    #[test]
    fn enum_flags_take_exactly_the_crds_values() {
        assert!(parse(&["--boot-mode", "uefi"]).is_err());
        assert!(parse(&["--image-url", "http://x/a", "--image-checksum-type", "sha1"]).is_err());
        assert!(parse(&["--image-url", "http://x/a", "--image-format", "iso"]).is_err());
        assert!(parse(&["--boot-mode", "legacy"]).is_ok());
    }

    #[test]
    fn empty_credentials_are_refused() {
        let args = MakeHostArgs {
            password: "  ".into(),
            ..parse(&[]).unwrap()
        };
        assert_eq!(
            make_host(&args).unwrap_err(),
            MakeHostError::EmptyCredential { flag: "password" }
        );
    }
}
