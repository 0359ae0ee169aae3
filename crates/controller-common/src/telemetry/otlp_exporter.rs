//! The OTLP span exporter for [`OtlpSettings`]: gRPC (tonic) or HTTP/protobuf (reqwest), with
//! rustls on the *ring* provider for `https://` endpoints (system roots plus the optional
//! `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE` bundle). Endpoints and headers are read by the
//! OTLP crate from the standard variables.

use std::sync::Arc;

use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig, WithTonicConfig};

use super::{OtlpProtocol, OtlpSettings};
use crate::error::Error;

/// The endpoint the exporter will use, as configured (signal variable first).
fn configured_endpoint() -> Option<String> {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .filter_map(|k| std::env::var(k).ok())
    .map(|v| v.trim().to_owned())
    .find(|v| !v.is_empty())
}

/// Reads the PEM certificates of `path`; an unreadable or empty file is an error naming it.
fn read_ca_file(path: &str) -> Result<Vec<u8>, Error> {
    let pem = std::fs::read(path).map_err(|e| {
        Error::Telemetry(format!(
            "OTEL_EXPORTER_OTLP_CERTIFICATE: cannot read {path:?}: {e}"
        ))
    })?;
    if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
        return Err(Error::Telemetry(format!(
            "OTEL_EXPORTER_OTLP_CERTIFICATE: {path:?} holds no PEM certificate"
        )));
    }
    Ok(pem)
}

pub(super) fn build(settings: &OtlpSettings) -> Result<opentelemetry_otlp::SpanExporter, Error> {
    let https = configured_endpoint().is_some_and(|e| e.starts_with("https://"));
    match settings.protocol {
        OtlpProtocol::Grpc => {
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_timeout(settings.timeout);
            if https {
                use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig};
                let mut tls = ClientTlsConfig::new().with_native_roots();
                if let Some(path) = &settings.ca_file {
                    tls = tls.ca_certificate(Certificate::from_pem(read_ca_file(path)?));
                }
                builder = builder.with_tls_config(tls);
            }
            builder
                .build()
                .map_err(|e| Error::Telemetry(format!("OTLP gRPC exporter: {e}")))
        }
        OtlpProtocol::HttpProtobuf => {
            let client = http_client(settings)?;
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_timeout(settings.timeout)
                .with_http_client(client)
                .build()
                .map_err(|e| Error::Telemetry(format!("OTLP HTTP exporter: {e}")))
        }
        OtlpProtocol::HttpJson => Err(Error::Telemetry(
            "OTLP protocol http/json is not built into this binary; set \
             OTEL_EXPORTER_OTLP_PROTOCOL to grpc or http/protobuf"
                .into(),
        )),
    }
}

/// reqwest with rustls on *ring*: the system's root certificates plus the configured bundle.
fn http_client(settings: &OtlpSettings) -> Result<reqwest::Client, Error> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some(path) = &settings.ca_file {
        let pem = read_ca_file(path)?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| {
                Error::Telemetry(format!("OTEL_EXPORTER_OTLP_CERTIFICATE: {path:?}: {e}"))
            })?;
            roots.add(cert).map_err(|e| {
                Error::Telemetry(format!("OTEL_EXPORTER_OTLP_CERTIFICATE: {path:?}: {e}"))
            })?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::Telemetry(format!("TLS setup for the OTLP exporter: {e}")))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(settings.timeout)
        .build()
        .map_err(|e| Error::Telemetry(format!("HTTP client for the OTLP exporter: {e}")))
}
