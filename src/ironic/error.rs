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

    /// Whether Ironic could not be reached at all (no answer, as opposed to an
    /// answer refusing something).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }

    /// Whether Ironic answered that it could not reach the conductor that handles the
    /// node: its RPC to a conductor that died, until the API's hash ring drops it (about
    /// `heartbeat_timeout` plus `hash_ring_reset_interval`). As much an outage of Ironic
    /// as no answer at all, and over once another conductor takes the node.
    pub fn is_conductor_unreachable(&self) -> bool {
        matches!(self, Self::Api { status, message, .. }
            if status.is_server_error() && message.contains("Unable to establish connection to"))
    }

    /// This error and its causes in one line (`a: b: c`): what reqwest says
    /// (`error sending request`) is only useful with the cause under it
    /// (`Connection refused`).
    pub fn with_causes(&self) -> String {
        crate::telemetry::with_causes(self)
    }
}

/// `None` where Ironic answered that the thing asked for does not exist (404): to
/// the caller an absent node is an answer, not a failure.
pub(super) fn unless_not_found<T>(
    result: Result<T, IronicError>,
) -> Result<Option<T>, IronicError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// `url` as messages show it: without the username and password it may carry.
pub fn without_credentials(url: &url::Url) -> String {
    let mut shown = url.clone();
    // Both fail only for URLs that cannot carry credentials in the first place.
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.to_string()
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
    fn shown_urls_carry_no_credentials() {
        let url: url::Url = "http://admin:s3cret@ironic.example:6385/v1/"
            .parse()
            .unwrap();
        assert_eq!(without_credentials(&url), "http://ironic.example:6385/v1/");
    }

    #[test]
    fn fault_string_unwraps_nested_json() {
        let body = r#"{"error_message": "{\"faultstring\": \"Node abc could not be found.\", \"debuginfo\": null, \"faultcode\": \"Client\"}"}"#;
        assert_eq!(fault_string(body), "Node abc could not be found.");
    }

    #[test]
    fn a_dead_conductor_behind_the_api_reads_as_unreachable() {
        let api = |status: StatusCode, message: &str| IronicError::Api {
            method: "GET".into(),
            path: "/nodes/u/validate".into(),
            status,
            message: message.into(),
        };
        let dead = "Unable to establish connection to http://127.0.0.2:8089: ('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))";
        assert!(api(StatusCode::INTERNAL_SERVER_ERROR, dead).is_conductor_unreachable());
        assert!(api(StatusCode::SERVICE_UNAVAILABLE, dead).is_conductor_unreachable());
        assert!(!api(StatusCode::BAD_REQUEST, dead).is_conductor_unreachable());
        assert!(
            !api(StatusCode::INTERNAL_SERVER_ERROR, "Deploy failed.").is_conductor_unreachable()
        );
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
