//! Credentials that must never reach logs, events, status or error messages.

use std::fmt;

use k8s_openapi::api::core::v1::Secret;

/// A secret string (BMC password, Ironic password). `Debug` and `Display` print `***`;
/// the value is only reachable through [`SecretString::expose`], so every place that
/// sends it somewhere is easy to find.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value, for the one call that has to send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A Secret's values by key, or the first key whose value is not UTF-8 text.
pub fn secret_values(secret: &Secret) -> Result<Vec<(String, SecretString)>, String> {
    let data = secret.data.clone().unwrap_or_default();
    let text = |(key, value): (String, k8s_openapi::ByteString)| match String::from_utf8(value.0) {
        Ok(value) => Ok((key, SecretString::new(value))),
        Err(_) => Err(key),
    };
    data.into_iter().map(text).collect()
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl From<String> for SecretString {
    fn from(value: String) -> Self {
        Self(value)
    }
}

/// A user name and password pair.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: SecretString,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_never_formats_its_value() {
        let creds = Credentials {
            username: "admin".into(),
            password: SecretString::new("hunter2"),
        };
        let shown = format!("{creds:?} {} {:?}", creds.password, creds.password);
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("admin"));
        assert_eq!(creds.password.expose(), "hunter2");
    }
}
