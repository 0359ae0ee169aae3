//! The base layer: what a non-root process needs besides a static binary, and nothing else
//! (no shell, no package manager, no libc: the binaries are static, see
//! [`crate::image`]).
//!
//! | path | why |
//! | --- | --- |
//! | `/etc/passwd`, `/etc/group` | user and group `nonroot` (65532) and `root`, so tools and libraries that look the user up find it |
//! | `/home/nonroot` | the user's home directory (0700, owned by it) |
//! | `/etc/ssl/certs/ca-certificates.crt` | Mozilla's root certificates, for OTLP over TLS to a collector with a public certificate (the exporter reads the system roots) |
//! | `/tmp` | the usual scratch directory (1777); read-only like everything else when the root file system is (the controllers write no file) |
//!
//! The certificates come from the `webpki-root-certs` crate (Mozilla's root program, as
//! curated by the CCADB), pinned by `Cargo.lock` and checked by Cargo like every crate, so the
//! base needs nothing from outside the Rust build and is the same on every machine.

use crate::image::layer::{Entry, Tree};
use crate::image::sbom::BaseComponent;

/// The user and group the images run as (distroless' `nonroot`).
pub const NONROOT: u64 = 65532;

/// Where the CA bundle is; the standard path that rustls-native-certs (via openssl-probe) and
/// most TLS stacks look at first.
pub const CA_BUNDLE: &str = "etc/ssl/certs/ca-certificates.crt";

const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n\
                      nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n";

const GROUP: &str = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n";

/// The PEM bundle of the root certificates.
pub fn ca_bundle() -> String {
    let pems: Vec<pem::Pem> = webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .map(|der| pem::Pem::new("CERTIFICATE", der.as_ref().to_vec()))
        .collect();
    pem::encode_many_config(
        &pems,
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

/// The base file tree.
pub fn base_tree() -> Tree {
    let mut tree = Tree::default();
    tree.insert("etc/passwd", Entry::file(PASSWD, 0o644));
    tree.insert("etc/group", Entry::file(GROUP, 0o644));
    tree.insert(CA_BUNDLE, Entry::file(ca_bundle(), 0o644));
    let mut home = Entry::dir(0o700);
    home.uid = NONROOT;
    home.gid = NONROOT;
    tree.insert("home/nonroot", home);
    tree.insert("tmp", Entry::dir(0o1777));
    tree
}

/// What the base layer is made of, for the SBOM; `certs_version` is the version of
/// `webpki-root-certs` in `Cargo.lock`.
pub fn base_components(certs_version: &str) -> Vec<BaseComponent> {
    let bundle = ca_bundle();
    vec![BaseComponent {
        name: "webpki-root-certs".to_string(),
        version: certs_version.to_string(),
        purl: format!("pkg:cargo/webpki-root-certs@{certs_version}"),
        license: "CDLA-Permissive-2.0".to_string(),
        description: format!(
            "Mozilla's root certificates ({} roots) as /{CA_BUNDLE}",
            webpki_root_certs::TLS_SERVER_ROOT_CERTS.len()
        ),
        sha256: Some(crate::image::layer::hex(&{
            use sha2::Digest;
            sha2::Sha256::digest(bundle.as_bytes())
        })),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::layer::EntryKind;

    #[test]
    fn the_base_has_the_nonroot_user_certificates_and_no_shell() {
        let tree = base_tree();
        let EntryKind::File(passwd) = &tree.get("etc/passwd").unwrap().kind else {
            panic!("passwd is a file")
        };
        let passwd = String::from_utf8(passwd.clone()).unwrap();
        assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
        assert!(passwd.lines().all(|l| l.ends_with(":/sbin/nologin")));
        assert!(tree.get("bin/sh").is_none());
        let home = tree.get("home/nonroot").unwrap();
        assert_eq!((home.uid, home.gid, home.mode), (NONROOT, NONROOT, 0o700));
        let bundle = ca_bundle();
        assert!(bundle.starts_with("-----BEGIN CERTIFICATE-----\n"));
        assert_eq!(
            bundle.matches("-----BEGIN CERTIFICATE-----").count(),
            webpki_root_certs::TLS_SERVER_ROOT_CERTS.len()
        );
        assert!(webpki_root_certs::TLS_SERVER_ROOT_CERTS.len() > 100);
    }
}
