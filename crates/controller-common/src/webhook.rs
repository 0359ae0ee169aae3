//! The CRD conversion webhook each controller serves for the kinds it owns.
//!
//! This crate knows no CRD: the binary hands [`start`] its [`Conversions`] (which kinds, which
//! versions, and the function that converts one object) and its flags ([`WebhookArgs`]).
//!
//! ```text
//! start (before the admin endpoints, on every replica)
//!   managed certificates:   Secret --webhook-cert-secret: read, or generate and create; renew
//!                           when it expires within 30 days or names another Service
//!                           patch this controller's CRDs: Service, /convert, caBundle
//!   unmanaged certificates: read --webhook-cert-dir/{--webhook-cert-name,--webhook-key-name}
//!   bind --webhook-host:--webhook-port, serve POST /convert over TLS
//! then, until shutdown, every few minutes
//!   managed:   re-read the Secret (a renewal by another replica), renew when due, serve the
//!              current certificate, re-patch a CRD whose webhook settings were reset
//!   unmanaged: re-read the files (cert-manager renewals), serve them when they changed
//! ```
//!
//! Any failure during `start` is returned (the binary exits 1, like the reference); after it,
//! failures are logged and the current certificate stays in use. The listener is bound before
//! `start` returns, so a replica is never ready before it can convert.

pub mod args;
pub mod certs;
pub mod crd_config;
pub mod review;
pub mod server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use args::WebhookArgs;
use certs::{CertBundle, CertError, Renewal};
use crd_config::{Plan, Target};
use server::{Resolver, WebhookMetrics};

/// How often the certificate (and, when managed, the CRDs) is checked again after start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recheck {
    /// Managed certificates and the CRDs: every 5 minutes.
    pub managed: Duration,
    /// Mounted certificate files: every 30 seconds (kubelet refreshes a mounted Secret within
    /// about a minute).
    pub files: Duration,
}

impl Default for Recheck {
    fn default() -> Self {
        Recheck {
            managed: Duration::from_secs(5 * 60),
            files: Duration::from_secs(30),
        }
    }
}

/// Converts one object (as JSON) to the desired `apiVersion`; the error text is shown to the
/// client whose request needed the conversion.
pub type ConvertFn = Arc<dyn Fn(&Value, &str) -> Result<Value, String> + Send + Sync>;

/// One kind the webhook converts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertibleKind {
    pub group: String,
    pub kind: String,
    /// Its CRD, whose conversion settings a managed webhook keeps pointed at itself.
    pub crd_name: String,
    /// The served versions.
    pub versions: Vec<String>,
}

impl ConvertibleKind {
    pub fn new(group: &str, kind: &str, crd_name: &str, versions: &[&str]) -> Self {
        ConvertibleKind {
            group: group.to_owned(),
            kind: kind.to_owned(),
            crd_name: crd_name.to_owned(),
            versions: versions.iter().map(|v| (*v).to_owned()).collect(),
        }
    }
}

/// What a webhook converts, and how.
#[derive(Clone)]
pub struct Conversions {
    kinds: Vec<ConvertibleKind>,
    convert: ConvertFn,
}

impl Conversions {
    pub fn new(
        kinds: Vec<ConvertibleKind>,
        convert: impl Fn(&Value, &str) -> Result<Value, String> + Send + Sync + 'static,
    ) -> Self {
        Conversions {
            kinds,
            convert: Arc::new(convert),
        }
    }

    pub fn kinds(&self) -> &[ConvertibleKind] {
        &self.kinds
    }

    fn kind(&self, group: &str, kind: &str) -> Option<&ConvertibleKind> {
        self.kinds
            .iter()
            .find(|k| k.group == group && k.kind == kind)
    }

    /// `Kind.group (v1, v2), ...` for messages.
    fn describe(&self) -> String {
        self.kinds
            .iter()
            .map(|k| format!("{}.{} ({})", k.kind, k.group, k.versions.join(", ")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl std::fmt::Debug for Conversions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversions")
            .field("kinds", &self.kinds)
            .finish_non_exhaustive()
    }
}

/// What can stop the webhook from starting.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("certificate Secret {namespace}/{name}: {source}")]
    Secret {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("CustomResourceDefinition {name}: {source}")]
    Crd {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot listen on {address} for the conversion webhook: {source}")]
    Bind {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// A running webhook; it stops with the token given to [`start`].
#[derive(Debug)]
pub struct Webhook {
    /// Where it listens.
    pub local_addr: SocketAddr,
    server: JoinHandle<()>,
    maintenance: JoinHandle<()>,
}

impl Webhook {
    /// Waits until the server has stopped (after the shutdown token was cancelled).
    pub async fn stopped(self) {
        let _ = self.server.await;
        self.maintenance.abort();
    }
}

/// Where the certificate comes from.
#[derive(Clone)]
enum Source {
    Managed(Box<Managed>),
    Files {
        dir: std::path::PathBuf,
        cert_name: String,
        key_name: String,
    },
}

#[derive(Clone)]
struct Managed {
    secrets: Api<Secret>,
    secret_name: String,
    namespace: String,
    names: [String; 4],
    crds: Api<CustomResourceDefinition>,
    crd_names: Vec<String>,
    service: String,
    manager: String,
}

/// Starts the webhook the flags describe, or does nothing with `--enable-webhook=false`.
/// `manager` names this controller (field manager of its CRD patches, logs).
pub async fn start(
    args: &WebhookArgs,
    cluster_domain: &str,
    manager: &str,
    client: Client,
    conversions: Conversions,
    registry: &mut Registry,
    shutdown: CancellationToken,
) -> Result<Option<Webhook>, WebhookError> {
    start_with(
        args,
        cluster_domain,
        manager,
        client,
        conversions,
        registry,
        shutdown,
        Recheck::default(),
    )
    .await
}

/// [`start`] with other re-check intervals (tests).
#[allow(clippy::too_many_arguments)]
pub async fn start_with(
    args: &WebhookArgs,
    cluster_domain: &str,
    manager: &str,
    client: Client,
    conversions: Conversions,
    registry: &mut Registry,
    shutdown: CancellationToken,
    recheck: Recheck,
) -> Result<Option<Webhook>, WebhookError> {
    for ignored in args.ignored() {
        tracing::warn!(flag = ignored, "webhook flag has no effect");
    }
    if !args.enable_webhook {
        tracing::info!(
            crds = ?conversions.kinds.iter().map(|k| &k.crd_name).collect::<Vec<_>>(),
            "conversion webhook disabled (--enable-webhook=false): these CRDs must use conversion.strategy None, or every request that needs a conversion fails"
        );
        return Ok(None);
    }
    let source = if args.manage_webhook_certs {
        Source::Managed(Box::new(Managed {
            secrets: Api::namespaced(client.clone(), &args.webhook_namespace),
            secret_name: args.webhook_cert_secret.clone(),
            namespace: args.webhook_namespace.clone(),
            names: certs::service_dns_names(
                &args.webhook_service_name,
                &args.webhook_namespace,
                cluster_domain,
            ),
            crds: Api::all(client),
            crd_names: conversions
                .kinds
                .iter()
                .map(|k| k.crd_name.clone())
                .collect(),
            service: args.webhook_service_name.clone(),
            manager: manager.to_owned(),
        }))
    } else {
        Source::Files {
            dir: args.webhook_cert_dir.clone(),
            cert_name: args.webhook_cert_name.clone(),
            key_name: args.webhook_key_name.clone(),
        }
    };

    let (bundle, files, key) = match &source {
        Source::Managed(managed) => {
            let bundle = managed.ensure_certificate(None).await?;
            let key = certs::certified_key(&bundle.cert_pem, &bundle.key_pem)?;
            managed.point_crds(&bundle).await?;
            (Some(bundle), None, key)
        }
        Source::Files {
            dir,
            cert_name,
            key_name,
        } => {
            let files = certs::read_files(dir, cert_name, key_name)?;
            let key = certs::certified_key(&files.0, &files.1)?;
            (None, Some(files), key)
        }
    };
    let resolver = Arc::new(Resolver::new(key));
    let config = server::tls_config(resolver.clone())?;
    let listener = bind(&args.webhook_host, args.webhook_port).await?;
    let local_addr = listener.local_addr().map_err(|source| WebhookError::Bind {
        address: format!("{}:{}", args.webhook_host, args.webhook_port),
        source,
    })?;
    let app = server::router(conversions, Some(WebhookMetrics::register(registry)));
    let server = tokio::spawn(server::serve(listener, config, app, shutdown.clone()));
    let maintenance = tokio::spawn(maintain(source, bundle, files, resolver, shutdown, recheck));
    tracing::info!(address = %local_addr, managed_certificates = args.manage_webhook_certs, "conversion webhook serving {}", server::CONVERT_PATH);
    Ok(Some(Webhook {
        local_addr,
        server,
        maintenance,
    }))
}

async fn bind(host: &str, port: u16) -> Result<TcpListener, WebhookError> {
    let address = crate::args::BindAddress::Listen {
        host: host.to_owned(),
        port,
    };
    let mut last = None;
    for (host, port) in address.bind_candidates() {
        match TcpListener::bind((host.as_str(), port)).await {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(WebhookError::Bind {
        address: address.to_string(),
        source: last.unwrap_or_else(|| std::io::Error::other("no address to bind")),
    })
}

/// The periodic re-check after start (see the module docs). Failures are logged; the current
/// certificate stays in use.
async fn maintain(
    source: Source,
    mut current: Option<CertBundle>,
    mut files: Option<(String, String)>,
    resolver: Arc<Resolver>,
    shutdown: CancellationToken,
    recheck: Recheck,
) {
    let interval = match source {
        Source::Managed(_) => recheck.managed,
        Source::Files { .. } => recheck.files,
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        match &source {
            Source::Managed(managed) => {
                let bundle = match managed.ensure_certificate(current.as_ref()).await {
                    Ok(bundle) => bundle,
                    Err(e) => {
                        tracing::warn!(error = %e, "re-checking the webhook certificate failed; keeping the current one");
                        continue;
                    }
                };
                if current.as_ref() != Some(&bundle) {
                    match certs::certified_key(&bundle.cert_pem, &bundle.key_pem) {
                        Ok(key) => {
                            resolver.set(key);
                            tracing::info!("serving the renewed webhook certificate");
                            current = Some(bundle.clone());
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "the webhook certificate in the Secret is unusable; keeping the current one");
                            continue;
                        }
                    }
                }
                if let Err(e) = managed.point_crds(&bundle).await {
                    tracing::warn!(error = %e, "re-pointing the CRDs at the webhook failed");
                }
            }
            Source::Files {
                dir,
                cert_name,
                key_name,
            } => match certs::read_files(dir, cert_name, key_name) {
                Ok(read) if files.as_ref() == Some(&read) => {}
                Ok(read) => match certs::certified_key(&read.0, &read.1) {
                    Ok(key) => {
                        tracing::info!(
                            "serving the webhook certificate re-read from {}",
                            dir.display()
                        );
                        resolver.set(key);
                        files = Some(read);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the webhook certificate files are unusable; keeping the current certificate")
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "re-reading the webhook certificate failed; keeping the current one")
                }
            },
        }
    }
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

impl Managed {
    fn secret_error(&self, source: kube::Error) -> WebhookError {
        WebhookError::Secret {
            namespace: self.namespace.clone(),
            name: self.secret_name.clone(),
            source,
        }
    }

    async fn read_secret(&self) -> Result<CertBundle, WebhookError> {
        let secret = self
            .secrets
            .get(&self.secret_name)
            .await
            .map_err(|e| self.secret_error(e))?;
        Ok(certs::from_secret(&secret)?)
    }

    /// The bundle in the Secret, created or renewed when needed. `in_memory` (what this replica
    /// serves) is kept trusted by a Secret that has to be created anew (someone deleted it).
    async fn ensure_certificate(
        &self,
        in_memory: Option<&CertBundle>,
    ) -> Result<CertBundle, WebhookError> {
        let now = SystemTime::now();
        let existing = self
            .secrets
            .get_opt(&self.secret_name)
            .await
            .map_err(|e| self.secret_error(e))?;
        let Some(secret) = existing else {
            let bundle = certs::generate(&self.names, now, in_memory.map(|b| b.ca_pem.as_str()))?;
            let created = self
                .secrets
                .create(
                    &PostParams::default(),
                    &certs::to_secret(&bundle, &self.secret_name, &self.namespace),
                )
                .await;
            return match created {
                Ok(_) => {
                    tracing::info!(secret = %self.secret_name, "generated the conversion webhook certificate");
                    Ok(bundle)
                }
                // Another replica was first: use its certificate.
                Err(e) if is_status(&e, 409) => self.read_secret().await,
                Err(e) => Err(self.secret_error(e)),
            };
        };
        let bundle = certs::from_secret(&secret)?;
        let reason = match certs::renewal(&bundle, &self.names, now)? {
            Renewal::NotNeeded => return Ok(bundle),
            reason => reason,
        };
        tracing::info!(?reason, secret = %self.secret_name, "renewing the conversion webhook certificate");
        let renewed = certs::generate(&self.names, now, Some(&bundle.ca_pem))?;
        let mut replacement = certs::to_secret(&renewed, &self.secret_name, &self.namespace);
        replacement.metadata.resource_version = secret.metadata.resource_version.clone();
        match self
            .secrets
            .replace(&self.secret_name, &PostParams::default(), &replacement)
            .await
        {
            Ok(_) => Ok(renewed),
            // Another replica renewed it first.
            Err(e) if is_status(&e, 409) => self.read_secret().await,
            Err(e) => Err(self.secret_error(e)),
        }
    }

    /// Points this controller's CRDs at its Service with the bundle's CA.
    async fn point_crds(&self, bundle: &CertBundle) -> Result<(), WebhookError> {
        let target = Target {
            service: self.service.clone(),
            namespace: self.namespace.clone(),
            path: server::CONVERT_PATH.to_owned(),
            ca_pem: bundle.ca_pem.clone(),
        };
        for name in &self.crd_names {
            let crd_error = |source| WebhookError::Crd {
                name: name.clone(),
                source,
            };
            let Some(crd) = self.crds.get_opt(name).await.map_err(crd_error)? else {
                tracing::info!(crd = %name, "CRD not installed; its conversion webhook is set once it is (next re-check)");
                continue;
            };
            match crd_config::plan(&crd, &target) {
                Plan::Nothing => {}
                Plan::NotWebhook => {
                    tracing::info!(crd = %name, "CRD does not use webhook conversion; left alone");
                }
                Plan::Patch(patch) => {
                    let params = PatchParams {
                        field_manager: Some(self.manager.clone()),
                        ..PatchParams::default()
                    };
                    self.crds
                        .patch(name, &params, &Patch::Merge(patch))
                        .await
                        .map_err(crd_error)?;
                    tracing::info!(crd = %name, service = %self.service, "pointed the CRD's conversion webhook at this controller");
                }
            }
        }
        Ok(())
    }
}
