//! The reference's certificate cases (`v1alpha1-conversion.md` §10.1, items 13–15 and 17) and
//! renewal, which the reference lacks.

use super::*;

fn names() -> [String; 4] {
    service_dns_names("test-service", "test-namespace", "cluster.local")
}

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

#[test]
fn item_13_generated_certificate_names_exactly_the_service_and_fills_a_secret() {
    let bundle = generate(&names(), now(), None).unwrap();
    let (not_after, dns) = inspect(&bundle.cert_pem).unwrap();
    assert_eq!(
        dns,
        [
            "test-service",
            "test-service.test-namespace",
            "test-service.test-namespace.svc",
            "test-service.test-namespace.svc.cluster.local",
        ]
    );
    assert_eq!(not_after, now() + VALIDITY);
    let ca = CertificateDer::pem_slice_iter(bundle.ca_pem.as_bytes())
        .next()
        .unwrap()
        .unwrap();
    let (_, ca) = x509_parser::parse_x509_certificate(&ca).unwrap();
    assert!(ca.is_ca());
    assert_eq!(
        ca.subject().to_string(),
        format!("CN={CA_COMMON_NAME}"),
        "the reference's CA name"
    );

    let secret = to_secret(&bundle, "certs", "test-namespace");
    let data = secret.data.as_ref().unwrap();
    assert_eq!(data[CA_KEY].0, bundle.ca_pem.as_bytes());
    assert!(!data[CERT_KEY].0.is_empty() && !data[PRIVATE_KEY_KEY].0.is_empty());
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    assert_eq!(
        from_secret(&secret).unwrap(),
        bundle,
        "reads back as written"
    );
}

#[test]
fn item_14_a_secret_with_pem_data_is_used_verbatim() {
    let bundle = generate(&names(), now(), None).unwrap();
    let secret = to_secret(&bundle, "certs", "ns");
    let read = from_secret(&secret).unwrap();
    assert_eq!(read.ca_pem, bundle.ca_pem);
    assert_eq!(read.cert_pem, bundle.cert_pem);
    assert_eq!(read.key_pem, bundle.key_pem);
}

#[test]
fn item_15_a_secret_with_non_pem_data_is_refused_with_a_clear_error() {
    let bundle = generate(&names(), now(), None).unwrap();
    for (key, value) in [
        (CA_KEY, "not pem"),
        (CERT_KEY, "not pem"),
        (PRIVATE_KEY_KEY, ""),
    ] {
        let mut secret = to_secret(&bundle, "certs", "ns");
        secret
            .data
            .as_mut()
            .unwrap()
            .insert(key.into(), ByteString(value.as_bytes().to_vec()));
        let error = from_secret(&secret).unwrap_err().to_string();
        assert!(
            error.starts_with("invalid certificate data in Secret ns/certs: "),
            "{error}"
        );
        assert!(error.contains(key), "{error}");
        assert!(error.contains("delete the Secret"), "{error}");
    }
    // A key from another certificate.
    let other = generate(&names(), now(), None).unwrap();
    let mut mixed = bundle.clone();
    mixed.key_pem = other.key_pem;
    let error = from_secret(&to_secret(&mixed, "certs", "ns"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("invalid certificate data"), "{error}");
}

#[test]
fn a_secret_written_by_the_reference_with_a_sec1_key_is_read() {
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(names().to_vec()).unwrap();
    let cert = params.self_signed(&key).unwrap();
    // The reference writes the key as SEC1 ("EC PRIVATE KEY").
    let pkcs8 = key.serialize_der();
    let sec1 = sec1_from_pkcs8(&pkcs8);
    let bundle = CertBundle {
        ca_pem: cert.pem(),
        cert_pem: cert.pem(),
        key_pem: pem_encode("EC PRIVATE KEY", &sec1),
    };
    from_secret(&to_secret(&bundle, "agent-sandbox-webhook-certs", "ns")).unwrap();
}

/// The SEC1 `ECPrivateKey` inside a PKCS#8 P-256 key: the OCTET STRING after the algorithm
/// identifier (rcgen writes `30 81 87 02 01 00 30 13 ... 04 6d <sec1>`).
fn sec1_from_pkcs8(pkcs8: &[u8]) -> Vec<u8> {
    let at = pkcs8
        .windows(2)
        .position(|w| w == [0x04, 0x6d])
        .expect("P-256 PKCS#8 layout");
    pkcs8[at + 2..].to_vec()
}

#[test]
fn renewal_is_needed_near_expiry_and_for_other_names() {
    let bundle = generate(&names(), now(), None).unwrap();
    assert_eq!(
        renewal(&bundle, &names(), now()).unwrap(),
        Renewal::NotNeeded
    );
    let late = now() + VALIDITY - RENEW_BEFORE;
    assert!(matches!(
        renewal(&bundle, &names(), late).unwrap(),
        Renewal::Expiring { .. }
    ));
    let other = service_dns_names("renamed", "test-namespace", "cluster.local");
    assert_eq!(
        renewal(&bundle, &other, now()).unwrap(),
        Renewal::WrongNames {
            missing: other.to_vec()
        }
    );
}

#[test]
fn a_renewed_bundle_trusts_the_certificate_it_replaces() {
    let old = generate(&names(), now(), None).unwrap();
    let new = generate(&names(), now(), Some(&old.ca_pem)).unwrap();
    let cas: Vec<_> = CertificateDer::pem_slice_iter(new.ca_pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(cas.len(), 2, "new CA, then the previous one");
    let previous: Vec<_> = CertificateDer::pem_slice_iter(old.ca_pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(cas[1], previous[0]);
    // A third generation drops the oldest CA: only the one it replaces is kept.
    let newer = generate(&names(), now(), Some(&new.ca_pem)).unwrap();
    assert_eq!(
        CertificateDer::pem_slice_iter(newer.ca_pem.as_bytes()).count(),
        2
    );
}

// --- item 17: certificate files in unmanaged mode ------------------------------------------------

fn pair() -> (String, String) {
    let bundle = generate(&names(), now(), None).unwrap();
    (bundle.cert_pem, bundle.key_pem)
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn item_17_default_pair_custom_pair_and_explicit_combined_file() {
    let (cert, key) = pair();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tls.crt", &cert);
    write(dir.path(), "tls.key", &key);
    assert_eq!(
        read_files(dir.path(), "tls.crt", "tls.key").unwrap(),
        (cert.clone(), key.clone())
    );

    let custom = tempfile::tempdir().unwrap();
    write(custom.path(), "serving.pem", &cert);
    write(custom.path(), "serving-key.pem", &key);
    assert_eq!(
        read_files(custom.path(), "serving.pem", "serving-key.pem").unwrap(),
        (cert.clone(), key.clone())
    );

    let combined = tempfile::tempdir().unwrap();
    write(combined.path(), "cert.pem", &format!("{cert}{key}"));
    let (c, k) = read_files(combined.path(), "cert.pem", "cert.pem").unwrap();
    certified_key(&c, &k).expect("a combined certificate and EC key load as a key pair");
}

#[test]
fn item_17_combined_file_is_the_fallback_only_for_the_default_pair_cleanly_absent() {
    let (cert, key) = pair();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "cert.pem", &format!("{cert}{key}"));
    let (c, k) = read_files(dir.path(), "tls.crt", "tls.key").unwrap();
    certified_key(&c, &k).unwrap();

    // Custom names: no fallback.
    let error = read_files(dir.path(), "a.crt", "a.key").unwrap_err();
    assert!(
        matches!(error, CertError::Missing { combined: "", .. }),
        "{error}"
    );

    // Only one default file missing: no fallback either.
    write(dir.path(), "tls.crt", &cert);
    let error = read_files(dir.path(), "tls.crt", "tls.key").unwrap_err();
    assert!(error.to_string().contains("tls.key"), "{error}");
}

#[test]
fn item_17_nothing_present_or_a_directory_is_an_error() {
    let empty = tempfile::tempdir().unwrap();
    let error = read_files(empty.path(), "tls.crt", "tls.key")
        .unwrap_err()
        .to_string();
    assert!(error.contains("no webhook certificate in"), "{error}");
    assert!(error.contains("cert.pem"), "{error}");

    let (_, key) = pair();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tls.crt")).unwrap();
    write(dir.path(), "tls.key", &key);
    let error = read_files(dir.path(), "tls.crt", "tls.key").unwrap_err();
    assert!(matches!(error, CertError::NotAFile(_)), "{error}");
}
