//! Optional TLS: a generated self-signed CA, a serving certificate signed by it, and an HTTP/1.1
//! accept loop over rustls (ring provider only; the workspace never pulls aws-lc-rs).
//!
//! The CA's PEM goes into the kubeconfig (`certificate-authority-data`), so kubectl, kube-rs and
//! the Python client verify the server without any `insecure-skip-tls-verify`.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections (watches included) get to finish after shutdown is requested.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Errors generating certificates or building the rustls configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error(
        "invalid host {host:?} for the serving certificate: want an IP address or a DNS name \
         (letters, digits, '-' and '.', optionally starting with '*.')"
    )]
    InvalidHost { host: String },
    #[error("reading PEM {what}: {message}")]
    Pem { what: &'static str, message: String },
    #[error("building TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The PEM-encoded CA certificate, and the serving certificate and private key it signed.
#[derive(Clone)]
pub struct TlsMaterial {
    /// The CA certificate; clients trust this (the kubeconfig embeds it).
    pub ca_pem: String,
    /// The serving certificate (leaf only).
    pub cert_pem: String,
    /// The serving certificate's private key (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Generates a fresh CA (`devcluster-ca`) and a serving certificate valid for `localhost`,
/// `127.0.0.1`, `::1` and every entry of `hosts` (DNS names or IP addresses; duplicates are fine).
pub fn generate_tls(hosts: &[String]) -> Result<TlsMaterial, TlsError> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "devcluster-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    for host in hosts {
        let host = host.trim();
        if !host.is_empty() && !names.iter().any(|n| n == host) {
            names.push(host.to_string());
        }
    }
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    for name in &names {
        if !is_valid_host(name) {
            return Err(TlsError::InvalidHost { host: name.clone() });
        }
        let one = CertificateParams::new(vec![name.clone()])
            .map_err(|_| TlsError::InvalidHost { host: name.clone() })?;
        params.subject_alt_names.extend(one.subject_alt_names);
    }
    params
        .distinguished_name
        .push(DnType::CommonName, "devcluster-apiserver");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    // Strict verifiers (Python 3.13+ sets VERIFY_X509_STRICT by default) want the AKI.
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;

    Ok(TlsMaterial {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// An IP address, or a DNS name whose labels are letters, digits and inner hyphens (a leading
/// `*.` wildcard label is allowed).
fn is_valid_host(host: &str) -> bool {
    if host.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let name = host.strip_prefix("*.").unwrap_or(host);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

impl TlsMaterial {
    /// A rustls server configuration (ring provider, TLS 1.2 and 1.3, ALPN `http/1.1`).
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let certs = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| TlsError::Pem {
                what: "certificate",
                message: err.to_string(),
            })?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).map_err(|err| {
            TlsError::Pem {
                what: "private key",
                message: err.to_string(),
            }
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// Serves `app` over TLS (HTTP/1.1) on `listener` until `shutdown` is cancelled.
///
/// On shutdown it stops accepting, asks every open connection to finish its current response,
/// waits up to two seconds (watches are long-lived), then drops what is left. Failed handshakes
/// and broken connections are logged at debug level and never stop the server.
pub async fn serve_tls(
    listener: TcpListener,
    app: axum::Router,
    tls: &TlsMaterial,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let config = tls.server_config().map_err(std::io::Error::other)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let mut connections = JoinSet::new();

    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(err) => {
                    // Typically EMFILE; back off briefly instead of spinning.
                    tracing::warn!(error = %err, "accepting a TLS connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Reap finished connection tasks so the set does not grow without bound.
        while connections.try_join_next().is_some() {}

        let acceptor = acceptor.clone();
        let app = app.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let tls_stream =
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls_stream)) => tls_stream,
                    Ok(Err(err)) => {
                        tracing::debug!(%peer, error = %err, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
            // Handlers and the observer see the peer address as with `axum::serve`.
            let app = app.layer(axum::Extension(axum::extract::ConnectInfo(peer)));
            let service = TowerToHyperService::new(app);
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls_stream), service);
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(err) = result {
                        tracing::debug!(%peer, error = %err, "TLS connection ended with an error");
                    }
                }
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }

    drop(listener);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        connections.abort_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;

    fn version_app() -> axum::Router {
        axum::Router::new()
            .route(
                "/peer",
                get(
                    |axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<
                        std::net::SocketAddr,
                    >| async move { peer.ip().to_string() },
                ),
            )
            .route(
            "/version",
            get(|| async {
                axum::Json(serde_json::json!({
                    "major": "1", "minor": "36", "gitVersion": "v1.36.0-devcluster",
                    "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                    "goVersion": "", "compiler": "", "platform": "linux/amd64"
                }))
            }),
        )
    }

    async fn start(
        tls: &TlsMaterial,
    ) -> (
        std::net::SocketAddr,
        CancellationToken,
        tokio::task::JoinHandle<std::io::Result<()>>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let tls = tls.clone();
        let token = shutdown.clone();
        let handle =
            tokio::spawn(async move { serve_tls(listener, version_app(), &tls, token).await });
        (addr, shutdown, handle)
    }

    async fn client_from_kubeconfig(path: &std::path::Path) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    }

    #[tokio::test]
    async fn kube_client_trusts_the_server_through_the_kubeconfig_ca() {
        let tls = generate_tls(&["devcluster.local".to_string()]).unwrap();
        let (addr, shutdown, handle) = start(&tls).await;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        let url = format!("https://127.0.0.1:{}", addr.port());
        crate::kubeconfig::write_kubeconfig(&path, &url, Some(&tls.ca_pem), "token").unwrap();
        let client = client_from_kubeconfig(&path).await;
        let version = client.apiserver_version().await.unwrap();
        assert_eq!(version.git_version, "v1.36.0-devcluster");
        let peer = client
            .request_text(http::Request::get("/peer").body(Vec::new()).unwrap())
            .await
            .unwrap();
        assert_eq!(peer, "127.0.0.1", "handlers see the client address");

        // "localhost" is in the certificate too.
        let url = format!("https://localhost:{}", addr.port());
        crate::kubeconfig::write_kubeconfig(&path, &url, Some(&tls.ca_pem), "token").unwrap();
        let client = client_from_kubeconfig(&path).await;
        assert!(client.apiserver_version().await.is_ok());

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), handle)
            .await
            .expect("server stops after shutdown")
            .unwrap()
            .unwrap();
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "listener is closed after shutdown"
        );
    }

    /// Runs a program if it is installed; `None` when it is not (optional on developer machines).
    async fn run_optional(program: &str, args: &[&str]) -> Option<std::process::Output> {
        // Off the runtime thread: the server under test runs on it.
        let program_owned = program.to_string();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let result = tokio::task::spawn_blocking(move || {
            std::process::Command::new(program_owned)
                .args(args)
                .output()
        })
        .await
        .unwrap();
        match result {
            Ok(output) => Some(output),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(err) => panic!("running {program}: {err}"),
        }
    }

    #[tokio::test]
    async fn kubectl_and_python_verify_the_server_with_the_ca() {
        let tls = generate_tls(&[]).unwrap();
        let (addr, shutdown, _handle) = start(&tls).await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let url = format!("https://127.0.0.1:{}", addr.port());
        crate::kubeconfig::write_kubeconfig(&kubeconfig, &url, Some(&tls.ca_pem), "t").unwrap();
        let kubeconfig = kubeconfig.to_str().unwrap();

        // kubectl (Go crypto/tls).
        if let Some(out) = run_optional(
            "kubectl",
            &["--kubeconfig", kubeconfig, "get", "--raw", "/version"],
        )
        .await
        {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(String::from_utf8_lossy(&out.stdout).contains("v1.36.0-devcluster"));
        }

        // Python's ssl module (OpenSSL), as the Python `kubernetes` client uses through urllib3.
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, &tls.ca_pem).unwrap();
        let script = "import ssl, sys, urllib.request\n\
            ctx = ssl.create_default_context(cafile=sys.argv[1])\n\
            ctx.verify_flags |= ssl.VERIFY_X509_STRICT\n\
            print(urllib.request.urlopen(sys.argv[2] + '/version', context=ctx).read().decode())\n";
        for host in ["127.0.0.1", "localhost"] {
            let url = format!("https://{host}:{}", addr.port());
            if let Some(out) =
                run_optional("python3", &["-c", script, ca_file.to_str().unwrap(), &url]).await
            {
                assert!(
                    out.status.success(),
                    "{host}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(String::from_utf8_lossy(&out.stdout).contains("v1.36.0-devcluster"));
            }
        }
        shutdown.cancel();
    }

    #[tokio::test]
    async fn the_real_server_streams_watches_and_runs_pods_over_tls() {
        use futures::StreamExt as _;
        use k8s_openapi::api::core::v1::Pod;
        use kube::api::{Api, PostParams};
        use kube::runtime::{WatchStreamExt as _, watcher};

        let running = crate::DevCluster::start(crate::Config {
            tls: true,
            ..crate::Config::ephemeral()
        })
        .await
        .unwrap();
        assert!(running.url().starts_with("https://"), "{}", running.url());
        let pods: Api<Pod> = Api::namespaced(running.client(), "default");
        let mut ready = Box::pin(
            watcher(pods.clone(), watcher::Config::default())
                .applied_objects()
                .filter_map(|pod| async move {
                    let pod = pod.ok()?;
                    let ready = pod
                        .status
                        .as_ref()?
                        .conditions
                        .as_ref()?
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True");
                    ready.then_some(pod)
                }),
        );
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "over-tls" },
            "spec": { "containers": [{ "name": "c", "image": "busybox" }] }
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        // The watch events arrive over the TLS stream as the simulated kubelet writes them.
        let seen = tokio::time::timeout(Duration::from_secs(10), ready.next())
            .await
            .expect("Ready pod seen through the watch")
            .unwrap();
        assert_eq!(seen.metadata.name.as_deref(), Some("over-tls"));

        let kubeconfig = running.kubeconfig_path().to_str().unwrap().to_string();
        if let Some(out) = run_optional(
            "kubectl",
            &[
                "--kubeconfig",
                &kubeconfig,
                "get",
                "pod",
                "over-tls",
                "-o",
                "jsonpath={.status.phase}",
            ],
        )
        .await
        {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(String::from_utf8_lossy(&out.stdout), "Running");
        }
        running.shutdown().await;
    }

    #[tokio::test]
    async fn a_client_trusting_another_ca_is_refused() {
        let tls = generate_tls(&[]).unwrap();
        let other = generate_tls(&[]).unwrap();
        let (addr, shutdown, _handle) = start(&tls).await;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        let url = format!("https://127.0.0.1:{}", addr.port());
        crate::kubeconfig::write_kubeconfig(&path, &url, Some(&other.ca_pem), "token").unwrap();
        let client = client_from_kubeconfig(&path).await;
        assert!(client.apiserver_version().await.is_err());
        shutdown.cancel();
    }

    #[test]
    fn generated_material_is_pem_and_builds_a_server_config() {
        let tls = generate_tls(&["10.0.0.1".to_string(), "example.test".to_string()]).unwrap();
        assert!(tls.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(tls.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(tls.key_pem.contains("PRIVATE KEY"));
        assert_ne!(tls.ca_pem, tls.cert_pem);
        assert!(!format!("{tls:?}").contains(&tls.key_pem));
        let config = tls.server_config().unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn an_invalid_host_is_reported_by_name() {
        let err = generate_tls(&["bad host".to_string()]).unwrap_err();
        assert!(err.to_string().contains("\"bad host\""), "{err}");
        assert!(generate_tls(&["-x.example".to_string()]).is_err());
        assert!(generate_tls(&["*.svc.example".to_string(), "::2".to_string()]).is_ok());
    }
}
