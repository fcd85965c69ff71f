use reqwest::StatusCode;

use super::types::Microversion;

/// A failed Ironic call. Messages say what was asked and what Ironic answered; none of
/// them carry credentials.
#[derive(Debug, thiserror::Error)]
pub enum IronicError {
    #[error("cannot reach Ironic at {endpoint}: {source}")]
    Unreachable {
        endpoint: String,
        #[source]
        source: reqwest::Error,
    },
    #[error(
        "Ironic at {endpoint} rejected bmo's credentials (HTTP {status}); check the files under METAL3_AUTH_ROOT_DIR/ironic/"
    )]
    Unauthorized {
        endpoint: String,
        status: StatusCode,
    },
    #[error("Ironic {method} {path} failed with HTTP {status}: {message}")]
    Api {
        method: String,
        path: String,
        status: StatusCode,
        message: String,
    },
    #[error("Ironic {method} {path} answered with a body bmo cannot read: {detail}")]
    Decode {
        method: String,
        path: String,
        detail: String,
    },
    #[error(
        "Ironic at {endpoint} supports API microversions up to {max}, but bmo needs at least {needed}; upgrade Ironic"
    )]
    MicroversionTooOld {
        endpoint: String,
        max: Microversion,
        needed: Microversion,
    },
    #[error("cannot build the Ironic HTTP client: {0}")]
    Setup(String),
}

impl IronicError {
    /// The HTTP status Ironic answered with, if it answered at all.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Self::Api { status, .. } | Self::Unauthorized { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether Ironic said the object does not exist.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(StatusCode::NOT_FOUND)
    }
}

/// Ironic wraps its error in a JSON string inside JSON:
/// `{"error_message": "{\"faultstring\": \"...\", ...}"}`. Returns the fault string, or
/// the raw body (trimmed) when it has another shape.
pub(crate) fn fault_string(body: &str) -> String {
    let outer: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let inner = outer
        .as_ref()
        .and_then(|v| v.get("error_message"))
        .and_then(|m| match m {
            serde_json::Value::String(s) => serde_json::from_str::<serde_json::Value>(s)
                .ok()
                .and_then(|v| {
                    v.get("faultstring")
                        .and_then(|f| f.as_str())
                        .map(str::to_owned)
                })
                .or_else(|| Some(s.clone())),
            other => other
                .get("faultstring")
                .and_then(|f| f.as_str())
                .map(str::to_owned),
        });
    let message = inner.unwrap_or_else(|| body.trim().to_owned());
    // A fault string can be long (tracebacks in debug mode); keep the first line.
    let first = message.lines().next().unwrap_or_default().trim();
    if first.is_empty() {
        "no error message".to_owned()
    } else {
        first.chars().take(500).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_string_unwraps_nested_json() {
        let body = r#"{"error_message": "{\"faultstring\": \"Node abc could not be found.\", \"debuginfo\": null, \"faultcode\": \"Client\"}"}"#;
        assert_eq!(fault_string(body), "Node abc could not be found.");
    }

    #[test]
    fn fault_string_falls_back_to_body() {
        assert_eq!(
            fault_string("  plain failure\nsecond line"),
            "plain failure"
        );
        assert_eq!(fault_string(""), "no error message");
    }
}
