//! Request counters and latency histograms, readable as data and as Prometheus text.
//!
//! Exposition uses `prometheus-client` (the workspace's metrics crate: a maintained encoder with
//! correct histogram buckets and label escaping); the raw counts are also kept per class of
//! requests so tests can read them without parsing text. A class keeps its series' handles, so
//! a request of a class seen before is recorded without building labels or looking them up.

use std::collections::HashMap;
use std::hash::BuildHasher as _;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::request_info::RequestInfo;

/// The content type of [`RequestMetrics::render_prometheus`] (Prometheus text format 0.0.4).
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds (seconds) of the request duration histogram buckets.
pub const DURATION_BUCKETS: [f64; 15] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Upper bounds (seconds) of kube-apiserver's `apiserver_request_duration_seconds` buckets.
pub const APISERVER_DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

/// The `verb` label kube-apiserver puts on its request metrics: `LIST`, `WATCH`, `GET`, `POST`,
/// `PUT`, `PATCH`, `APPLY` (a patch with `application/apply-patch+yaml`), `DELETE`,
/// `DELETECOLLECTION`; for non-resource requests, the HTTP method.
pub fn apiserver_verb(info: &RequestInfo, content_type: Option<&str>) -> String {
    if !info.is_resource_request {
        return info.verb.to_ascii_uppercase();
    }
    match info.verb.as_str() {
        "create" => "POST".into(),
        "update" => "PUT".into(),
        "patch" if content_type.is_some_and(|c| c.starts_with("application/apply-patch")) => {
            "APPLY".into()
        }
        other => other.to_ascii_uppercase(),
    }
}

/// The `scope` label of kube-apiserver's request metrics.
pub fn apiserver_scope(info: &RequestInfo) -> &'static str {
    if !info.is_resource_request {
        ""
    } else if !info.name.is_empty() {
        "resource"
    } else if !info.namespace.is_empty() {
        "namespace"
    } else {
        "cluster"
    }
}

/// One counted class of requests.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestKey {
    /// As in [`RequestInfo::verb`]; for non-resource requests, the lowercased HTTP method.
    pub verb: String,
    /// API group (empty for core and for non-resource requests).
    pub group: String,
    /// Resource (empty for non-resource requests).
    pub resource: String,
    pub subresource: String,
    /// The `User-Agent` header as sent (empty when absent).
    pub user_agent: String,
    /// HTTP status of the response.
    pub code: u16,
}

type RequestLabels = Vec<(&'static str, String)>;

/// Every label `RequestMetrics::record` writes for a request: requests of one class count in
/// the same series of every family.
#[derive(Debug, PartialEq, Eq)]
struct ClassKey {
    request: RequestKey,
    is_resource_request: bool,
    api_version: String,
    /// A patch sent as `application/apply-patch+yaml` (verb `APPLY`).
    is_apply: bool,
    dry_run: String,
    scope: &'static str,
}

/// A class of requests: its count since the last reset and its series in each family.
struct Class {
    key: ClassKey,
    count: u64,
    requests: Counter,
    durations: Histogram,
    apiserver_requests: Counter,
    /// None for verbs kube-apiserver leaves out of its latency histogram.
    apiserver_durations: Option<Histogram>,
}

/// The classes seen, by a hash of their key (so that a request finds its class without
/// building the key).
#[derive(Default)]
struct ClassTable {
    hasher: std::hash::RandomState,
    by_hash: HashMap<u64, Vec<Class>>,
}

/// A request's class as borrowed from the request.
struct ClassRef<'a> {
    info: &'a RequestInfo,
    is_apply: bool,
    dry_run: &'a str,
    user_agent: &'a str,
    code: u16,
}

impl ClassRef<'_> {
    /// What the hash of a class covers (the members of its key that vary most).
    fn hashed(&self) -> (&str, &str, &str, &str, &str, u16, bool) {
        let info = self.info;
        (
            &info.verb,
            &info.api_group,
            &info.resource,
            &info.subresource,
            self.user_agent,
            self.code,
            self.is_apply,
        )
    }

    fn is(&self, key: &ClassKey) -> bool {
        let info = self.info;
        key.request.verb == info.verb
            && key.request.group == info.api_group
            && key.request.resource == info.resource
            && key.request.subresource == info.subresource
            && key.request.user_agent == self.user_agent
            && key.request.code == self.code
            && key.is_resource_request == info.is_resource_request
            && key.api_version == info.api_version
            && key.is_apply == self.is_apply
            && key.dry_run == self.dry_run
            && key.scope == apiserver_scope(info)
    }
}

/// The counters and histograms of one server.
pub struct RequestMetrics {
    /// Every class of requests seen since the last reset, with its count and metric handles.
    classes: Mutex<ClassTable>,
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Family<RequestLabels, Histogram>,
    apiserver_requests: Family<RequestLabels, Counter>,
    apiserver_durations: Family<RequestLabels, Histogram>,
    injected: Family<RequestLabels, Counter>,
    open_watches: Gauge,
}

impl Default for RequestMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let durations = Family::<RequestLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(DURATION_BUCKETS)) as fn() -> Histogram,
        );
        let apiserver_requests = Family::<RequestLabels, Counter>::default();
        let apiserver_durations = Family::<RequestLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(APISERVER_DURATION_BUCKETS)) as fn() -> Histogram,
        );
        let injected = Family::<RequestLabels, Counter>::default();
        let open_watches = Gauge::default();
        // prometheus-client appends `_total` to counters itself.
        registry.register(
            "devcluster_requests",
            "Requests served, by verb, API group, resource, subresource, user agent and HTTP code",
            requests.clone(),
        );
        registry.register(
            "devcluster_request_duration_seconds",
            "Time from receiving a request to sending its response headers (for watches: until the stream starts)",
            durations.clone(),
        );
        // The names and labels kube-apiserver uses, so queries written for a real cluster work.
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code",
            apiserver_requests.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component",
            apiserver_durations.clone(),
        );
        registry.register(
            "devcluster_injected_faults",
            "Requests answered with an injected error, by verb, resource and HTTP code",
            injected.clone(),
        );
        registry.register(
            "devcluster_open_watches",
            "Watch streams currently open",
            open_watches.clone(),
        );
        // Families are shared handles: the registry and this struct see the same values.
        Self {
            classes: Mutex::new(ClassTable::default()),
            registry,
            requests,
            durations,
            apiserver_requests,
            apiserver_durations,
            injected,
            open_watches,
        }
    }

    /// Records one finished request (its response headers were produced). `content_type` is the
    /// request's, which tells an apply from other patches.
    pub fn record(
        &self,
        info: &RequestInfo,
        content_type: Option<&str>,
        dry_run: &str,
        user_agent: &str,
        code: u16,
        elapsed: Duration,
    ) {
        let class = ClassRef {
            info,
            is_apply: content_type.is_some_and(|c| c.starts_with("application/apply-patch")),
            dry_run,
            user_agent,
            code,
        };
        let mut classes = self.classes();
        let hash = classes.hasher.hash_one(class.hashed());
        let bucket = classes.by_hash.entry(hash).or_default();
        let position = match bucket.iter().position(|c| class.is(&c.key)) {
            Some(position) => position,
            None => {
                bucket.push(self.new_class(&class));
                bucket.len() - 1
            }
        };
        let Some(class) = bucket.get_mut(position) else {
            return;
        };
        class.count += 1;
        let seconds = elapsed.as_secs_f64();
        class.requests.inc();
        class.durations.observe(seconds);
        class.apiserver_requests.inc();
        if let Some(histogram) = &class.apiserver_durations {
            histogram.observe(seconds);
        }
    }

    /// The handles of a class of requests not seen since the last reset (called with the class
    /// table locked, so that a reset cannot leave handles of cleared families in it).
    fn new_class(&self, class: &ClassRef<'_>) -> Class {
        let info = class.info;
        let content_type = class.is_apply.then_some("application/apply-patch+yaml");
        let key = RequestKey {
            verb: info.verb.clone(),
            group: info.api_group.clone(),
            resource: info.resource.clone(),
            subresource: info.subresource.clone(),
            user_agent: class.user_agent.to_string(),
            code: class.code,
        };
        let labels = vec![
            ("verb", key.verb.clone()),
            ("group", key.group.clone()),
            ("resource", key.resource.clone()),
            ("subresource", key.subresource.clone()),
            ("user_agent", key.user_agent.clone()),
            ("code", class.code.to_string()),
        ];
        let requests = self.requests.get_or_create(&labels).clone();
        let duration_labels = vec![
            ("verb", info.verb.clone()),
            ("group", info.api_group.clone()),
            ("resource", info.resource.clone()),
            ("subresource", info.subresource.clone()),
        ];
        let durations = self.durations.get_or_create(&duration_labels).clone();

        let verb = apiserver_verb(info, content_type);
        let scope = apiserver_scope(info).to_string();
        let common = |with_subresource: bool| {
            let mut labels = vec![
                ("verb", verb.clone()),
                ("dry_run", class.dry_run.to_string()),
                ("group", info.api_group.clone()),
                ("version", info.api_version.clone()),
                ("resource", info.resource.clone()),
            ];
            if with_subresource {
                labels.push(("subresource", info.subresource.clone()));
            }
            labels.push(("scope", scope.clone()));
            labels.push(("component", "apiserver".to_string()));
            labels
        };
        let mut counter_labels = common(true);
        counter_labels.push(("code", class.code.to_string()));
        let apiserver_requests = self
            .apiserver_requests
            .get_or_create(&counter_labels)
            .clone();
        // kube-apiserver leaves WATCH and CONNECT out of its latency histogram.
        let apiserver_durations = (!matches!(verb.as_str(), "WATCH" | "CONNECT")).then(|| {
            self.apiserver_durations
                .get_or_create(&common(true))
                .clone()
        });
        Class {
            key: ClassKey {
                request: key,
                is_resource_request: info.is_resource_request,
                api_version: info.api_version.clone(),
                is_apply: class.is_apply,
                dry_run: class.dry_run.to_string(),
                scope: apiserver_scope(info),
            },
            count: 0,
            requests,
            durations,
            apiserver_requests,
            apiserver_durations,
        }
    }

    /// Forgets every count and observation (e.g. between benchmark phases); open watches stay.
    pub fn reset(&self) {
        let mut classes = self.classes();
        classes.by_hash.clear();
        self.requests.clear();
        self.durations.clear();
        self.apiserver_requests.clear();
        self.apiserver_durations.clear();
        self.injected.clear();
    }

    /// Records that a request was answered with an injected error.
    pub fn record_injected(&self, info: &RequestInfo, code: u16) {
        let labels = vec![
            ("verb", info.verb.clone()),
            ("resource", info.resource.clone()),
            ("code", code.to_string()),
        ];
        self.injected.get_or_create(&labels).inc();
    }

    pub(super) fn watch_opened(&self) {
        self.open_watches.inc();
    }

    pub(super) fn watch_closed(&self) {
        self.open_watches.dec();
    }

    /// Watch streams open right now.
    pub fn open_watches(&self) -> i64 {
        self.open_watches.get()
    }

    /// Every counted class with its count, sorted by key.
    pub fn counts(&self) -> Vec<(RequestKey, u64)> {
        let mut counts: HashMap<RequestKey, u64> = HashMap::new();
        for class in self.classes().by_hash.values().flatten() {
            *counts.entry(class.key.request.clone()).or_default() += class.count;
        }
        let mut out: Vec<_> = counts.into_iter().collect();
        out.sort();
        out
    }

    /// Sum of the counts whose key satisfies `filter`.
    pub fn total(&self, filter: impl Fn(&RequestKey) -> bool) -> u64 {
        self.classes()
            .by_hash
            .values()
            .flatten()
            .filter(|class| filter(&class.key.request))
            .map(|class| class.count)
            .sum()
    }

    /// The class table (a poisoned lock still holds consistent counts: each update is one
    /// increment).
    fn classes(&self) -> std::sync::MutexGuard<'_, ClassTable> {
        self.classes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Prometheus text exposition (format 0.0.4; see [`PROMETHEUS_CONTENT_TYPE`]).
    pub fn render_prometheus(&self) -> String {
        let mut out = String::new();
        // Encoding into a String only fails if a metric's own encoder fails, which the built-in
        // counter, gauge and histogram never do.
        if let Err(err) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        {
            tracing::warn!(error = %err, "encoding metrics failed");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::parse_request_info;
    use http::Method;

    #[test]
    fn counts_and_prometheus_text_agree() {
        let metrics = RequestMetrics::new();
        let list = parse_request_info(&Method::GET, "/api/v1/namespaces/d/pods", None);
        let status = parse_request_info(&Method::PATCH, "/api/v1/namespaces/d/pods/p/status", None);
        metrics.record(
            &list,
            None,
            "",
            "kubectl/v1.32.0",
            200,
            Duration::from_millis(3),
        );
        metrics.record(
            &list,
            None,
            "",
            "kubectl/v1.32.0",
            200,
            Duration::from_millis(4),
        );
        metrics.record(
            &status,
            None,
            "",
            "kube-rs/5.0.0",
            409,
            Duration::from_micros(50),
        );

        let counts = metrics.counts();
        assert_eq!(counts.len(), 2);
        let list_key = RequestKey {
            verb: "list".into(),
            group: String::new(),
            resource: "pods".into(),
            subresource: String::new(),
            user_agent: "kubectl/v1.32.0".into(),
            code: 200,
        };
        assert!(counts.contains(&(list_key, 2)));
        assert_eq!(metrics.total(|k| k.resource == "pods"), 3);
        assert_eq!(
            metrics.total(|k| k.code == 409 && k.subresource == "status"),
            1
        );

        let text = metrics.render_prometheus();
        assert!(
            text.contains("# TYPE devcluster_requests_total counter"),
            "{text}"
        );
        assert!(
            text.contains(r#"devcluster_requests_total{verb="list",group="",resource="pods",subresource="",user_agent="kubectl/v1.32.0",code="200"} 2"#),
            "{text}"
        );
        assert!(
            text.contains("# TYPE devcluster_request_duration_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains(r#"devcluster_request_duration_seconds_bucket{le="0.005",verb="list",group="",resource="pods",subresource=""} 2"#)
                || text.contains(r#"devcluster_request_duration_seconds_bucket{verb="list",group="",resource="pods",subresource="",le="0.005"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"devcluster_request_duration_seconds_count{verb="patch",group="",resource="pods",subresource="status"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn apiserver_metrics_use_kube_apiserver_names_and_labels() {
        let metrics = RequestMetrics::new();
        let apply = parse_request_info(
            &Method::PATCH,
            "/apis/agents.x-k8s.io/v1beta1/namespaces/d/sandboxes/s",
            None,
        );
        metrics.record(
            &apply,
            Some("application/apply-patch+yaml"),
            "",
            "k",
            200,
            Duration::from_millis(30),
        );
        let watch = parse_request_info(&Method::GET, "/api/v1/pods", Some("watch=true"));
        metrics.record(&watch, None, "", "k", 200, Duration::from_millis(1));
        let create = parse_request_info(&Method::POST, "/api/v1/namespaces/d/pods", None);
        metrics.record(
            &create,
            Some("application/json"),
            "All",
            "k",
            201,
            Duration::from_millis(1),
        );
        let text = metrics.render_prometheus();
        assert!(text.contains(r#"apiserver_request_total{verb="APPLY",dry_run="",group="agents.x-k8s.io",version="v1beta1",resource="sandboxes",subresource="",scope="resource",component="apiserver",code="200"} 1"#), "{text}");
        assert!(text.contains(r#"apiserver_request_total{verb="WATCH",dry_run="",group="",version="v1",resource="pods",subresource="",scope="cluster",component="apiserver",code="200"} 1"#), "{text}");
        assert!(text.contains(r#"apiserver_request_total{verb="POST",dry_run="All",group="",version="v1",resource="pods",subresource="",scope="namespace",component="apiserver",code="201"} 1"#), "{text}");
        assert!(text.contains(r#"apiserver_request_duration_seconds_bucket{le="0.05",verb="APPLY""#)
            || text.contains(r#"apiserver_request_duration_seconds_bucket{verb="APPLY",dry_run="",group="agents.x-k8s.io",version="v1beta1",resource="sandboxes",subresource="",scope="resource",component="apiserver",le="0.05"} 1"#), "{text}");
        assert!(
            !text.contains(r#"apiserver_request_duration_seconds_count{verb="WATCH""#),
            "{text}"
        );

        metrics.reset();
        assert!(metrics.counts().is_empty());
        assert!(
            !metrics
                .render_prometheus()
                .contains("apiserver_request_total{")
        );

        // A class seen before the reset is counted afresh after it, in the text as in the counts.
        metrics.record(&watch, None, "", "k", 200, Duration::from_millis(1));
        metrics.record(&watch, None, "", "k", 200, Duration::from_millis(1));
        assert_eq!(metrics.total(|k| k.resource == "pods"), 2);
        let text = metrics.render_prometheus();
        assert!(text.contains(r#"apiserver_request_total{verb="WATCH",dry_run="",group="",version="v1",resource="pods",subresource="",scope="cluster",component="apiserver",code="200"} 2"#), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        let metrics = RequestMetrics::new();
        let info = parse_request_info(&Method::GET, "/version", None);
        metrics.record(&info, None, "", "weird \"agent\"\n", 200, Duration::ZERO);
        let text = metrics.render_prometheus();
        assert!(text.contains(r#"user_agent="weird \"agent\"\n""#), "{text}");
    }

    #[test]
    fn open_watch_gauge_follows_opens_and_closes() {
        let metrics = RequestMetrics::new();
        metrics.watch_opened();
        metrics.watch_opened();
        metrics.watch_closed();
        assert_eq!(metrics.open_watches(), 1);
        assert!(
            metrics
                .render_prometheus()
                .contains("devcluster_open_watches 1")
        );
    }
}
