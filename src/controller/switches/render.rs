//! The switch configuration file Ironic's networking reads: one INI section per
//! BareMetalSwitch of a namespace, built from the switch's spec and its credentials
//! Secret. Pure: the caller loads the Secrets and writes the result.

use std::collections::BTreeMap;

use crate::api::BareMetalSwitch;
use crate::api::network::SwitchDriver;

/// Key of the configuration file in the configuration Secret (upstream's).
pub const CONFIG_KEY: &str = "switch-configs.conf";

/// First line of the file: who writes it.
const HEADER: &str =
    "# Written by bmo from this namespace's BareMetalSwitch objects; edits are overwritten.\n\n";

/// Why one switch is left out of the file. The message names the Secret, what is
/// wrong and the fix; it never holds a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error(
        "spec.credentials is not set: name a Secret with username and password (or ssh-privatekey)"
    )]
    NoReference,
    #[error(
        "credentials Secret {namespace}/{name} not found: create it with username and password (or ssh-privatekey)"
    )]
    SecretMissing { namespace: String, name: String },
    #[error("credentials Secret {namespace}/{name} has no {key:?} key: add it")]
    KeyMissing {
        namespace: String,
        name: String,
        key: &'static str,
    },
    #[error(
        "credentials Secret {namespace}/{name} has neither \"password\" nor \"ssh-privatekey\": add one"
    )]
    NoSecretKey { namespace: String, name: String },
    /// A line break would end the INI entry early and let the value write others.
    #[error("{field} holds a line break, which the configuration file cannot carry: remove it")]
    LineBreak { field: String },
}

impl CredentialError {
    /// Whether the Secret itself is missing: its creation is not watched through an
    /// owner, so the switch is looked at again after a pause (as upstream does).
    pub fn is_missing_secret(&self) -> bool {
        matches!(self, CredentialError::SecretMissing { .. })
    }
}

/// A switch's credentials Secret as loaded: `None` when it does not exist.
pub type Credentials = Option<BTreeMap<String, Vec<u8>>>;

/// The configuration of one namespace.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rendered {
    /// The INI file (for [`CONFIG_KEY`]).
    pub config: String,
    /// SSH private keys by file name (`aa-bb-cc-dd-ee-ff.key`), for the credentials
    /// Secret mounted at the credentials path.
    pub key_files: BTreeMap<String, Vec<u8>>,
    /// Switches left out, by name.
    pub errors: BTreeMap<String, CredentialError>,
}

/// The credentials Secret a switch names: (namespace, name), the namespace
/// defaulting to the switch's own.
pub fn credentials_ref(switch: &BareMetalSwitch) -> Option<(String, String)> {
    let reference = switch.spec.credentials.as_ref()?;
    let name = reference.name.clone().filter(|n| !n.is_empty())?;
    let namespace = reference
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| switch.metadata.namespace.clone())
        .unwrap_or_default();
    Some((namespace, name))
}

/// Renders every switch of one namespace, sorted by name. `credentials` gives each
/// switch's Secret (by switch name); `key_dir` is where the credentials Secret is
/// mounted for Ironic (IRONIC_SWITCH_CREDENTIALS_PATH).
pub fn render(
    switches: &[&BareMetalSwitch],
    credentials: &BTreeMap<String, Credentials>,
    key_dir: &str,
) -> Rendered {
    let mut rendered = Rendered {
        config: HEADER.to_owned(),
        ..Rendered::default()
    };
    let mut sorted: Vec<&BareMetalSwitch> = switches.to_vec();
    sorted.sort_by_key(|s| s.metadata.name.clone());
    for switch in sorted {
        let name = switch.metadata.name.clone().unwrap_or_default();
        let secret = credentials.get(&name).cloned().flatten();
        match entry(switch, &name, secret.as_ref(), key_dir) {
            Ok((section, key_file)) => {
                rendered.config.push_str(&section);
                if let Some((file, key)) = key_file {
                    rendered.key_files.insert(file, key);
                }
            }
            Err(e) => {
                rendered.errors.insert(name, e);
            }
        }
    }
    rendered
}

type Entry = (String, Option<(String, Vec<u8>)>);

fn entry(
    switch: &BareMetalSwitch,
    name: &str,
    secret: Option<&BTreeMap<String, Vec<u8>>>,
    key_dir: &str,
) -> Result<Entry, CredentialError> {
    let (secret_ns, secret_name) = credentials_ref(switch).ok_or(CredentialError::NoReference)?;
    let data = secret.ok_or_else(|| CredentialError::SecretMissing {
        namespace: secret_ns.clone(),
        name: secret_name.clone(),
    })?;
    let text = |key: &'static str| -> Result<Option<String>, CredentialError> {
        data.get(key)
            .map(|v| {
                let value = String::from_utf8_lossy(v).into_owned();
                one_line(
                    &format!("key {key:?} of Secret {secret_ns}/{secret_name}"),
                    value,
                )
            })
            .transpose()
    };
    let username = text("username")?.ok_or_else(|| CredentialError::KeyMissing {
        namespace: secret_ns.clone(),
        name: secret_name.clone(),
        key: "username",
    })?;
    let spec = &switch.spec;
    let mut lines = vec![format!(
        "[switch:{}]",
        one_line("metadata.name", name.to_owned())?
    )];
    lines.push(format!(
        "address={}",
        one_line("spec.address", spec.address.clone())?
    ));
    lines.push(format!(
        "mac_address={}",
        one_line("spec.macAddress", spec.mac_address.clone())?
    ));
    if let Some(port) = spec.port {
        lines.push(format!("port={port}"));
    }
    lines.push(format!("driver_type={}", driver_name(spec.driver)));
    lines.push(format!(
        "device_type={}",
        one_line("spec.deviceType", spec.device_type.clone())?
    ));
    if spec.disable_certificate_verification {
        lines.push("insecure=true".to_owned());
    }
    lines.push(format!("username={username}"));
    let mut key_file = None;
    if let Some(key) = data.get("ssh-privatekey") {
        let file = format!("{}.key", spec.mac_address.replace(':', "-"));
        lines.push(format!("key_file={}/{file}", key_dir.trim_end_matches('/')));
        key_file = Some((file, key.clone()));
    } else if let Some(password) = text("password")? {
        lines.push(format!("password={password}"));
    } else {
        return Err(CredentialError::NoSecretKey {
            namespace: secret_ns,
            name: secret_name,
        });
    }
    if let Some(enable) = text("admin-password")? {
        lines.push(format!("enable_secret={enable}"));
    }
    let mut section = lines.join("\n");
    section.push_str("\n\n");
    Ok((section, key_file))
}

fn driver_name(driver: SwitchDriver) -> &'static str {
    match driver {
        SwitchDriver::GenericSwitch => "generic-switch",
    }
}

fn one_line(field: &str, value: String) -> Result<String, CredentialError> {
    if value.contains(['\n', '\r']) {
        return Err(CredentialError::LineBreak {
            field: field.to_owned(),
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::BareMetalSwitchSpec;
    use k8s_openapi::api::core::v1::SecretReference;

    fn switch(name: &str, mac: &str, secret: &str) -> BareMetalSwitch {
        let mut s = BareMetalSwitch::new(
            name,
            BareMetalSwitchSpec {
                address: "192.0.2.10".into(),
                mac_address: mac.into(),
                device_type: "netmiko_cisco_ios".into(),
                credentials: Some(SecretReference {
                    name: Some(secret.into()),
                    namespace: None,
                }),
                ..Default::default()
            },
        );
        s.metadata.namespace = Some("net".into());
        s
    }

    fn secret(pairs: &[(&str, &str)]) -> Credentials {
        Some(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
                .collect(),
        )
    }

    #[test]
    fn renders_sorted_sections_with_password_or_key_file() {
        let b = switch("tor-b", "aa:bb:cc:dd:ee:02", "b-creds");
        let mut a = switch("tor-a", "aa:bb:cc:dd:ee:01", "a-creds");
        a.spec.port = Some(2222);
        a.spec.disable_certificate_verification = true;
        let credentials = BTreeMap::from([
            (
                "tor-a".to_owned(),
                secret(&[
                    ("username", "admin"),
                    ("password", "pw"),
                    ("admin-password", "en"),
                ]),
            ),
            (
                "tor-b".to_owned(),
                secret(&[("username", "ops"), ("ssh-privatekey", "KEY")]),
            ),
        ]);
        let out = render(&[&b, &a], &credentials, "/etc/creds/");
        assert_eq!(
            out.config,
            format!(
                "{HEADER}[switch:tor-a]\naddress=192.0.2.10\nmac_address=aa:bb:cc:dd:ee:01\nport=2222\n\
                 driver_type=generic-switch\ndevice_type=netmiko_cisco_ios\ninsecure=true\n\
                 username=admin\npassword=pw\nenable_secret=en\n\n\
                 [switch:tor-b]\naddress=192.0.2.10\nmac_address=aa:bb:cc:dd:ee:02\n\
                 driver_type=generic-switch\ndevice_type=netmiko_cisco_ios\nusername=ops\n\
                 key_file=/etc/creds/aa-bb-cc-dd-ee-02.key\n\n"
            )
        );
        assert_eq!(
            out.key_files,
            BTreeMap::from([("aa-bb-cc-dd-ee-02.key".to_owned(), b"KEY".to_vec())])
        );
        assert!(out.errors.is_empty());
    }

    #[test]
    fn a_switch_with_bad_credentials_is_left_out_with_the_reason() {
        let ok = switch("ok", "aa:bb:cc:dd:ee:01", "ok-creds");
        let missing = switch("missing", "aa:bb:cc:dd:ee:02", "nowhere");
        let no_user = switch("no-user", "aa:bb:cc:dd:ee:03", "nu");
        let injected = switch("injected", "aa:bb:cc:dd:ee:04", "inj");
        let credentials = BTreeMap::from([
            (
                "ok".to_owned(),
                secret(&[("username", "u"), ("password", "p")]),
            ),
            ("missing".to_owned(), None),
            ("no-user".to_owned(), secret(&[("password", "p")])),
            (
                "injected".to_owned(),
                secret(&[("username", "u"), ("password", "p\n[switch:evil]")]),
            ),
        ]);
        let out = render(&[&ok, &missing, &no_user, &injected], &credentials, "/c");
        assert!(out.config.contains("[switch:ok]"));
        assert!(!out.config.contains("evil"), "{}", out.config);
        assert!(out.errors["missing"].is_missing_secret());
        assert_eq!(
            out.errors["missing"].to_string(),
            "credentials Secret net/nowhere not found: create it with username and password (or ssh-privatekey)"
        );
        assert!(
            out.errors["no-user"]
                .to_string()
                .contains("no \"username\" key")
        );
        let message = out.errors["injected"].to_string();
        assert!(
            message.contains("\"password\" of Secret net/inj"),
            "{message}"
        );
        assert!(!message.contains("evil"));
    }
}
