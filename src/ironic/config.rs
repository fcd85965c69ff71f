//! How bmo reaches Ironic: the endpoint, TLS trust, credentials and retry policy.

use std::path::{Path, PathBuf};
use std::time::Duration;

use url::Url;

use super::error::IronicError;
use crate::credentials::{Credentials, SecretString};

/// How bmo authenticates to Ironic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IronicAuth {
    None,
    Basic(Credentials),
}

impl IronicAuth {
    /// Reads upstream's layout: `DIR/ironic/username` and `DIR/ironic/password`. Both
    /// absent means no authentication; one without the other is an error.
    pub fn from_auth_dir(dir: &Path) -> Result<Self, IronicError> {
        let user_file = dir.join("ironic").join("username");
        let pass_file = dir.join("ironic").join("password");
        let read = |p: &Path| match std::fs::read_to_string(p) {
            Ok(s) => Ok(Some(s.trim_end_matches(['\r', '\n']).to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(IronicError::Setup(format!(
                "cannot read {}: {e}",
                p.display()
            ))),
        };
        match (read(&user_file)?, read(&pass_file)?) {
            (None, None) => Ok(Self::None),
            (Some(username), Some(password)) => Ok(Self::Basic(Credentials {
                username,
                password: SecretString::new(password),
            })),
            (Some(_), None) => Err(IronicError::Setup(format!(
                "{} exists but {} does not; provide both or neither",
                user_file.display(),
                pass_file.display()
            ))),
            (None, Some(_)) => Err(IronicError::Setup(format!(
                "{} exists but {} does not; provide both or neither",
                pass_file.display(),
                user_file.display()
            ))),
        }
    }
}

/// Everything needed to build an [`IronicClient`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The API root including `/v1/`.
    pub endpoint: Url,
    pub auth: IronicAuth,
    pub ca_file: Option<PathBuf>,
    pub insecure: bool,
    pub timeout: Duration,
    /// Attempts for a call Ironic answers with 409 (node locked) or 503.
    pub max_attempts: u32,
    pub retry_base_delay: Duration,
}

impl ClientConfig {
    pub fn new(endpoint: Url) -> Self {
        Self {
            endpoint,
            auth: IronicAuth::None,
            ca_file: None,
            insecure: false,
            timeout: Duration::from_secs(60),
            max_attempts: 8,
            retry_base_delay: Duration::from_millis(500),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_dir_reads_both_files_or_neither() {
        let dir = std::env::temp_dir().join(format!("bmo-auth-test-{}", std::process::id()));
        let ironic = dir.join("ironic");
        std::fs::create_dir_all(&ironic).unwrap();
        assert_eq!(IronicAuth::from_auth_dir(&dir).unwrap(), IronicAuth::None);
        std::fs::write(ironic.join("username"), "bmo\n").unwrap();
        let err = IronicAuth::from_auth_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("password"), "{err}");
        std::fs::write(ironic.join("password"), "s3cret\n").unwrap();
        match IronicAuth::from_auth_dir(&dir).unwrap() {
            IronicAuth::Basic(c) => {
                assert_eq!(c.username, "bmo");
                assert_eq!(c.password.expose(), "s3cret");
            }
            other => panic!("expected basic auth, got {other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
