//! The certificate the secured `/metrics` presents: the one in `BMO_METRICS_CERT_DIR`
//! (`tls.crt` and `tls.key`, as a Kubernetes TLS Secret mounts them), or a
//! self-signed one made at start-up, as controller-runtime does without a cert dir.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Why no TLS configuration could be made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error(
        "BMO_METRICS_CERT_DIR: cannot read {path}: {reason}; give a directory holding tls.crt and tls.key (PEM), or unset it for a self-signed certificate"
    )]
    Read { path: PathBuf, reason: String },
    #[error("BMO_METRICS_CERT_DIR: {path} holds no certificate")]
    Empty { path: PathBuf },
    #[error("cannot make a self-signed certificate for /metrics: {0}")]
    SelfSigned(String),
    #[error("BMO_METRICS_CERT_DIR: the certificate and key do not go together: {0}")]
    Mismatch(String),
}

/// The server's TLS configuration, from `dir` or self-signed for `names`, and when
/// its certificate expires (Unix seconds; `None` if that cannot be read).
pub fn server_config(
    dir: Option<&Path>,
    names: &[String],
) -> Result<(Arc<ServerConfig>, Option<i64>), CertError> {
    let (chain, key) = match dir {
        Some(dir) => from_dir(dir)?,
        None => self_signed(names)?,
    };
    let not_after = chain
        .first()
        .and_then(|leaf| super::expiry::not_after(leaf));
    let config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| CertError::Mismatch(e.to_string()))?;
    Ok((Arc::new(config), not_after))
}

fn from_dir(
    dir: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), CertError> {
    let read_error = |path: &Path, e: &dyn std::fmt::Display| CertError::Read {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let cert_path = dir.join("tls.crt");
    let chain = CertificateDer::pem_file_iter(&cert_path)
        .map_err(|e| read_error(&cert_path, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read_error(&cert_path, &e))?;
    if chain.is_empty() {
        return Err(CertError::Empty { path: cert_path });
    }
    let key_path = dir.join("tls.key");
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| read_error(&key_path, &e))?;
    Ok((chain, key))
}

fn self_signed(
    names: &[String],
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), CertError> {
    let made = rcgen::generate_simple_self_signed(names.to_vec())
        .map_err(|e| CertError::SelfSigned(e.to_string()))?;
    let key = PrivatePkcs8KeyDer::from(made.signing_key.serialize_der());
    Ok((vec![made.cert.der().clone()], key.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cert_dir_without_files_is_refused_naming_the_file_and_the_fix() {
        crate::tls::install_crypto_provider();
        let dir = std::env::temp_dir().join(format!("bmo-cert-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let error = server_config(Some(&dir), &[]).expect_err("no files");
        let text = error.to_string();
        assert!(
            text.contains("tls.crt") && text.contains("self-signed"),
            "{text}"
        );

        // A pair made elsewhere is read as given.
        let made = rcgen::generate_simple_self_signed(vec!["bmo.example".to_owned()])
            .expect("certificate");
        std::fs::write(dir.join("tls.crt"), made.cert.pem()).expect("write cert");
        std::fs::write(dir.join("tls.key"), made.signing_key.serialize_pem()).expect("write key");
        assert!(server_config(Some(&dir), &[]).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn without_a_cert_dir_a_self_signed_certificate_is_made() {
        crate::tls::install_crypto_provider();
        assert!(server_config(None, &["localhost".to_owned()]).is_ok());
    }
}
