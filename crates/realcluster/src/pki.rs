//! The cluster's certificates and keys, generated fresh for every start (ECDSA P-256):
//!
//! - a Kubernetes CA: it signs the API server's serving certificate and every client
//!   certificate (admin, kube-controller-manager, kube-scheduler, kwok), and kube-controller-manager
//!   signs CertificateSigningRequests with it;
//! - a separate etcd CA, as production clusters have: it signs etcd's serving certificate and
//!   the API server's etcd client certificate, so no Kubernetes client certificate opens etcd;
//! - the service-account key pair: the API server signs tokens with the private key and
//!   verifies them with the public one; kube-controller-manager signs its controllers' tokens.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::error::Error;

/// A certificate and its private key, PEM.
#[derive(Clone)]
pub struct CertKey {
    pub cert: String,
    pub key: String,
}

impl std::fmt::Debug for CertKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertKey")
            .field("cert", &self.cert)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// Everything the components need.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The Kubernetes CA (its key signs CSRs in kube-controller-manager).
    pub ca: CertKey,
    /// The API server's serving certificate.
    pub apiserver: CertKey,
    /// The etcd CA (certificate only is needed outside this module, the key too for etcd).
    pub etcd_ca: CertKey,
    /// etcd's serving certificate.
    pub etcd_server: CertKey,
    /// The API server's client certificate for etcd.
    pub apiserver_etcd_client: CertKey,
    /// Client certificate of the cluster admin (group `system:masters`).
    pub admin: CertKey,
    /// Client certificate of kube-controller-manager (`system:kube-controller-manager`).
    pub controller_manager: CertKey,
    /// Client certificate of kube-scheduler (`system:kube-scheduler`).
    pub scheduler: CertKey,
    /// Client certificate of kwok, which writes the status of every node and Pod
    /// (group `system:masters`, as kwokctl's clusters give it).
    pub kwok: CertKey,
    /// The service-account signing key (PKCS#8 PEM) and its public key (SPKI PEM).
    pub service_account_key: String,
    pub service_account_pub: String,
}

/// The names the API server's certificate is valid for: loopback, and the in-cluster names of
/// the `kubernetes` Service with its ClusterIP.
pub fn apiserver_names(service_ip: &str) -> Vec<String> {
    [
        "127.0.0.1",
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        service_ip,
    ]
    .into_iter()
    .map(str::to_owned)
    .collect()
}

/// Generates a fresh set. `service_ip` is the ClusterIP of the `kubernetes` Service.
pub fn generate(service_ip: &str) -> Result<Pki, Error> {
    let (ca, ca_issuer) = new_ca("agent-sandbox-realcluster-ca")?;
    let (etcd_ca, etcd_issuer) = new_ca("agent-sandbox-realcluster-etcd-ca")?;
    let service_account = KeyPair::generate()?;
    Ok(Pki {
        apiserver: leaf(
            &ca_issuer,
            "kube-apiserver",
            &[],
            &apiserver_names(service_ip),
            Usage::Server,
        )?,
        etcd_server: leaf(
            &etcd_issuer,
            "etcd",
            &[],
            &["127.0.0.1".to_owned(), "localhost".to_owned()],
            Usage::Server,
        )?,
        apiserver_etcd_client: leaf(
            &etcd_issuer,
            "kube-apiserver-etcd-client",
            &[],
            &[],
            Usage::Client,
        )?,
        admin: leaf(
            &ca_issuer,
            "kubernetes-admin",
            &["system:masters"],
            &[],
            Usage::Client,
        )?,
        controller_manager: leaf(
            &ca_issuer,
            "system:kube-controller-manager",
            &[],
            &[],
            Usage::Client,
        )?,
        scheduler: leaf(&ca_issuer, "system:kube-scheduler", &[], &[], Usage::Client)?,
        kwok: leaf(
            &ca_issuer,
            "kwok-controller",
            &["system:masters"],
            &[],
            Usage::Client,
        )?,
        ca,
        etcd_ca,
        service_account_key: service_account.serialize_pem(),
        service_account_pub: service_account.public_key_pem(),
    })
}

fn new_ca(name: &str) -> Result<(CertKey, Issuer<'static, KeyPair>), Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key)?;
    let pem = CertKey {
        cert: cert.pem(),
        key: key.serialize_pem(),
    };
    Ok((pem, Issuer::new(params, key)))
}

#[derive(Debug, Clone, Copy)]
enum Usage {
    Server,
    Client,
}

fn leaf(
    issuer: &Issuer<'static, KeyPair>,
    common_name: &str,
    organizations: &[&str],
    names: &[String],
    usage: Usage,
) -> Result<CertKey, Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    for name in names {
        params.subject_alt_names.push(match name.parse() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(name.clone().try_into()?),
        });
    }
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    for organization in organizations {
        params
            .distinguished_name
            .push(DnType::OrganizationName, *organization);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![match usage {
        Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
        Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
    }];
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok(CertKey {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_certificate_and_key_is_pem() {
        let pki = generate("10.96.0.1").unwrap();
        for pair in [
            &pki.ca,
            &pki.apiserver,
            &pki.etcd_ca,
            &pki.etcd_server,
            &pki.apiserver_etcd_client,
            &pki.admin,
            &pki.controller_manager,
            &pki.scheduler,
            &pki.kwok,
        ] {
            assert!(pair.cert.starts_with("-----BEGIN CERTIFICATE-----"));
            assert!(pair.key.starts_with("-----BEGIN PRIVATE KEY-----"));
        }
        assert!(
            pki.service_account_pub
                .starts_with("-----BEGIN PUBLIC KEY-----")
        );
        assert!(!format!("{:?}", pki.admin).contains("PRIVATE KEY"));
    }
}
