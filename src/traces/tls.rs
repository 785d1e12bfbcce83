//! TLS for the OTLP exporter, from the standard environment: an `https://`
//! endpoint is verified against the system's roots and, when set,
//! `OTEL_EXPORTER_OTLP_CERTIFICATE` (a PEM file of CA certificates, for a
//! collector behind a private CA); `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE` and
//! `OTEL_EXPORTER_OTLP_CLIENT_KEY` present a client certificate (mutual TLS).
//! Each has its `OTEL_EXPORTER_OTLP_TRACES_*` variant, which wins.
//!
//! Read once at start: a file that is missing or holds no certificate or key
//! stops the operator there, naming the variable, rather than exporting
//! nothing later with an error per batch.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

/// The client configuration the exporter connects with.
pub fn client_config(env: impl Fn(&str) -> Option<String>) -> Result<ClientConfig, String> {
    let mut roots = RootCertStore::empty();
    // A certificate the platform's store cannot parse is skipped, as every
    // client does; the private CA below is checked strictly.
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some((var, path)) = pick(&env, "CERTIFICATE") {
        for cert in certificates(&var, &path)? {
            roots
                .add(cert)
                .map_err(|e| format!("{var}={path}: not a CA certificate: {e}"))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("OTLP exporter TLS: {e}"))?
        .with_root_certificates(roots);
    match (pick(&env, "CLIENT_CERTIFICATE"), pick(&env, "CLIENT_KEY")) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some((cert_var, cert_path)), Some((key_var, key_path))) => {
            let chain = certificates(&cert_var, &cert_path)?;
            let key = PrivateKeyDer::from_pem_file(&key_path)
                .map_err(|e| format!("{key_var}={key_path}: no private key read: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("{cert_var} and {key_var}: {e}"))
        }
        (Some((var, _)), None) | (None, Some((var, _))) => Err(format!(
            "{var} is set alone: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and \
             OTEL_EXPORTER_OTLP_CLIENT_KEY (or their TRACES_ variants) go together"
        )),
    }
}

/// `OTEL_EXPORTER_OTLP_TRACES_<what>`, else `OTEL_EXPORTER_OTLP_<what>`, when
/// set and not blank: the variable's name and its value.
fn pick(env: &impl Fn(&str) -> Option<String>, what: &str) -> Option<(String, String)> {
    [
        format!("OTEL_EXPORTER_OTLP_TRACES_{what}"),
        format!("OTEL_EXPORTER_OTLP_{what}"),
    ]
    .into_iter()
    .find_map(|var| {
        env(&var)
            .filter(|v| !v.trim().is_empty())
            .map(|value| (var, value))
    })
}

/// Every certificate of the PEM file at `path`; at least one.
fn certificates(var: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{var}={path}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{var}={path}: no PEM certificate in the file"));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests;
