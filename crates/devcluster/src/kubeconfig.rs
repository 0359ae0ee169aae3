//! Kubeconfig writing and bearer-token checking.
//!
//! devcluster writes one kubeconfig per run: a cluster `devcluster` (server URL, and the CA when
//! serving TLS), a user `devcluster` with a bearer token, and a context `devcluster` that is the
//! current context. kubectl, kube-rs and the Python `kubernetes` client all read it unmodified.
//!
//! Authentication is deliberately thin: any bearer token is accepted unless a token file is
//! configured ([`TokenFile`]), in which case the `Authorization: Bearer` header must carry one of
//! its tokens. Nothing is authorized per user (RBAC objects are stored, not enforced).

use std::collections::HashSet;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::json;

/// Name used for the cluster, the user and the context in the written kubeconfig.
pub const CONTEXT_NAME: &str = "devcluster";

/// Renders the kubeconfig YAML for a server (pure; see [`write_kubeconfig`]).
///
/// `ca_pem` is the PEM of the CA that signed the serving certificate, embedded base64-encoded as
/// `certificate-authority-data`; pass `None` for plain HTTP.
pub fn kubeconfig_yaml(server_url: &str, ca_pem: Option<&str>, token: &str) -> String {
    let mut cluster = json!({ "server": server_url });
    if let Some(ca) = ca_pem {
        cluster["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(ca.as_bytes()));
    }
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{ "name": CONTEXT_NAME, "cluster": cluster }],
        "users": [{ "name": CONTEXT_NAME, "user": { "token": token } }],
        "contexts": [{
            "name": CONTEXT_NAME,
            "context": { "cluster": CONTEXT_NAME, "user": CONTEXT_NAME, "namespace": "default" }
        }],
        "current-context": CONTEXT_NAME,
    });
    // Serializing a `serde_json::Value` to YAML cannot fail (string keys, no special floats).
    serde_yaml::to_string(&doc).unwrap_or_default()
}

/// Writes the kubeconfig to `path`, creating parent directories.
///
/// The file holds a credential, so it is created with mode 0600 on Unix. It is written to a
/// temporary sibling first and renamed into place, so a reader never sees half a file.
pub fn write_kubeconfig(
    path: &Path,
    server_url: &str,
    ca_pem: Option<&str>,
    token: &str,
) -> io::Result<()> {
    let yaml = kubeconfig_yaml(server_url, ca_pem, token);
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let file_name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("kubeconfig path {} has no file name", path.display()),
        )
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp_path = path.with_file_name(tmp_name);

    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let result = (|| {
        let mut file = options.open(&tmp_path)?;
        file.write_all(yaml.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp_path, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp_path);
    }
    result
}

/// Errors reading a token file.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot read token file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("token file {path} holds no tokens (one per line: `token[,user[,uid[,groups]]]`)")]
    Empty { path: PathBuf },
}

/// The accepted bearer tokens, read from a file in the kube-apiserver `--token-auth-file` shape:
/// one entry per line, `token,user,uid,"group1,group2"`, where only the first field is required
/// and only it is used. Blank lines and lines starting with `#` are skipped.
#[derive(Debug, Clone)]
pub struct TokenFile {
    tokens: HashSet<String>,
}

impl TokenFile {
    /// Reads and parses the file.
    pub fn load(path: &Path) -> Result<Self, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let file = Self::parse(&text);
        if file.tokens.is_empty() {
            return Err(TokenFileError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(file)
    }

    /// Parses the file's text (pure; see [`TokenFile::load`]).
    pub fn parse(text: &str) -> Self {
        let tokens = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .filter_map(|line| line.split(',').next())
            .map(|token| token.trim().trim_matches('"').to_string())
            .filter(|token| !token.is_empty())
            .collect();
        Self { tokens }
    }

    /// Whether `token` is one of the file's tokens.
    pub fn contains(&self, token: &str) -> bool {
        self.tokens.contains(token)
    }
}

/// Why a request was not authenticated (the server answers 401 `Unauthorized`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("Unauthorized")]
    MissingToken,
    #[error("Unauthorized")]
    UnknownToken,
}

/// Checks an `Authorization` header value against the configured token file.
///
/// With no token file every request is accepted, with or without a token (the devcluster
/// default). With one, the header must be `Bearer <token>` (scheme case-insensitive) with a
/// listed token. The error's Display is the message a real API server puts in its 401 `Status`.
pub fn check_bearer(
    tokens: Option<&TokenFile>,
    authorization: Option<&str>,
) -> Result<(), AuthError> {
    let Some(tokens) = tokens else {
        return Ok(());
    };
    let header = authorization.ok_or(AuthError::MissingToken)?.trim();
    let (scheme, token) = header.split_once(' ').ok_or(AuthError::MissingToken)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::MissingToken);
    }
    if tokens.contains(token.trim()) {
        Ok(())
    } else {
        Err(AuthError::UnknownToken)
    }
}

/// Paths a real API server serves to anonymous clients (`system:public-info-viewer`).
const PUBLIC_PATHS: [&str; 4] = ["/version", "/healthz", "/livez", "/readyz"];

/// The `Status` body of a 401, as a real API server sends it.
pub fn unauthorized_status() -> serde_json::Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    })
}

/// axum middleware enforcing the token file (use with `axum::middleware::from_fn_with_state`,
/// state `Option<Arc<TokenFile>>`; `None` lets everything through).
///
/// A request with a wrong token is refused with 401 everywhere; a request without a token is
/// refused with 401 except on `/version`, `/healthz`, `/livez` and `/readyz`, which a real
/// server shows to anonymous users. (A real server would answer other anonymous requests with
/// 403 from RBAC; devcluster has no RBAC enforcement, so it says 401.)
pub async fn require_bearer_token(
    axum::extract::State(tokens): axum::extract::State<Option<std::sync::Arc<TokenFile>>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let header = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match check_bearer(tokens.as_deref(), header) {
        Ok(()) => next.run(request).await,
        Err(AuthError::MissingToken)
            if header.is_none() && PUBLIC_PATHS.contains(&request.uri().path()) =>
        {
            next.run(request).await
        }
        Err(_) => axum::response::Response::builder()
            .status(http::StatusCode::UNAUTHORIZED)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(unauthorized_status().to_string()))
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    #[test]
    fn kube_reads_the_written_kubeconfig_with_token_and_ca() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/dir/kubeconfig");
        write_kubeconfig(&path, "https://127.0.0.1:6443", Some(CA), "s3cret").unwrap();

        let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some(CONTEXT_NAME));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        let ca_b64 = cluster.certificate_authority_data.as_deref().unwrap();
        let ca = base64::engine::general_purpose::STANDARD
            .decode(ca_b64)
            .unwrap();
        assert_eq!(String::from_utf8(ca).unwrap(), CA);
        assert!(kc.auth_infos[0].auth_info.as_ref().unwrap().token.is_some());
        // kube keeps the token secret; read it back from the YAML itself.
        let raw: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(raw["users"][0]["user"]["token"].as_str(), Some("s3cret"));
        let ctx = kc.contexts[0].context.as_ref().unwrap();
        assert_eq!(ctx.cluster, CONTEXT_NAME);
        assert_eq!(ctx.user.as_deref(), Some(CONTEXT_NAME));
    }

    #[test]
    fn plain_http_kubeconfig_has_no_ca() {
        let yaml = kubeconfig_yaml("http://127.0.0.1:6443", None, "t");
        assert!(!yaml.contains("certificate-authority"), "{yaml}");
        assert!(yaml.contains("http://127.0.0.1:6443"));
    }

    #[cfg(unix)]
    #[test]
    fn kubeconfig_is_private_to_its_owner_and_replaced_whole() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        write_kubeconfig(&path, "http://127.0.0.1:1", None, "first").unwrap();
        write_kubeconfig(&path, "http://127.0.0.1:2", None, "second").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("second") && !text.contains("first"), "{text}");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "temporary file left behind");
    }

    #[test]
    fn kubectl_reads_the_kubeconfig_when_installed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        write_kubeconfig(&path, "https://127.0.0.1:6443", Some(CA), "tok").unwrap();
        let output = match std::process::Command::new("kubectl")
            .args([
                "config",
                "view",
                "--raw",
                "-o",
                "jsonpath={.current-context} {.clusters[0].cluster.server} {.users[0].user.token}",
                "--kubeconfig",
            ])
            .arg(&path)
            .output()
        {
            Ok(output) => output,
            // kubectl is optional on developer machines; the kube-rs test above covers parsing.
            Err(err) if err.kind() == io::ErrorKind::NotFound => return,
            Err(err) => panic!("running kubectl: {err}"),
        };
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "devcluster https://127.0.0.1:6443 tok"
        );
    }

    #[test]
    fn token_file_parses_csv_and_skips_comments() {
        let file =
            TokenFile::parse("# comment\n\nabc,admin,1,\"system:masters\"\n  def  \n\"ghi\",u\n");
        assert!(file.contains("abc"));
        assert!(file.contains("def"));
        assert!(file.contains("ghi"));
        assert!(!file.contains("admin"));
        assert!(!file.contains("# comment"));
    }

    #[test]
    fn empty_token_file_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.csv");
        std::fs::write(&path, "# nothing\n").unwrap();
        let err = TokenFile::load(&path).unwrap_err();
        assert!(matches!(err, TokenFileError::Empty { .. }));
        assert!(err.to_string().contains("tokens.csv"));
        let missing = TokenFile::load(&dir.path().join("absent")).unwrap_err();
        assert!(matches!(missing, TokenFileError::Read { .. }));
    }

    #[test]
    fn any_token_is_accepted_without_a_token_file() {
        assert_eq!(check_bearer(None, None), Ok(()));
        assert_eq!(check_bearer(None, Some("Bearer whatever")), Ok(()));
        assert_eq!(check_bearer(None, Some("Basic Zm9vOmJhcg==")), Ok(()));
    }

    #[tokio::test]
    async fn the_middleware_answers_401_status_for_bad_or_missing_tokens() {
        use std::sync::Arc;
        use tower::ServiceExt as _;
        let app = |tokens: Option<Arc<TokenFile>>| {
            axum::Router::new()
                .route("/version", axum::routing::get(|| async { "v" }))
                .route("/api/v1/pods", axum::routing::get(|| async { "pods" }))
                .layer(axum::middleware::from_fn_with_state(
                    tokens,
                    require_bearer_token,
                ))
        };
        let call = |router: axum::Router, path: &'static str, token: Option<&'static str>| async move {
            let mut request = http::Request::builder().uri(path);
            if let Some(token) = token {
                request = request.header("authorization", format!("Bearer {token}"));
            }
            let response = router
                .oneshot(request.body(axum::body::Body::empty()).unwrap())
                .await
                .unwrap();
            response.status().as_u16()
        };
        let locked = app(Some(Arc::new(TokenFile::parse("good\n"))));
        assert_eq!(
            call(locked.clone(), "/api/v1/pods", Some("good")).await,
            200
        );
        assert_eq!(call(locked.clone(), "/api/v1/pods", Some("bad")).await, 401);
        assert_eq!(call(locked.clone(), "/api/v1/pods", None).await, 401);
        assert_eq!(
            call(locked.clone(), "/version", None).await,
            200,
            "public info"
        );
        assert_eq!(call(locked.clone(), "/version", Some("bad")).await, 401);
        let open = app(None);
        assert_eq!(call(open.clone(), "/api/v1/pods", None).await, 200);
        assert_eq!(call(open, "/api/v1/pods", Some("anything")).await, 200);

        let response = locked
            .oneshot(
                http::Request::builder()
                    .uri("/api/v1/pods")
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let mut stream = response.into_body().into_data_stream();
        let mut body = Vec::new();
        while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
            body.extend_from_slice(&chunk.unwrap());
        }
        let status: kube::core::Status = serde_json::from_slice(&body).unwrap();
        assert_eq!((status.code, status.reason.as_str()), (401, "Unauthorized"));
    }

    #[test]
    fn token_file_requires_a_listed_bearer_token() {
        let tokens = TokenFile::parse("good\n");
        assert_eq!(check_bearer(Some(&tokens), Some("Bearer good")), Ok(()));
        assert_eq!(check_bearer(Some(&tokens), Some("bearer good")), Ok(()));
        assert_eq!(
            check_bearer(Some(&tokens), Some("Bearer bad")),
            Err(AuthError::UnknownToken)
        );
        assert_eq!(
            check_bearer(Some(&tokens), None),
            Err(AuthError::MissingToken)
        );
        assert_eq!(
            check_bearer(Some(&tokens), Some("Basic good")),
            Err(AuthError::MissingToken)
        );
        assert_eq!(AuthError::UnknownToken.to_string(), "Unauthorized");
    }
}
