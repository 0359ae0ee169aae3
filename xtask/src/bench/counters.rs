//! API request counters: devcluster's `devcluster_requests_total{verb,group,resource,
//! subresource,user_agent,code}` (every request the server answered) and each controller's own
//! `rest_client_requests_total{code,host,method}`. Snapshots before and after a phase give the
//! requests that phase caused.
//!
//! On the real control plane the server's counter is kube-apiserver's
//! `apiserver_request_total{verb,group,resource,subresource,code,...}`, which does not say who
//! sent a request. It is read into devcluster's shape ([`from_apiserver`]): the benchmark client's
//! writes are told apart by what only it sends (`BENCH_ONLY_WRITES`), the simulated nodes'
//! (kwok's Pod status, the scheduler's bindings) by resource as on devcluster, and the
//! heartbeats (Leases, Node status) are left out. Who sent what is read from the API server's
//! audit log instead, which records every request of the controllers' ServiceAccounts
//! ([`AuditTally`]).

use std::collections::BTreeMap;

use serde::Serialize;

use super::cluster::{BENCH_USER_AGENT, Stack, http_get};
use super::error::BenchError;
use super::prom::{self, Sample};

/// Verbs (devcluster's names) that change state.
const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];
/// The read verbs devcluster counts (a watch is counted once, when it starts).
const READ_VERBS: [&str; 3] = ["get", "list", "watch"];
/// Writes devcluster's simulated nodes (scheduler, kubelets, volume binder) send through its
/// own in-process client, which carries no user agent: `verb resource/subresource`. They are
/// the cluster's work, not a controller's, and are left out of the controllers' totals.
const SIMULATED_NODE_WRITES: [&str; 4] = [
    "create pods/binding",
    "patch pods/status",
    "update pods/status",
    "patch persistentvolumeclaims/status",
];
/// Writes on the real control plane that only the benchmark client sends (the controllers never
/// create or delete claims, create templates or pools, scale a pool, or create ConfigMaps or
/// CRDs): `verb resource[/subresource]`. In `scale` the benchmark also creates the Sandboxes,
/// which cannot be told from the pool's, so that scenario reports no write total.
const BENCH_ONLY_WRITES: [&str; 7] = [
    "create sandboxclaims",
    "delete sandboxclaims",
    "create sandboxtemplates",
    "create sandboxwarmpools",
    "patch sandboxwarmpools",
    "create configmaps",
    "create customresourcedefinitions",
];
/// Resources whose writes on the real control plane are heartbeats, not work a claim causes:
/// kwok's node Leases and Node status, kube-controller-manager's and kube-scheduler's leader
/// Leases, the API server's identity Lease. Left out of every figure.
const HEARTBEAT_RESOURCES: [&str; 2] = ["leases", "nodes"];
/// The controllers' counter of the requests their webhooks answered (conversion, by code).
const WEBHOOK_REQUESTS: &str = "controller_runtime_webhook_requests_total";
/// HTTP methods that change state.
const WRITE_METHODS: [&str; 4] = ["POST", "PUT", "PATCH", "DELETE"];

/// Counters at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The server's requests, in devcluster's shape (`devcluster_requests_total`).
    devcluster: Vec<Sample>,
    /// Controller name → its samples.
    controllers: BTreeMap<&'static str, Vec<Sample>>,
    /// On the real control plane: the controllers' requests from the audit log, in devcluster's
    /// shape with `user_agent` the controller's name; the source of `*_by_agent`.
    audit: Option<Vec<Sample>>,
}

impl Snapshot {
    /// The samples scraped from controller `name`, empty when it was not running.
    pub fn controller(&self, name: &str) -> &[Sample] {
        self.controllers.get(name).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// Scrapes the server's `/metrics` (through the API client: devcluster's, or kube-apiserver's
/// with the admin credentials), the real API server's audit log, and every running controller's
/// `/metrics`.
pub async fn snapshot(stack: &Stack) -> Result<Snapshot, BenchError> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| BenchError::Unavailable(format!("building the /metrics request: {e}")))?;
    let text = stack
        .client
        .request_text(request)
        .await
        .map_err(|e| BenchError::kube("scraping devcluster /metrics", e))?;
    let audit = stack.audit_counts()?;
    let server = prom::parse(&text);
    let mut snapshot = Snapshot {
        devcluster: if audit.is_some() {
            from_apiserver(&server)
        } else {
            server
        },
        controllers: BTreeMap::new(),
        audit,
    };
    for controller in &stack.controllers {
        let (code, body) = http_get(controller.metrics_addr, "/metrics").await?;
        if code != 200 {
            return Err(BenchError::Http {
                url: format!("http://{}/metrics", controller.metrics_addr),
                message: format!("status {code}"),
            });
        }
        snapshot
            .controllers
            .insert(controller.kind.name(), prom::parse(&body));
    }
    Ok(snapshot)
}

/// Requests a phase caused.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RequestDelta {
    /// Writes each controller sent (its own client counters, POST/PUT/PATCH/DELETE).
    pub writes_by_controller: BTreeMap<String, f64>,
    /// Writes devcluster answered for anyone but the benchmark client (real control plane: every
    /// write kube-apiserver answered but the benchmark client's, the simulated nodes' and the
    /// heartbeats; so kube-controller-manager's and kube-scheduler's writes are included, see
    /// `writes_by_agent`).
    pub writes_total: f64,
    /// Writes by `verb resource[/subresource]` (devcluster, not the benchmark client).
    pub writes_by_verb_resource: BTreeMap<String, f64>,
    /// All requests (reads too) by verb, not the benchmark client's nor the simulated nodes'
    /// writes (the nodes' reads cannot be told apart and are included).
    pub requests_by_verb: BTreeMap<String, f64>,
    /// Writes answered with a non-2xx code (conflicts, mostly), not the benchmark client.
    pub failed_writes: f64,
    /// Those failed writes by `verb resource[/subresource] code`.
    pub failed_writes_by_verb_resource: BTreeMap<String, f64>,
    /// Writes by the sender's user agent (its binary name, before the `/`; `nodes` for
    /// devcluster's simulated nodes, which send none), then `verb resource[/subresource]`. On
    /// the real control plane: the controllers' from the audit log (by ServiceAccount), and
    /// `kube-components` for what the API server counted beyond them (kube-controller-manager's
    /// EndpointSlices and garbage collection, Events of the scheduler).
    pub writes_by_agent: BTreeMap<String, BTreeMap<String, f64>>,
    /// Reads (`get`, `list`, `watch`) by the sender's user agent, then `verb
    /// resource[/subresource]`; not the benchmark client's.
    pub reads_by_agent: BTreeMap<String, BTreeMap<String, f64>>,
    /// Writes of devcluster's simulated nodes (binding, pod status), not in `writes_total`.
    pub simulated_node_writes: f64,
    /// Requests the controllers' webhooks answered: the API server's conversion calls. On the
    /// real control plane every write of a Sandbox, claim, pool or template costs at least one
    /// (the watch cache of the served version it is not stored at decodes it through the
    /// webhook), and they trail the writes by seconds when kube-apiserver is busy.
    pub webhook_requests: f64,
}

impl RequestDelta {
    /// Nothing happened: no write (the simulated nodes' included) and no webhook request.
    pub fn is_quiet(&self) -> bool {
        self.writes_total + self.simulated_node_writes + self.webhook_requests == 0.0
    }

    /// Every figure divided by `n` (per claim), rounded to 2 decimals.
    pub fn per(&self, n: usize) -> RequestDelta {
        let n = n.max(1) as f64;
        let scale = |m: &BTreeMap<String, f64>| {
            m.iter()
                .map(|(k, v)| (k.clone(), super::stats::round(v / n, 2)))
                .collect()
        };
        RequestDelta {
            writes_by_controller: scale(&self.writes_by_controller),
            writes_total: super::stats::round(self.writes_total / n, 2),
            writes_by_verb_resource: scale(&self.writes_by_verb_resource),
            requests_by_verb: scale(&self.requests_by_verb),
            failed_writes: super::stats::round(self.failed_writes / n, 2),
            failed_writes_by_verb_resource: scale(&self.failed_writes_by_verb_resource),
            writes_by_agent: self
                .writes_by_agent
                .iter()
                .map(|(agent, m)| (agent.clone(), scale(m)))
                .collect(),
            reads_by_agent: self
                .reads_by_agent
                .iter()
                .map(|(agent, m)| (agent.clone(), scale(m)))
                .collect(),
            simulated_node_writes: super::stats::round(self.simulated_node_writes / n, 2),
            webhook_requests: super::stats::round(self.webhook_requests / n, 2),
        }
    }
}

fn is_bench(sample: &Sample) -> bool {
    sample.label("user_agent").starts_with(BENCH_USER_AGENT)
}

fn resource_key(sample: &Sample) -> String {
    let sub = sample.label("subresource");
    if sub.is_empty() {
        format!("{} {}", sample.label("verb"), sample.label("resource"))
    } else {
        format!(
            "{} {}/{}",
            sample.label("verb"),
            sample.label("resource"),
            sub
        )
    }
}

/// The binary name a user agent starts with (`extensions-controller/v0.1.0` →
/// `extensions-controller`); `nodes` when empty (devcluster's simulated nodes send none).
fn agent_name(sample: &Sample) -> String {
    let agent = sample.label("user_agent");
    match agent.split('/').next() {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => "nodes".to_owned(),
    }
}

fn sum_by(
    samples: &[Sample],
    name: &str,
    key: impl Fn(&Sample) -> Option<String>,
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for sample in samples.iter().filter(|s| s.name == name) {
        if let Some(k) = key(sample) {
            *out.entry(k).or_insert(0.0) += sample.value;
        }
    }
    out
}

fn minus(after: BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .into_iter()
        .map(|(k, v)| {
            let d = v - before.get(&k).copied().unwrap_or(0.0);
            (k, d)
        })
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

/// What happened between `before` and `after` (pure).
pub fn delta(before: &Snapshot, after: &Snapshot) -> RequestDelta {
    const DC: &str = "devcluster_requests_total";
    let others_write = |s: &Sample| !is_bench(s) && WRITE_VERBS.contains(&s.label("verb"));
    let by_resource = |snap: &Snapshot| {
        sum_by(&snap.devcluster, DC, |s| {
            others_write(s).then(|| resource_key(s))
        })
    };
    let by_verb = |snap: &Snapshot| {
        sum_by(&snap.devcluster, DC, |s| {
            let node_write = SIMULATED_NODE_WRITES.contains(&resource_key(s).as_str());
            (!is_bench(s) && !node_write).then(|| s.label("verb").to_string())
        })
    };
    let failed = |snap: &Snapshot| {
        prom::sum(&snap.devcluster, DC, |s| {
            others_write(s) && !s.label("code").starts_with('2')
        })
    };
    let failed_by_resource = |snap: &Snapshot| {
        sum_by(&snap.devcluster, DC, |s| {
            (others_write(s) && !s.label("code").starts_with('2'))
                .then(|| format!("{} {}", resource_key(s), s.label("code")))
        })
    };
    let others_read = |s: &Sample| !is_bench(s) && READ_VERBS.contains(&s.label("verb"));
    let mut writes_by_agent = by_agent(before, after, others_write);
    let reads_by_agent = by_agent(before, after, others_read);
    let writes_by_verb_resource = minus(by_resource(after), &by_resource(before));
    if after.audit.is_some() {
        // What the API server counted beyond the controllers' audited writes.
        let mut rest = writes_by_verb_resource.clone();
        for per_resource in writes_by_agent.values() {
            for (key, count) in per_resource {
                if let Some(total) = rest.get_mut(key) {
                    *total -= count;
                }
            }
        }
        rest.retain(|key, count| *count > 0.0 && !SIMULATED_NODE_WRITES.contains(&key.as_str()));
        if !rest.is_empty() {
            writes_by_agent.insert("kube-components".to_owned(), rest);
        }
    }
    let simulated_node_writes = writes_by_verb_resource
        .iter()
        .filter(|(k, _)| SIMULATED_NODE_WRITES.contains(&k.as_str()))
        .map(|(_, v)| v)
        .sum();
    let writes_total = writes_by_verb_resource
        .iter()
        .filter(|(k, _)| !SIMULATED_NODE_WRITES.contains(&k.as_str()))
        .map(|(_, v)| v)
        .sum();
    let webhook = |samples: &[Sample]| prom::sum(samples, WEBHOOK_REQUESTS, |_| true);
    let webhook_requests = after
        .controllers
        .iter()
        .map(|(name, samples)| (webhook(samples) - webhook(before.controller(name))).max(0.0))
        .sum();
    let mut writes_by_controller = BTreeMap::new();
    for (name, samples) in &after.controllers {
        let count = |samples: &[Sample]| {
            prom::sum(samples, "rest_client_requests_total", |s| {
                WRITE_METHODS.contains(&s.label("method"))
            })
        };
        let prior = before
            .controllers
            .get(name)
            .map(|s| count(s))
            .unwrap_or(0.0);
        writes_by_controller.insert(name.to_string(), (count(samples) - prior).max(0.0));
    }
    RequestDelta {
        writes_by_controller,
        writes_total,
        writes_by_verb_resource,
        requests_by_verb: minus(by_verb(after), &by_verb(before)),
        failed_writes: (failed(after) - failed(before)).max(0.0),
        failed_writes_by_verb_resource: minus(
            failed_by_resource(after),
            &failed_by_resource(before),
        ),
        writes_by_agent,
        reads_by_agent,
        simulated_node_writes,
        webhook_requests,
    }
}

/// devcluster's requests that `pick` selects (the audited controllers' on the real control
/// plane), by sender then `verb resource[/subresource]`, between two snapshots.
fn by_agent(
    before: &Snapshot,
    after: &Snapshot,
    pick: impl Fn(&Sample) -> bool,
) -> BTreeMap<String, BTreeMap<String, f64>> {
    let keyed = |snap: &Snapshot| {
        let samples = snap.audit.as_deref().unwrap_or(&snap.devcluster);
        sum_by(samples, "devcluster_requests_total", |s| {
            pick(s).then(|| format!("{}\t{}", agent_name(s), resource_key(s)))
        })
    };
    let mut out: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for (key, value) in minus(keyed(after), &keyed(before)) {
        if let Some((agent, resource)) = key.split_once('\t') {
            out.entry(agent.to_owned())
                .or_default()
                .insert(resource.to_owned(), value);
        }
    }
    out
}

/// kube-apiserver's `apiserver_request_total` in devcluster's shape: `devcluster_requests_total`
/// with devcluster's verb names (POST `create`, PUT `update`, PATCH and APPLY `patch`, DELETE
/// `delete`, GET `get`, LIST `list`, WATCH and WATCHLIST `watch`), the benchmark client's
/// writes marked with its user agent (`BENCH_ONLY_WRITES`), and the heartbeats
/// (`HEARTBEAT_RESOURCES`) left out. Everything else carries no user agent (pure).
pub fn from_apiserver(samples: &[Sample]) -> Vec<Sample> {
    let mut out: BTreeMap<Vec<(String, String)>, f64> = BTreeMap::new();
    for sample in samples
        .iter()
        .filter(|s| s.name == "apiserver_request_total")
    {
        let verb = match sample.label("verb") {
            "POST" => "create",
            "PUT" => "update",
            "PATCH" | "APPLY" => "patch",
            "DELETE" => "delete",
            "DELETECOLLECTION" => "deletecollection",
            "GET" => "get",
            "LIST" => "list",
            "WATCH" | "WATCHLIST" => "watch",
            other => other,
        }
        .to_ascii_lowercase();
        let resource = sample.label("resource");
        if WRITE_VERBS.contains(&verb.as_str()) && HEARTBEAT_RESOURCES.contains(&resource) {
            continue;
        }
        let mut labels = vec![
            ("verb".to_owned(), verb),
            ("group".to_owned(), sample.label("group").to_owned()),
            ("resource".to_owned(), resource.to_owned()),
            (
                "subresource".to_owned(),
                sample.label("subresource").to_owned(),
            ),
            ("code".to_owned(), sample.label("code").to_owned()),
        ];
        let probe = Sample {
            name: String::new(),
            labels: labels.iter().cloned().collect(),
            value: 0.0,
        };
        let agent = if BENCH_ONLY_WRITES.contains(&resource_key(&probe).as_str()) {
            BENCH_USER_AGENT
        } else {
            ""
        };
        labels.push(("user_agent".to_owned(), agent.to_owned()));
        *out.entry(labels).or_insert(0.0) += sample.value;
    }
    out.into_iter()
        .map(|(labels, value)| Sample {
            name: "devcluster_requests_total".to_owned(),
            labels: labels.into_iter().collect(),
            value,
        })
        .collect()
}

/// The controllers' requests, counted from the real API server's audit log as it grows (one
/// JSON `audit.k8s.io/v1` Event per line; the cluster's policy logs every request of a
/// ServiceAccount in `agent-sandbox-system`, i.e. the controllers', at `ResponseComplete`).
#[derive(Debug)]
pub struct AuditTally {
    path: std::path::PathBuf,
    offset: u64,
    /// The end of the file when it was last read, if it was not a whole line yet.
    partial: String,
    /// (agent, verb, group, resource, subresource, code) → requests.
    counts: BTreeMap<[String; 6], f64>,
}

impl AuditTally {
    pub fn new(path: std::path::PathBuf) -> Self {
        AuditTally {
            path,
            offset: 0,
            partial: String::new(),
            counts: BTreeMap::new(),
        }
    }

    /// Reads what the API server appended since the last call (nothing when the log does not
    /// exist yet: no audited request was made).
    pub fn read_new(&mut self) -> Result<(), BenchError> {
        use std::io::{Read as _, Seek as _};
        let mut file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(BenchError::io("opening", &self.path, e)),
        };
        file.seek(std::io::SeekFrom::Start(self.offset))
            .map_err(|e| BenchError::io("reading", &self.path, e))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| BenchError::io("reading", &self.path, e))?;
        self.offset += bytes.len() as u64;
        let text = std::mem::take(&mut self.partial) + &String::from_utf8_lossy(&bytes);
        let mut lines = text.split('\n').peekable();
        while let Some(line) = lines.next() {
            if lines.peek().is_none() {
                // No newline after it yet: keep it for the next read.
                self.partial = line.to_owned();
                break;
            }
            if let Some(key) = audit_key(line) {
                *self.counts.entry(key).or_insert(0.0) += 1.0;
            }
        }
        Ok(())
    }

    /// The counts so far, in devcluster's shape (`user_agent` is the controller's name).
    pub fn samples(&self) -> Vec<Sample> {
        self.counts
            .iter()
            .map(|(key, value)| {
                let names = [
                    "user_agent",
                    "verb",
                    "group",
                    "resource",
                    "subresource",
                    "code",
                ];
                Sample {
                    name: "devcluster_requests_total".to_owned(),
                    labels: names
                        .iter()
                        .zip(key)
                        .map(|(n, v)| ((*n).to_owned(), v.clone()))
                        .collect(),
                    value: *value,
                }
            })
            .collect()
    }
}

/// (agent, verb, group, resource, subresource, code) of one audit line at `ResponseComplete`;
/// the agent is the ServiceAccount's name (`system:serviceaccount:NS:NAME`), which is the
/// controller's binary name (pure).
fn audit_key(line: &str) -> Option<[String; 6]> {
    let event: serde_json::Value = serde_json::from_str(line).ok()?;
    if event["stage"] != "ResponseComplete" {
        return None;
    }
    let user = event["user"]["username"].as_str()?;
    let agent = user
        .strip_prefix("system:serviceaccount:")?
        .rsplit(':')
        .next()?;
    let object = &event["objectRef"];
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    Some([
        agent.to_owned(),
        text(&event["verb"]),
        text(&object["apiGroup"]),
        text(&object["resource"]),
        text(&object["subresource"]),
        event["responseStatus"]["code"]
            .as_i64()
            .map(|c| c.to_string())
            .unwrap_or_default(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(devcluster: &str, controller: &str) -> Snapshot {
        let mut controllers = BTreeMap::new();
        controllers.insert("extensions-controller", prom::parse(controller));
        Snapshot {
            devcluster: prom::parse(devcluster),
            controllers,
            audit: None,
        }
    }

    #[test]
    fn real_counters_leave_out_the_bench_client_nodes_and_heartbeats_and_name_the_senders() {
        let apiserver = |claims: u32, patches: u32, slices: u32| {
            prom::parse(&format!(
                r#"apiserver_request_total{{code="201",component="apiserver",group="extensions.agents.x-k8s.io",resource="sandboxclaims",scope="resource",subresource="",verb="POST",version="v1beta1"}} {claims}
apiserver_request_total{{code="200",component="apiserver",group="agents.x-k8s.io",resource="sandboxes",scope="resource",subresource="",verb="PATCH",version="v1beta1"}} {patches}
apiserver_request_total{{code="201",component="apiserver",group="discovery.k8s.io",resource="endpointslices",scope="resource",subresource="",verb="POST",version="v1"}} {slices}
apiserver_request_total{{code="201",component="apiserver",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"}} {slices}
apiserver_request_total{{code="200",component="apiserver",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"}} {}
apiserver_request_total{{code="200",component="apiserver",group="",resource="nodes",scope="resource",subresource="status",verb="PATCH",version="v1"}} {}
apiserver_request_total{{code="200",component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"}} 3"#,
                claims * 7,
                claims * 9,
            ))
        };
        let audit_line = |verb: &str, resource: &str, code: u16| {
            format!(
                r#"{{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"{verb}","user":{{"username":"system:serviceaccount:agent-sandbox-system:extensions-controller"}},"objectRef":{{"resource":"{resource}","namespace":"default","apiGroup":"agents.x-k8s.io","apiVersion":"v1beta1"}},"responseStatus":{{"metadata":{{}},"code":{code}}}}}"#
            )
        };
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.log");
        let mut tally = AuditTally::new(log.clone());
        tally.read_new().expect("a missing log is no request yet");
        let before = Snapshot {
            devcluster: from_apiserver(&apiserver(1, 1, 0)),
            controllers: BTreeMap::new(),
            audit: Some(tally.samples()),
        };
        // Two audited patches (one line not yet finished when first read) and a watch start.
        let first = format!(
            "{}\n{}",
            audit_line("patch", "sandboxes", 200),
            &audit_line("patch", "sandboxes", 200)[..40]
        );
        std::fs::write(&log, &first).unwrap();
        tally.read_new().unwrap();
        let rest = format!(
            "{}\n{}\n",
            &audit_line("patch", "sandboxes", 200)[40..],
            audit_line("watch", "sandboxes", 200).replace("ResponseComplete", "ResponseStarted"),
        );
        let mut all = first;
        all.push_str(&rest);
        std::fs::write(&log, all).unwrap();
        tally.read_new().unwrap();
        let after = Snapshot {
            devcluster: from_apiserver(&apiserver(3, 3, 1)),
            controllers: BTreeMap::new(),
            audit: Some(tally.samples()),
        };
        let d = delta(&before, &after);
        // 2 claim creates (the bench client's), 2 Sandbox patches, 1 EndpointSlice create,
        // 1 binding (simulated nodes), heartbeats ignored.
        assert_eq!(d.writes_by_verb_resource.get("create sandboxclaims"), None);
        assert_eq!(d.writes_by_verb_resource["patch sandboxes"], 2.0);
        assert_eq!(d.writes_by_verb_resource["create endpointslices"], 1.0);
        assert_eq!(d.writes_total, 3.0);
        assert_eq!(d.simulated_node_writes, 1.0);
        assert!(
            !d.writes_by_verb_resource
                .keys()
                .any(|k| k.contains("leases"))
        );
        assert_eq!(
            d.writes_by_agent["extensions-controller"]["patch sandboxes"],
            2.0
        );
        assert_eq!(
            d.writes_by_agent["kube-components"]["create endpointslices"],
            1.0
        );
        assert!(!d.writes_by_agent["kube-components"].contains_key("patch sandboxes"));
        assert!(!d.reads_by_agent.contains_key("extensions-controller"));
    }

    #[test]
    fn delta_excludes_the_benchmark_client_and_reads() {
        let before = snap(
            r#"devcluster_requests_total{verb="patch",resource="sandboxes",subresource="",user_agent="",code="200"} 1
devcluster_requests_total{verb="create",resource="sandboxclaims",subresource="",user_agent="agent-sandbox-bench",code="201"} 5"#,
            r#"rest_client_requests_total{code="200",method="PATCH"} 1"#,
        );
        let after = snap(
            r#"devcluster_requests_total{verb="patch",resource="sandboxes",subresource="",user_agent="",code="200"} 4
devcluster_requests_total{verb="patch",resource="sandboxclaims",subresource="status",user_agent="extensions-controller/v0.1.0",code="409"} 1
devcluster_requests_total{verb="create",resource="pods",subresource="binding",user_agent="",code="201"} 2
devcluster_requests_total{verb="get",resource="sandboxes",subresource="",user_agent="",code="200"} 7
devcluster_requests_total{verb="create",resource="sandboxclaims",subresource="",user_agent="agent-sandbox-bench",code="201"} 9"#,
            r#"rest_client_requests_total{code="200",method="PATCH"} 4
rest_client_requests_total{code="200",method="GET"} 9"#,
        );
        let d = delta(&before, &after);
        assert_eq!(d.writes_total, 4.0);
        assert_eq!(d.simulated_node_writes, 2.0);
        assert_eq!(d.writes_by_verb_resource["patch sandboxes"], 3.0);
        assert_eq!(d.writes_by_verb_resource["patch sandboxclaims/status"], 1.0);
        assert_eq!(d.failed_writes, 1.0);
        assert_eq!(
            d.failed_writes_by_verb_resource["patch sandboxclaims/status 409"],
            1.0
        );
        assert_eq!(
            d.writes_by_agent["extensions-controller"]["patch sandboxclaims/status"],
            1.0
        );
        assert_eq!(d.writes_by_agent["nodes"]["patch sandboxes"], 3.0);
        assert!(!d.writes_by_agent.contains_key("agent-sandbox-bench"));
        assert_eq!(d.requests_by_verb["get"], 7.0);
        assert_eq!(d.reads_by_agent["nodes"]["get sandboxes"], 7.0);
        assert!(!d.writes_by_agent["nodes"].contains_key("get sandboxes"));
        assert!(!d.reads_by_agent["nodes"].contains_key("patch sandboxes"));
        assert!(!d.requests_by_verb.contains_key("create"));
        assert_eq!(d.writes_by_controller["extensions-controller"], 3.0);
        assert_eq!(d.per(2).writes_total, 2.0);
    }

    #[test]
    fn conversion_calls_after_the_last_write_are_not_quiet() {
        let server = r#"devcluster_requests_total{verb="patch",resource="sandboxes",subresource="",user_agent="",code="200"} 4"#;
        let before = snap(
            server,
            r#"controller_runtime_webhook_requests_total{code="200",webhook="/convert"} 10"#,
        );
        let after = snap(
            server,
            r#"controller_runtime_webhook_requests_total{code="200",webhook="/convert"} 13
controller_runtime_webhook_requests_total{code="500",webhook="/convert"} 1"#,
        );
        let d = delta(&before, &after);
        assert_eq!(d.writes_total, 0.0);
        assert_eq!(d.webhook_requests, 4.0);
        assert!(!d.is_quiet());
        assert_eq!(d.per(2).webhook_requests, 2.0);
        assert!(delta(&after, &after).is_quiet());
    }
}
