//! What a request is about, from its method, path and query alone (the same classification a
//! kube-apiserver makes before authorization, metrics and audit).

use http::Method;

/// The classification of one HTTP request.
///
/// For resource requests (`/api/v1/...`, `/apis/GROUP/VERSION/...`) the verb is one of `get`,
/// `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection` (or `proxy`).
/// Everything else (`/version`, `/api`, `/apis/GROUP`, `/metrics`, `/healthz` ...) is a
/// non-resource request whose verb is the lowercased HTTP method.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    pub is_resource_request: bool,
    /// The path without the query string.
    pub path: String,
    pub verb: String,
    /// `api` or `apis` for resource requests, empty otherwise.
    pub api_prefix: String,
    /// Empty for the core group.
    pub api_group: String,
    pub api_version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// The path segments after the version and namespace (resource, name, subresource ...).
    pub parts: Vec<String>,
}

/// Classifies a request; never fails (anything unrecognised is a non-resource request).
pub fn parse_request_info(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
    let path = path.split('?').next().unwrap_or_default();
    let mut info = RequestInfo {
        path: path.to_string(),
        verb: method.as_str().to_ascii_lowercase(),
        ..RequestInfo::default()
    };

    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    // At least prefix + version + resource (core) or prefix + group + version + resource.
    if segments.len() < 3 {
        return info;
    }
    let prefix = segments[0];
    let mut rest: &[&str] = &segments[1..];
    match prefix {
        "api" => {}
        "apis" => {
            if rest.len() < 3 {
                return info;
            }
            info.api_group = rest[0].to_string();
            rest = &rest[1..];
        }
        _ => return info,
    }
    info.is_resource_request = true;
    info.api_prefix = prefix.to_string();
    info.api_version = rest[0].to_string();
    rest = &rest[1..];

    // Legacy verb-in-path forms: /api/v1/watch/..., /api/v1/proxy/...
    if matches!(rest.first(), Some(&"watch") | Some(&"proxy")) {
        if rest.len() < 2 {
            // "/api/v1/watch" alone names nothing; a real server rejects it. Count it as a
            // non-resource request rather than inventing a resource.
            return RequestInfo {
                path: path.to_string(),
                verb: method.as_str().to_ascii_lowercase(),
                ..RequestInfo::default()
            };
        }
        info.verb = rest[0].to_string();
        rest = &rest[1..];
    } else {
        info.verb = match *method {
            Method::POST => "create",
            Method::GET | Method::HEAD => "get",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => "",
        }
        .to_string();
    }

    // Namespace: /namespaces/NS/RESOURCE... scopes RESOURCE to NS, but /namespaces/NS alone and
    // /namespaces/NS/status|finalize are the namespace object itself and its subresources.
    if rest.first() == Some(&"namespaces")
        && let Some(ns) = rest.get(1)
    {
        info.namespace = ns.to_string();
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    info.parts = rest.iter().map(|s| s.to_string()).collect();

    if let Some(resource) = rest.first() {
        info.resource = resource.to_string();
    }
    if let Some(name) = rest.get(1) {
        info.name = name.to_string();
    }
    if rest.len() >= 3 && info.verb != "proxy" {
        info.subresource = rest[2].to_string();
    }

    let params = QueryParams::parse(query);
    if rest.len() == 1 && info.verb == "get" {
        info.verb = "list".into();
    }
    if info.verb == "list" && params.watch {
        info.verb = "watch".into();
    }
    if info.verb == "delete" && rest.len() == 1 {
        info.verb = "deletecollection".into();
    }
    // A list or watch narrowed to one object by `fieldSelector=metadata.name=X` is about X.
    if matches!(info.verb.as_str(), "list" | "watch")
        && info.name.is_empty()
        && let Some(name) = params.name_from_field_selector
    {
        info.name = name;
    }
    info
}

struct QueryParams {
    watch: bool,
    name_from_field_selector: Option<String>,
}

impl QueryParams {
    fn parse(query: Option<&str>) -> Self {
        let mut out = QueryParams {
            watch: false,
            name_from_field_selector: None,
        };
        let Some(query) = query else { return out };
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            match key.as_ref() {
                // The same spellings Go's strconv.ParseBool accepts as true.
                "watch" => {
                    out.watch = matches!(value.as_ref(), "1" | "t" | "T" | "true" | "TRUE" | "True")
                }
                "fieldSelector" => {
                    for term in value.split(',') {
                        let term = term.trim();
                        let rhs = term
                            .strip_prefix("metadata.name==")
                            .or_else(|| term.strip_prefix("metadata.name="));
                        if let Some(name) = rhs.filter(|n| !n.starts_with('=')) {
                            out.name_from_field_selector = Some(name.trim().to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: Method, uri: &str) -> RequestInfo {
        let (path, query) = match uri.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (uri, None),
        };
        parse_request_info(&method, path, query)
    }

    /// (verb, group, version, namespace, resource, subresource, name)
    fn summary(i: &RequestInfo) -> (bool, &str, &str, &str, &str, &str, &str, &str) {
        (
            i.is_resource_request,
            i.verb.as_str(),
            i.api_group.as_str(),
            i.api_version.as_str(),
            i.namespace.as_str(),
            i.resource.as_str(),
            i.subresource.as_str(),
            i.name.as_str(),
        )
    }

    #[test]
    fn core_collection_and_object_verbs() {
        let cases = [
            (
                Method::GET,
                "/api/v1/namespaces/default/pods",
                (true, "list", "", "v1", "default", "pods", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/pods?limit=500",
                (true, "list", "", "v1", "default", "pods", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/pods?watch=true&resourceVersion=10",
                (true, "watch", "", "v1", "default", "pods", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/pods?watch=1",
                (true, "watch", "", "v1", "default", "pods", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/pods?watch=false",
                (true, "list", "", "v1", "default", "pods", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/pods/web",
                (true, "get", "", "v1", "default", "pods", "", "web"),
            ),
            (
                Method::HEAD,
                "/api/v1/namespaces/default/pods/web",
                (true, "get", "", "v1", "default", "pods", "", "web"),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/default/pods",
                (true, "create", "", "v1", "default", "pods", "", ""),
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/default/pods/web",
                (true, "update", "", "v1", "default", "pods", "", "web"),
            ),
            (
                Method::PATCH,
                "/api/v1/namespaces/default/pods/web",
                (true, "patch", "", "v1", "default", "pods", "", "web"),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/default/pods/web",
                (true, "delete", "", "v1", "default", "pods", "", "web"),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/default/pods",
                (
                    true,
                    "deletecollection",
                    "",
                    "v1",
                    "default",
                    "pods",
                    "",
                    "",
                ),
            ),
            (
                Method::GET,
                "/api/v1/pods",
                (true, "list", "", "v1", "", "pods", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/pods?watch=true",
                (true, "watch", "", "v1", "", "pods", "", ""),
            ),
        ];
        for (method, uri, want) in cases {
            assert_eq!(summary(&info(method.clone(), uri)), want, "{method} {uri}");
        }
    }

    #[test]
    fn subresources() {
        let cases = [
            (
                Method::PATCH,
                "/api/v1/namespaces/ns1/pods/web/status",
                (true, "patch", "", "v1", "ns1", "pods", "status", "web"),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/ns1/pods/web/binding",
                (true, "create", "", "v1", "ns1", "pods", "binding", "web"),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/ns1/pods/web/eviction",
                (true, "create", "", "v1", "ns1", "pods", "eviction", "web"),
            ),
            (
                Method::GET,
                "/apis/agents.x-k8s.io/v1beta1/namespaces/ns1/sandboxes/s/scale",
                (
                    true,
                    "get",
                    "agents.x-k8s.io",
                    "v1beta1",
                    "ns1",
                    "sandboxes",
                    "scale",
                    "s",
                ),
            ),
            (
                Method::PUT,
                "/apis/agents.x-k8s.io/v1beta1/namespaces/ns1/sandboxes/s/status",
                (
                    true,
                    "update",
                    "agents.x-k8s.io",
                    "v1beta1",
                    "ns1",
                    "sandboxes",
                    "status",
                    "s",
                ),
            ),
        ];
        for (method, uri, want) in cases {
            assert_eq!(summary(&info(method.clone(), uri)), want, "{method} {uri}");
        }
    }

    #[test]
    fn named_groups_cluster_scoped_and_namespaces() {
        let cases = [
            (
                Method::GET,
                "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/team/sandboxclaims",
                (
                    true,
                    "list",
                    "extensions.agents.x-k8s.io",
                    "v1beta1",
                    "team",
                    "sandboxclaims",
                    "",
                    "",
                ),
            ),
            (
                Method::GET,
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/sandboxes.agents.x-k8s.io",
                (
                    true,
                    "get",
                    "apiextensions.k8s.io",
                    "v1",
                    "",
                    "customresourcedefinitions",
                    "",
                    "sandboxes.agents.x-k8s.io",
                ),
            ),
            (
                Method::GET,
                "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                (
                    true,
                    "list",
                    "rbac.authorization.k8s.io",
                    "v1",
                    "",
                    "clusterroles",
                    "",
                    "",
                ),
            ),
            // The namespace object itself.
            (
                Method::GET,
                "/api/v1/namespaces",
                (true, "list", "", "v1", "", "namespaces", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/team",
                (true, "get", "", "v1", "team", "namespaces", "", "team"),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/team",
                (true, "delete", "", "v1", "team", "namespaces", "", "team"),
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/team/finalize",
                (
                    true,
                    "update",
                    "",
                    "v1",
                    "team",
                    "namespaces",
                    "finalize",
                    "team",
                ),
            ),
            (
                Method::PATCH,
                "/api/v1/namespaces/team/status",
                (
                    true,
                    "patch",
                    "",
                    "v1",
                    "team",
                    "namespaces",
                    "status",
                    "team",
                ),
            ),
            (
                Method::POST,
                "/apis/coordination.k8s.io/v1/namespaces/agent-sandbox-system/leases",
                (
                    true,
                    "create",
                    "coordination.k8s.io",
                    "v1",
                    "agent-sandbox-system",
                    "leases",
                    "",
                    "",
                ),
            ),
        ];
        for (method, uri, want) in cases {
            assert_eq!(summary(&info(method.clone(), uri)), want, "{method} {uri}");
        }
    }

    #[test]
    fn non_resource_paths() {
        for (method, uri, verb) in [
            (Method::GET, "/version", "get"),
            (Method::GET, "/api", "get"),
            (Method::GET, "/api/v1", "get"),
            (Method::GET, "/apis", "get"),
            (Method::GET, "/apis/agents.x-k8s.io", "get"),
            (Method::GET, "/apis/agents.x-k8s.io/v1beta1", "get"),
            (Method::GET, "/metrics", "get"),
            (Method::GET, "/healthz", "get"),
            (
                Method::GET,
                "/openapi/v3/apis/agents.x-k8s.io/v1beta1",
                "get",
            ),
            (Method::POST, "/", "post"),
            (Method::GET, "/api/v1/watch", "get"),
        ] {
            let i = info(method.clone(), uri);
            assert!(!i.is_resource_request, "{uri} is not a resource request");
            assert_eq!(i.verb, verb, "{uri}");
            assert_eq!(i.path, uri);
            assert!(
                i.resource.is_empty() && i.api_group.is_empty(),
                "{uri}: {i:?}"
            );
        }
    }

    #[test]
    fn legacy_watch_paths() {
        let i = info(Method::GET, "/api/v1/watch/namespaces/default/pods");
        assert_eq!(
            summary(&i),
            (true, "watch", "", "v1", "default", "pods", "", "")
        );
        let i = info(Method::GET, "/api/v1/watch/namespaces/default/pods/web");
        assert_eq!(
            summary(&i),
            (true, "watch", "", "v1", "default", "pods", "", "web")
        );
        let i = info(Method::GET, "/apis/apps/v1/watch/deployments");
        assert_eq!(
            summary(&i),
            (true, "watch", "apps", "v1", "", "deployments", "", "")
        );
    }

    #[test]
    fn proxy_has_no_subresource() {
        let i = info(
            Method::GET,
            "/api/v1/proxy/namespaces/default/pods/web/some/path",
        );
        assert_eq!(i.verb, "proxy");
        assert_eq!(i.name, "web");
        assert_eq!(i.subresource, "");
    }

    #[test]
    fn field_selector_on_name_names_the_object() {
        let i = info(
            Method::GET,
            "/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Dweb&watch=true",
        );
        assert_eq!(
            summary(&i),
            (true, "watch", "", "v1", "default", "pods", "", "web")
        );
        let i = info(
            Method::GET,
            "/api/v1/namespaces/default/pods?fieldSelector=status.phase%3DRunning,metadata.name%3D%3Dweb",
        );
        assert_eq!(i.name, "web");
        let i = info(
            Method::GET,
            "/api/v1/namespaces/default/pods?fieldSelector=metadata.name%21%3Dweb",
        );
        assert_eq!(i.name, "", "!= does not name an object");
    }

    #[test]
    fn trailing_slashes_and_query_in_path_are_tolerated() {
        let i = info(Method::GET, "/api/v1/namespaces/default/pods/");
        assert_eq!(
            summary(&i),
            (true, "list", "", "v1", "default", "pods", "", "")
        );
        let i = parse_request_info(&Method::GET, "/api/v1/pods?watch=true", None);
        assert_eq!(i.path, "/api/v1/pods");
        assert_eq!(
            i.verb, "list",
            "the query argument, not the path, carries the parameters"
        );
    }

    #[test]
    fn unknown_methods_on_resources_have_an_empty_verb() {
        let i = info(Method::OPTIONS, "/api/v1/namespaces/default/pods/web");
        assert!(i.is_resource_request);
        assert_eq!(i.verb, "");
    }
}
