//! API request counters: devcluster's `devcluster_requests_total{verb,group,resource,
//! subresource,user_agent,code}` (every request the server answered) and each controller's own
//! `rest_client_requests_total{code,host,method}`. Snapshots before and after a phase give the
//! requests that phase caused.

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
/// HTTP methods that change state.
const WRITE_METHODS: [&str; 4] = ["POST", "PUT", "PATCH", "DELETE"];

/// Counters at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    devcluster: Vec<Sample>,
    /// Controller name → its samples.
    controllers: BTreeMap<&'static str, Vec<Sample>>,
}

impl Snapshot {
    /// The samples scraped from controller `name`, empty when it was not running.
    pub fn controller(&self, name: &str) -> &[Sample] {
        self.controllers.get(name).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// Scrapes devcluster's `/metrics` (through the API client) and every running controller's.
pub async fn snapshot(stack: &Stack) -> Result<Snapshot, BenchError> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| BenchError::Unavailable(format!("building the /metrics request: {e}")))?;
    let text = stack
        .client
        .request_text(request)
        .await
        .map_err(|e| BenchError::kube("scraping devcluster /metrics", e))?;
    let mut snapshot = Snapshot {
        devcluster: prom::parse(&text),
        controllers: BTreeMap::new(),
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
    /// Writes devcluster answered for anyone but the benchmark client.
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
    /// devcluster's simulated nodes, which send none), then `verb resource[/subresource]`.
    pub writes_by_agent: BTreeMap<String, BTreeMap<String, f64>>,
    /// Reads (`get`, `list`, `watch`) by the sender's user agent, then `verb
    /// resource[/subresource]`; not the benchmark client's.
    pub reads_by_agent: BTreeMap<String, BTreeMap<String, f64>>,
    /// Writes of devcluster's simulated nodes (binding, pod status), not in `writes_total`.
    pub simulated_node_writes: f64,
}

impl RequestDelta {
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
    let writes_by_agent = by_agent(before, after, others_write);
    let reads_by_agent = by_agent(before, after, others_read);
    let writes_by_verb_resource = minus(by_resource(after), &by_resource(before));
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
    }
}

/// devcluster's requests that `pick` selects, by sender then `verb resource[/subresource]`,
/// between two snapshots.
fn by_agent(
    before: &Snapshot,
    after: &Snapshot,
    pick: impl Fn(&Sample) -> bool,
) -> BTreeMap<String, BTreeMap<String, f64>> {
    let keyed = |snap: &Snapshot| {
        sum_by(&snap.devcluster, "devcluster_requests_total", |s| {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(devcluster: &str, controller: &str) -> Snapshot {
        let mut controllers = BTreeMap::new();
        controllers.insert("extensions-controller", prom::parse(controller));
        Snapshot {
            devcluster: prom::parse(devcluster),
            controllers,
        }
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
}
