//! The kube client: configuration from `--kubeconfig`/`KUBECONFIG` or in-cluster, with the
//! client-side rate limit of `--kube-api-qps`/`--kube-api-burst`.

use std::path::Path;
use std::sync::Once;

use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::args::CommonArgs;
use crate::error::Error;
use crate::rate_limit::{RateLimit, RateLimitLayer};

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

/// Loads the client configuration: the kubeconfig file(s) of `--kubeconfig` (a `:`-separated
/// list is merged like `KUBECONFIG`) when given, else in-cluster config, else `~/.kube/config`.
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

/// Builds a client for `config` with the rate limit applied to every request.
pub fn client_with_rate_limit(config: Config, limit: RateLimit) -> Result<Client, Error> {
    install_crypto_provider();
    let builder = ClientBuilder::try_from(config).map_err(Error::Kube)?;
    Ok(builder.with_layer(&RateLimitLayer::new(limit)).build())
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
