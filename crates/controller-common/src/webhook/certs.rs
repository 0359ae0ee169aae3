//! The conversion webhook's certificates: generated and kept in a Secret (managed mode), or read
//! from files someone else provisions (cert-manager, ...).
//!
//! Managed mode generates what the reference generates: a self-signed CA (ECDSA P-256, common
//! name `agent-sandbox-conversion-webhook-ca`, valid from an hour ago for 365 days, only used to
//! sign and never stored) and a serving certificate it signs (ECDSA P-256, common name
//! `<service>.<namespace>.svc`, DNS names `<service>`, `<service>.<namespace>`,
//! `<service>.<namespace>.svc` and `<service>.<namespace>.svc.<cluster domain>`, server
//! authentication). Unlike the reference, a certificate that expires within
//! [`RENEW_BEFORE`] or does not name the current Service is replaced (the reference keeps it
//! forever, and a year after installation every conversion fails). The new `ca.crt` holds the
//! new CA followed by the one it replaces, so replicas that still serve the old certificate stay
//! trusted until they load the new one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// Common name of the generated CA (the reference's).
pub const CA_COMMON_NAME: &str = "agent-sandbox-conversion-webhook-ca";
/// How long generated certificates are valid.
pub const VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// A certificate is replaced when it expires within this long.
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Backdating of `notBefore`, for clocks a little behind ours.
const BACKDATE: Duration = Duration::from_secs(3600);
/// Keys of the certificate Secret.
pub const CA_KEY: &str = "ca.crt";
pub const CERT_KEY: &str = "tls.crt";
pub const PRIVATE_KEY_KEY: &str = "tls.key";
/// The combined certificate-and-key file read when the default pair is absent (unmanaged mode).
pub const COMBINED_FILE: &str = "cert.pem";
/// The default file names of the pair.
pub const DEFAULT_CERT_NAME: &str = "tls.crt";
pub const DEFAULT_KEY_NAME: &str = "tls.key";

/// What can go wrong with the certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating the webhook certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error(
        "invalid certificate data in Secret {secret}: {detail}; delete the Secret to have a new certificate generated"
    )]
    InvalidSecret { secret: String, detail: String },
    #[error("invalid webhook certificate: {0}")]
    Invalid(String),
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "no webhook certificate in {dir}: expected {cert} and {key}{combined} (mount the certificate Secret there, or run with --manage-webhook-certs=true)"
    )]
    Missing {
        dir: PathBuf,
        cert: String,
        key: String,
        combined: &'static str,
    },
    #[error("{0} is not a regular file")]
    NotAFile(PathBuf),
}

/// A CA bundle and the serving certificate and key it verifies, as PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct CertBundle {
    /// The CA certificate(s) the API server is told to trust (`caBundle`).
    pub ca_pem: String,
    /// The serving certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

impl std::fmt::Debug for CertBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertBundle")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// The DNS names the serving certificate must carry for `service` in `namespace`.
pub fn service_dns_names(service: &str, namespace: &str, cluster_domain: &str) -> [String; 4] {
    [
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.{cluster_domain}"),
    ]
}

fn offset_time(at: SystemTime) -> time::OffsetDateTime {
    let seconds = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    time::OffsetDateTime::from_unix_timestamp(seconds as i64)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// A new CA and a serving certificate for `names` (see [`service_dns_names`]; the third is the
/// common name), valid from `now` − 1 h for [`VALIDITY`]. `previous_ca` (a PEM bundle) is
/// appended to the new CA in [`CertBundle::ca_pem`], first certificate only, so that clients
/// keep trusting a serving certificate it signed.
pub fn generate(
    names: &[String; 4],
    now: SystemTime,
    previous_ca: Option<&str>,
) -> Result<CertBundle, CertError> {
    let not_before = offset_time(now - BACKDATE);
    let not_after = offset_time(now + VALIDITY);

    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, CA_COMMON_NAME);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.serial_number = Some(SerialNumber::from(1u64));
    ca.not_before = not_before;
    ca.not_after = not_after;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut serving = CertificateParams::new(names.to_vec())?;
    serving
        .distinguished_name
        .push(DnType::CommonName, names[2].clone());
    serving.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    serving.use_authority_key_identifier_extension = true;
    serving.serial_number = Some(SerialNumber::from(2u64));
    serving.not_before = not_before;
    serving.not_after = not_after;
    let key = KeyPair::generate()?;
    let cert = serving.signed_by(&key, &issuer)?;

    let mut ca_pem = ca_cert.pem();
    if let Some(previous) = previous_ca.and_then(first_certificate_pem) {
        ca_pem.push_str(&previous);
    }
    Ok(CertBundle {
        ca_pem,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The first certificate of a PEM bundle, re-encoded as PEM.
fn first_certificate_pem(bundle: &str) -> Option<String> {
    let der = CertificateDer::pem_slice_iter(bundle.as_bytes())
        .next()?
        .ok()?;
    Some(pem_encode("CERTIFICATE", &der))
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Why a bundle that parses should be replaced anyway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// Good for longer than [`RENEW_BEFORE`].
    NotNeeded,
    /// Expires (or expired) at the given time, within [`RENEW_BEFORE`] of now.
    Expiring { not_after: SystemTime },
    /// Lacks a DNS name the Service needs.
    WrongNames { missing: Vec<String> },
}

/// The serving certificate's expiry and DNS names.
fn inspect(cert_pem: &str) -> Result<(SystemTime, Vec<String>), CertError> {
    let der = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .next()
        .ok_or_else(|| CertError::Invalid("no PEM certificate".into()))?
        .map_err(|e| CertError::Invalid(format!("certificate PEM: {e}")))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| CertError::Invalid(format!("certificate: {e}")))?;
    let not_after = cert.validity().not_after.timestamp();
    let not_after = SystemTime::UNIX_EPOCH + Duration::from_secs(not_after.max(0) as u64);
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push((*dns).to_owned());
            }
        }
    }
    Ok((not_after, names))
}

/// Whether `bundle` must be replaced for a Service reached as `names`, at `now`. An error
/// means it is not a usable certificate at all.
pub fn renewal(
    bundle: &CertBundle,
    names: &[String],
    now: SystemTime,
) -> Result<Renewal, CertError> {
    let (not_after, cert_names) = inspect(&bundle.cert_pem)?;
    let missing: Vec<String> = names
        .iter()
        .filter(|n| !cert_names.contains(n))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Ok(Renewal::WrongNames { missing });
    }
    if not_after <= now + RENEW_BEFORE {
        return Ok(Renewal::Expiring { not_after });
    }
    Ok(Renewal::NotNeeded)
}

/// The rustls signing key for a serving certificate (chain) and private key in PEM; checks
/// that the key belongs to the certificate.
pub fn certified_key(cert_pem: &str, key_pem: &str) -> Result<Arc<CertifiedKey>, CertError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CertError::Invalid(format!("certificate PEM: {e}")))?;
    if chain.is_empty() {
        return Err(CertError::Invalid("no PEM certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| CertError::Invalid(format!("private key PEM: {e}")))?;
    let provider = provider();
    let key = CertifiedKey::from_der(chain, key, &provider)
        .map_err(|e| CertError::Invalid(format!("certificate and key: {e}")))?;
    Ok(Arc::new(key))
}

/// The ring provider (the workspace never pulls aws-lc-rs).
pub(crate) fn provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The bundle stored in a certificate Secret. Each of `ca.crt`, `tls.crt` and `tls.key` must be
/// present, PEM, and the key must belong to the certificate.
pub fn from_secret(secret: &Secret) -> Result<CertBundle, CertError> {
    let name = format!(
        "{}/{}",
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default()
    );
    let invalid = |detail: String| CertError::InvalidSecret {
        secret: name.clone(),
        detail,
    };
    let field = |key: &str| -> Result<String, CertError> {
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .filter(|b| !b.0.is_empty())
            .ok_or_else(|| invalid(format!("{key} is missing or empty")))?;
        let text = String::from_utf8(bytes.0.clone())
            .map_err(|_| invalid(format!("{key} is not PEM text")))?;
        if !text.contains("-----BEGIN ") {
            return Err(invalid(format!("{key} is not PEM")));
        }
        Ok(text)
    };
    let bundle = CertBundle {
        ca_pem: field(CA_KEY)?,
        cert_pem: field(CERT_KEY)?,
        key_pem: field(PRIVATE_KEY_KEY)?,
    };
    certified_key(&bundle.cert_pem, &bundle.key_pem).map_err(|e| invalid(e.to_string()))?;
    if CertificateDer::pem_slice_iter(bundle.ca_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_or(true, |certs| certs.is_empty())
    {
        return Err(invalid(format!("{CA_KEY} holds no PEM certificate")));
    }
    Ok(bundle)
}

/// The Secret that stores `bundle` as `name` in `namespace` (type `Opaque`, like the
/// reference's, so either can read the other's).
pub fn to_secret(bundle: &CertBundle, name: &str, namespace: &str) -> Secret {
    let data = [
        (CA_KEY, &bundle.ca_pem),
        (CERT_KEY, &bundle.cert_pem),
        (PRIVATE_KEY_KEY, &bundle.key_pem),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), ByteString(v.clone().into_bytes())))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(
                [(
                    "app.kubernetes.io/part-of".to_owned(),
                    "agent-sandbox".to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Secret::default()
    }
}

/// Reads a serving certificate and key from `dir` (unmanaged mode): `cert_name` and `key_name`;
/// when both are the defaults and both files are absent, the combined [`COMBINED_FILE`] for
/// both. Returns `(certificate PEM, key PEM)`.
pub fn read_files(
    dir: &Path,
    cert_name: &str,
    key_name: &str,
) -> Result<(String, String), CertError> {
    let cert_path = dir.join(cert_name);
    let key_path = dir.join(key_name);
    let defaults = cert_name == DEFAULT_CERT_NAME && key_name == DEFAULT_KEY_NAME;
    let absent = |p: &Path| matches!(std::fs::symlink_metadata(p), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
    if defaults && absent(&cert_path) && absent(&key_path) {
        let combined = dir.join(COMBINED_FILE);
        if absent(&combined) {
            return Err(CertError::Missing {
                dir: dir.to_owned(),
                cert: cert_name.to_owned(),
                key: key_name.to_owned(),
                combined: " (or a combined cert.pem)",
            });
        }
        let text = read_file(&combined)?;
        return Ok((text.clone(), text));
    }
    for path in [&cert_path, &key_path] {
        if absent(path) {
            return Err(CertError::Missing {
                dir: dir.to_owned(),
                cert: cert_name.to_owned(),
                key: key_name.to_owned(),
                combined: "",
            });
        }
    }
    Ok((read_file(&cert_path)?, read_file(&key_path)?))
}

fn read_file(path: &Path) -> Result<String, CertError> {
    // Mounted Secrets are symlinks; follow them, but refuse directories and the like.
    let metadata = std::fs::metadata(path).map_err(|source| CertError::Read {
        path: path.to_owned(),
        source,
    })?;
    if !metadata.is_file() {
        return Err(CertError::NotAFile(path.to_owned()));
    }
    std::fs::read_to_string(path).map_err(|source| CertError::Read {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
#[path = "certs/tests.rs"]
mod tests;
