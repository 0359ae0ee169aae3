//! The kube client: configuration from `--kubeconfig`/`KUBECONFIG` or in-cluster, with the
//! client-side rate limit of `--kube-api-qps`/`--kube-api-burst`, and the leader-election
//! fence ([`FenceLayer`]) that refuses writes once the Lease may be lost.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Once;
use std::task::{Context, Poll};

use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use tower::{BoxError, Layer, Service};

use crate::args::CommonArgs;
use crate::error::Error;
use crate::leader_election::fence::Fence;
use crate::rate_limit::{RateLimit, RateLimitLayer};
use crate::request_metrics::{RequestMetrics, RequestMetricsLayer};

/// Installs rustls' `ring` crypto provider as the process default, once. Safe to call many
/// times; also called by [`build_client`]. Call it at the top of `main` if the binary opens TLS
/// connections before building a client.
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Err means a provider was installed already (by the binary): that one stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Loads the client configuration: the kubeconfig file(s) of `--kubeconfig`/`KUBECONFIG` (a
/// `:`-separated list is merged) when given, else `~/.kube/config` when it exists, else the
/// in-cluster service account (kube's `Config::infer`).
pub async fn load_config(args: &CommonArgs) -> Result<Config, Error> {
    match &args.kubeconfig {
        Some(path) => config_from_kubeconfig_paths(path).await,
        None => Config::infer().await.map_err(Error::InferConfig),
    }
}

async fn config_from_kubeconfig_paths(paths: &Path) -> Result<Config, Error> {
    let wrap = |source| Error::Kubeconfig {
        path: paths.to_path_buf(),
        source,
    };
    let mut merged: Option<Kubeconfig> = None;
    for path in std::env::split_paths(paths.as_os_str()) {
        if path.as_os_str().is_empty() {
            continue;
        }
        let next = Kubeconfig::read_from(&path).map_err(wrap)?;
        merged = Some(match merged {
            Some(acc) => acc.merge(next).map_err(wrap)?,
            None => next,
        });
    }
    let kubeconfig = merged.ok_or_else(|| {
        wrap(kube::config::KubeconfigError::ReadConfig(
            std::io::Error::new(std::io::ErrorKind::NotFound, "empty kubeconfig path"),
            paths.to_path_buf(),
        ))
    })?;
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(wrap)
}

/// Sends `User-Agent: <binary>/v<version>` on every request, as client-go does, so API-server
/// request counters and audit logs can tell the controllers apart; with an `identity` (the
/// replica's leader-election identity) `<binary>/v<version> (<identity>)`, so they can also
/// tell two replicas of one controller apart (which one wrote after it lost the Lease).
/// Replaces any earlier value.
pub fn set_user_agent(config: &mut Config, binary: &str, identity: Option<&str>) {
    let version = env!("CARGO_PKG_VERSION");
    let agent = match identity {
        Some(identity) => format!("{binary}/v{version} ({identity})"),
        None => format!("{binary}/v{version}"),
    };
    if let Ok(value) = http::HeaderValue::from_str(&agent) {
        config
            .headers
            .retain(|(name, _)| name != http::header::USER_AGENT);
        config.headers.push((http::header::USER_AGENT, value));
    }
}

/// Builds a client for `config` with the rate limit applied to every request.
pub fn client_with_rate_limit(config: Config, limit: RateLimit) -> Result<Client, Error> {
    install_crypto_provider();
    let builder = ClientBuilder::try_from(config).map_err(Error::Kube)?;
    Ok(builder.with_layer(&RateLimitLayer::new(limit)).build())
}

/// Like [`client_with_rate_limit`], also counting every request sent (after the rate limit)
/// into `metrics` as `rest_client_requests_total`, and, with a `fence`, refusing every write the
/// fence does not allow at the moment it would be sent ([`FenceLayer`], innermost: after the
/// rate limiter's wait).
pub fn instrumented_client(
    config: Config,
    limit: RateLimit,
    metrics: &RequestMetrics,
    fence: Option<&Fence>,
) -> Result<Client, Error> {
    install_crypto_provider();
    let host = config
        .cluster_url
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    let builder = ClientBuilder::try_from(config).map_err(Error::Kube)?;
    let fence = fence.cloned().map(FenceLayer::new);
    Ok(builder
        .with_layer(&tower::util::option_layer(fence))
        .with_layer(&RequestMetricsLayer::new(metrics.clone(), host))
        .with_layer(&RateLimitLayer::new(limit))
        .build())
}

/// `client` with every write checked against `fence` before it is handed to `client` (for a
/// client built elsewhere, e.g. by a test; [`instrumented_client`] puts the check closer to
/// the wire).
pub fn fenced(client: Client, fence: Fence) -> Client {
    let namespace = client.default_namespace().to_owned();
    let send = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let client = client.clone();
        async move { client.send(request).await }
    });
    Client::new(FenceLayer::new(fence).layer(send), namespace)
}

/// Whether a request changes something on the server (create, update, patch, delete).
fn is_write(method: &http::Method) -> bool {
    !matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

/// Tower layer refusing writes (anything but GET, HEAD, OPTIONS) while `fence` does not allow
/// them (see [`crate::leader_election::fence`]); reads always pass, so a replica that lost the
/// Lease can still watch and list while it stops.
#[derive(Clone, Debug)]
pub struct FenceLayer {
    fence: Fence,
}

impl FenceLayer {
    pub fn new(fence: Fence) -> Self {
        FenceLayer { fence }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = FencedRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedRequests {
            inner,
            fence: self.fence.clone(),
        }
    }
}

/// See [`FenceLayer`].
#[derive(Clone, Debug)]
pub struct FencedRequests<S> {
    inner: S,
    fence: Fence,
}

impl<S, B> Service<http::Request<B>> for FencedRequests<S>
where
    S: Service<http::Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if is_write(request.method())
            && let Err(refused) = self.fence.check()
        {
            tracing::warn!(
                method = %request.method(),
                path = %request.uri().path(),
                error = %refused,
                "write not sent"
            );
            return Box::pin(std::future::ready(Err(BoxError::from(refused))));
        }
        let response = self.inner.call(request);
        Box::pin(async move { response.await.map_err(Into::into) })
    }
}

/// The client the flags describe: [`load_config`] plus
/// [`RateLimit::from_flags`]`(--kube-api-qps, --kube-api-burst)`.
pub async fn build_client(args: &CommonArgs) -> Result<Client, Error> {
    let config = load_config(args).await?;
    client_with_rate_limit(
        config,
        RateLimit::from_flags(args.kube_api_qps, args.kube_api_burst),
    )
}

/// An event recorder reporting as `controller` (e.g. `sandbox-controller`), with this pod's
/// name (`POD_NAME`, else the host name) as the instance. Whether to record events at all is
/// the binary's decision.
pub fn event_recorder(client: Client, controller: &str) -> crate::events::EventRecorder {
    let instance = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| {
            hostname::get()
                .ok()
                .map(|h| h.to_string_lossy().into_owned())
        });
    crate::events::EventRecorder::new(
        client,
        crate::events::Reporter {
            controller: controller.to_owned(),
            instance,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::Fake;
    use clap::Parser;
    use k8s_openapi::api::coordination::v1::Lease;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    fn kubeconfig(server: &str, context: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: {context}\nclusters:\n- name: {context}\n  cluster:\n    server: {server}\ncontexts:\n- name: {context}\n  context:\n    cluster: {context}\n    user: {context}\n    namespace: ops\nusers:\n- name: {context}\n  user:\n    token: test-token\n"
        )
    }

    #[test]
    fn user_agent_names_the_binary_once() {
        let mut config = Config::new("http://127.0.0.1:1".parse().unwrap());
        set_user_agent(&mut config, "first", None);
        set_user_agent(&mut config, "sandbox-controller", Some("pod-a_1234"));
        let agents: Vec<_> = config
            .headers
            .iter()
            .filter(|(name, _)| name == http::header::USER_AGENT)
            .map(|(_, value)| value.to_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            agents,
            [format!(
                "sandbox-controller/v{} (pod-a_1234)",
                env!("CARGO_PKG_VERSION")
            )]
        );
    }

    #[tokio::test]
    async fn kubeconfig_flag_with_a_path_list_is_merged_and_used() {
        let fake = Fake::start().await;
        let mut elector = fake.elector("a", crate::leader_election::LeaseTimings::default());
        assert!(elector.try_acquire_or_renew().await.unwrap());

        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("first.yaml");
        let second = dir.path().join("second.yaml");
        // The first file names the current context; later files only add entries.
        std::fs::write(&first, kubeconfig(&format!("http://{}", fake.addr), "dev")).unwrap();
        std::fs::write(&second, kubeconfig("http://127.0.0.1:9", "other")).unwrap();
        let list = std::env::join_paths([&first, &second]).unwrap();
        let args = Cli::try_parse_from([
            std::ffi::OsString::from("test"),
            std::ffi::OsString::from("--kubeconfig"),
            list,
        ])
        .unwrap()
        .common;

        let client = build_client(&args).await.unwrap();
        assert_eq!(client.default_namespace(), "ops");
        let lease = kube::Api::<Lease>::default_namespaced(client)
            .get("test-lease")
            .await
            .unwrap();
        assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("a"));
    }

    #[tokio::test]
    async fn a_missing_kubeconfig_names_the_file() {
        let args = Cli::try_parse_from(["test", "--kubeconfig", "/nonexistent/kubeconfig.yaml"])
            .unwrap()
            .common;
        let err = build_client(&args)
            .await
            .err()
            .expect("missing file is an error");
        assert!(
            err.to_string().contains("/nonexistent/kubeconfig.yaml"),
            "{err}"
        );
    }
}
