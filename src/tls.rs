//! One TLS stack for the whole binary: rustls with the ring provider, used by kube and
//! reqwest alike.

/// Installs ring as the process-wide rustls crypto provider. Safe to call more than
/// once; only the first call has an effect.
pub fn install_crypto_provider() {
    // An Err means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
