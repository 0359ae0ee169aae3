//! An HTTPS client for a conversion webhook on loopback, as the API server calls it: it trusts
//! only the webhook's CA and checks the certificate against the Service's DNS name.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// A client that trusts only `ca_pem` and reaches `addr` under the DNS name `host` (e.g.
/// `<service>.<namespace>.svc`).
pub fn client(ca_pem: &str, host: &str, addr: SocketAddr) -> reqwest::Client {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("a PEM certificate")).expect("a CA");
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .resolve(host, addr)
        .build()
        .expect("an HTTPS client")
}
