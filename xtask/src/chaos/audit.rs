//! What the API server's audit log says about a chaos run: the faults it injected into the
//! controllers' requests, who held each leader-election Lease when, and any write a replica
//! sent after another one had taken its Lease.
//!
//! The controllers send `User-Agent: <binary>/v<version> (<identity>)` with their leader-election
//! identity, so the log tells replicas apart. A replica holds a Lease from the moment the server
//! received its first successful write of it (create or update, 2xx) after another holder's;
//! every other write (any verb but get, list, watch) that a former holder sent after that moment
//! is a violation. The replica's own Lease writes are left out: it may retry its renewal (and
//! get a conflict) before it learns it lost, and that request changes nothing.
//!
//! Reads the `audit.k8s.io/v1` fields devcluster writes and kube-apiserver writes at the
//! `Metadata` level (`verb`, `userAgent`, `objectRef`, `responseStatus.code`,
//! `requestReceivedTimestamp`), so the same check runs on a real control plane's log.

use std::collections::BTreeMap;

use serde_json::Value;

/// One request of the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Epoch seconds the server received it.
    pub received: f64,
    pub verb: String,
    pub user_agent: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: u16,
    pub injected_fault: bool,
}

impl Request {
    /// Parses one audit line (`None` for lines that are not request events).
    pub fn parse(line: &str) -> Option<Request> {
        let v: Value = serde_json::from_str(line).ok()?;
        let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
        let received = v["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())?;
        Some(Request {
            received: received.as_nanosecond() as f64 / 1e9,
            verb: text(&v["verb"]),
            user_agent: text(&v["userAgent"]),
            resource: text(&v["objectRef"]["resource"]),
            subresource: text(&v["objectRef"]["subresource"]),
            namespace: text(&v["objectRef"]["namespace"]),
            name: text(&v["objectRef"]["name"]),
            code: v["responseStatus"]["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(0),
            injected_fault: v["injectedFault"].as_bool().unwrap_or(false),
        })
    }

    pub fn is_write(&self) -> bool {
        !matches!(self.verb.as_str(), "get" | "list" | "watch" | "")
    }

    fn is_success(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// The replica that sent it: the identity in the user agent's parentheses, else the agent.
    pub fn sender(&self) -> &str {
        self.user_agent
            .rsplit_once(" (")
            .and_then(|(_, rest)| rest.strip_suffix(')'))
            .unwrap_or(&self.user_agent)
    }

    /// The binary that sent it (`extensions-controller/v0.1.0 (x)` → `extensions-controller`).
    pub fn binary(&self) -> &str {
        self.user_agent
            .split('/')
            .next()
            .unwrap_or(&self.user_agent)
    }
}

/// Reads the log's requests, in the order the server received them. kube-apiserver logs a
/// watch twice (`ResponseStarted`, `ResponseComplete`) under one `auditID`: each request counts
/// once.
pub fn read(text: &str) -> Vec<Request> {
    let mut seen = std::collections::HashSet::new();
    let mut requests: Vec<Request> = text
        .lines()
        .filter(|line| {
            let id = serde_json::from_str::<Value>(line)
                .ok()
                .and_then(|v| v["auditID"].as_str().map(str::to_owned));
            id.is_none_or(|id| seen.insert(id))
        })
        .filter_map(Request::parse)
        .collect();
    requests.sort_by(|a, b| a.received.total_cmp(&b.received));
    requests
}

/// One change of a Lease's holder.
#[derive(Debug, Clone, PartialEq)]
pub struct Takeover {
    pub lease: String,
    pub from: String,
    pub to: String,
    /// When the server received the new holder's first successful write of the Lease.
    pub at: f64,
}

/// Every change of holder of every Lease, in order.
///
/// A Lease is told apart by its namespace and the binary writing it (each binary contends for
/// one Lease of its own), not by its name: devcluster's log names no object on a create (the
/// name is in the body), so the Lease's first write would otherwise look like another Lease, and
/// the two binaries' first writes like one Lease changing hands.
pub fn takeovers(requests: &[Request]) -> Vec<Takeover> {
    let mut holders: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Vec::new();
    for r in requests {
        if r.resource != "leases" || !r.is_write() || !r.is_success() {
            continue;
        }
        let lease = format!("{}/{}", r.namespace, r.binary());
        let sender = r.sender().to_owned();
        match holders.insert(lease.clone(), sender.clone()) {
            Some(previous) if previous != sender => out.push(Takeover {
                lease,
                from: previous,
                to: sender,
                at: r.received,
            }),
            _ => {}
        }
    }
    out
}

/// A write a replica sent after another one had taken its Lease.
#[derive(Debug, Clone, PartialEq)]
pub struct LateWrite {
    pub takeover: Takeover,
    pub request: Request,
}

impl std::fmt::Display for LateWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.request;
        let what = if r.subresource.is_empty() {
            r.resource.clone()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        write!(
            f,
            "{} sent {} {what} {}/{} ({}) {:.3} s after {} took the Lease of {}",
            self.takeover.from,
            r.verb,
            r.namespace,
            r.name,
            r.code,
            r.received - self.takeover.at,
            self.takeover.to,
            self.takeover.lease
        )
    }
}

/// Writes (other than of Leases) sent by a replica after another took a Lease it held.
pub fn writes_after_lost_lease(requests: &[Request]) -> Vec<LateWrite> {
    let takeovers = takeovers(requests);
    let mut late = Vec::new();
    for r in requests {
        if !r.is_write() || r.resource == "leases" {
            continue;
        }
        // The sender's last change of leadership before the request: late if it lost then.
        let last = takeovers
            .iter()
            .rev()
            .find(|t| (t.from == r.sender() || t.to == r.sender()) && t.at < r.received);
        if let Some(t) = last.filter(|t| t.from == r.sender()) {
            late.push(LateWrite {
                takeover: t.clone(),
                request: r.clone(),
            });
        }
    }
    late
}

/// A Sandbox the extensions controller took for a claim, from its log: (claim name, Sandbox
/// name, the claim's resourceVersion the decision was made on).
pub type Take = (String, String, u64);

/// The takes (`adopted warm pool Sandbox`, `created cold Sandbox`) in an extensions-controller
/// log of JSON lines (see [`super::invariants::History::decided`]).
pub fn takes(log: &str) -> Vec<Take> {
    let unqualified = |key: &str| key.rsplit_once('/').map_or(key, |(_, n)| n).to_owned();
    log.lines()
        .filter_map(|line| {
            let v: Value = serde_json::from_str(line).ok()?;
            let message = v["message"].as_str()?;
            if message != "adopted warm pool Sandbox" && message != "created cold Sandbox" {
                return None;
            }
            let claim = v["span"]["claim"].as_str()?;
            let sandbox = v["sandbox"].as_str()?;
            let version = v["claim.resource_version"].as_str()?.parse().ok()?;
            Some((unqualified(claim), unqualified(sandbox), version))
        })
        .collect()
}

/// The takes an extensions-controller log says it abandoned (`take abandoned`: the claim was
/// deleted or changed right before the request).
pub fn abandoned_takes(log: &str) -> usize {
    log.lines()
        .filter(|line| {
            serde_json::from_str::<Value>(line)
                .is_ok_and(|v| v["message"].as_str() == Some("take abandoned"))
        })
        .count()
}

/// Watches of `binary` the server accepted (each reopened watch counts once more).
pub fn watches_opened(requests: &[Request], binary: &str) -> usize {
    requests
        .iter()
        .filter(|r| r.verb == "watch" && r.is_success() && r.binary() == binary)
        .count()
}

/// The watches of one resource one replica opened (each reopen after a close counts once more).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchStream {
    pub binary: String,
    pub sender: String,
    /// `resource` or `resource in namespace`.
    pub resource: String,
    pub opened: usize,
}

impl std::fmt::Display for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}) watch {} opened {} time(s)",
            self.binary, self.sender, self.resource, self.opened
        )
    }
}

/// The watch streams of `binary` the server accepted, by replica and resource: a stream opened
/// more than once was closed (by the server or its client) and reopened.
pub fn watch_streams(requests: &[Request], binary: &str) -> Vec<WatchStream> {
    let mut streams: BTreeMap<(String, String), usize> = BTreeMap::new();
    for r in requests
        .iter()
        .filter(|r| r.verb == "watch" && r.is_success() && r.binary() == binary)
    {
        let resource = if r.namespace.is_empty() {
            r.resource.clone()
        } else {
            format!("{} in {}", r.resource, r.namespace)
        };
        *streams
            .entry((r.sender().to_owned(), resource))
            .or_default() += 1;
    }
    streams
        .into_iter()
        .map(|((sender, resource), opened)| WatchStream {
            binary: binary.to_owned(),
            sender,
            resource,
            opened,
        })
        .collect()
}

/// Faults the server injected into requests of `binary`.
pub fn injected_faults(requests: &[Request], binary: &str) -> usize {
    requests
        .iter()
        .filter(|r| r.injected_fault && r.binary() == binary)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(at: &str, verb: &str, agent: &str, resource: &str, name: &str, code: u16) -> String {
        serde_json::json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
            "verb": verb, "userAgent": agent, "requestReceivedTimestamp": at,
            "objectRef": {"resource": resource, "namespace": "ns", "name": name},
            "responseStatus": {"code": code},
        })
        .to_string()
    }

    const A: &str = "extensions-controller/v0.1.0 (pod-a_1)";
    const B: &str = "extensions-controller/v0.1.0 (pod-b_2)";

    #[test]
    fn a_write_by_the_old_holder_after_the_takeover_is_late() {
        let log = [
            line("2026-01-01T00:00:01Z", "update", A, "leases", "ext", 200),
            line(
                "2026-01-01T00:00:02Z",
                "create",
                A,
                "sandboxes",
                "early",
                201,
            ),
            // A is paused; B takes the Lease at 20 s.
            line("2026-01-01T00:00:20Z", "update", B, "leases", "ext", 200),
            line(
                "2026-01-01T00:00:21Z",
                "create",
                B,
                "sandboxes",
                "by-b",
                201,
            ),
            // A resumes: its renewal conflicts (not counted), then it writes (late).
            line("2026-01-01T00:00:22Z", "update", A, "leases", "ext", 409),
            line("2026-01-01T00:00:22.5Z", "get", A, "sandboxes", "read", 200),
            line(
                "2026-01-01T00:00:23Z",
                "create",
                A,
                "sandboxes",
                "late",
                201,
            ),
        ]
        .join("\n");
        let requests = read(&log);
        let takeovers = takeovers(&requests);
        assert_eq!(takeovers.len(), 1);
        assert_eq!(takeovers[0].from, "pod-a_1");
        assert_eq!(takeovers[0].to, "pod-b_2");
        let late = writes_after_lost_lease(&requests);
        assert_eq!(late.len(), 1, "{late:?}");
        assert_eq!(late[0].request.name, "late");
        assert!(
            late[0]
                .to_string()
                .starts_with("pod-a_1 sent create sandboxes ns/late (201) 3.000 s after pod-b_2 took the Lease of ns/extensions-controller"),
            "{}",
            late[0]
        );
    }

    #[test]
    fn renewals_by_the_same_holder_and_a_clean_handover_are_no_takeover_violation() {
        let log = [
            line("2026-01-01T00:00:01Z", "update", A, "leases", "ext", 200),
            line("2026-01-01T00:00:03Z", "update", A, "leases", "ext", 200),
            line("2026-01-01T00:00:04Z", "patch", A, "sandboxes", "x", 200),
            // A releases (its last Lease write), B takes over: A writes nothing after.
            line("2026-01-01T00:00:05Z", "update", A, "leases", "ext", 200),
            line("2026-01-01T00:00:06Z", "update", B, "leases", "ext", 200),
        ]
        .join("\n");
        let requests = read(&log);
        assert_eq!(takeovers(&requests).len(), 1);
        assert!(writes_after_lost_lease(&requests).is_empty());
    }

    /// The quick run's first leader-pause run reported 308 late writes by the sandbox-controller:
    /// both binaries' Lease creates (no name in devcluster's log) counted as one Lease changing
    /// hands. Seen failing before the Lease was keyed by binary.
    #[test]
    fn each_binary_has_its_own_lease_even_when_a_create_names_none() {
        const CORE: &str = "sandbox-controller/v0.1.0 (core-1_3)";
        let log = [
            line("2026-01-01T00:00:01Z", "create", CORE, "leases", "", 201),
            line("2026-01-01T00:00:02Z", "create", A, "leases", "", 201),
            line(
                "2026-01-01T00:00:03Z",
                "update",
                CORE,
                "leases",
                "core",
                200,
            ),
            line("2026-01-01T00:00:04Z", "create", CORE, "pods", "p", 201),
            line("2026-01-01T00:00:05Z", "update", A, "leases", "ext", 200),
            line("2026-01-01T00:00:06Z", "patch", A, "sandboxes", "s", 200),
        ]
        .join("\n");
        let requests = read(&log);
        assert_eq!(takeovers(&requests), vec![]);
        assert!(writes_after_lost_lease(&requests).is_empty());
    }

    #[test]
    fn injected_faults_are_counted_per_binary() {
        let mut faulted: Value = serde_json::from_str(&line(
            "2026-01-01T00:00:01Z",
            "patch",
            A,
            "sandboxes",
            "x",
            500,
        ))
        .unwrap();
        faulted["injectedFault"] = Value::Bool(true);
        let log = [
            faulted.to_string(),
            line("2026-01-01T00:00:02Z", "patch", A, "sandboxes", "x", 200),
            "not json".to_owned(),
        ]
        .join("\n");
        let requests = read(&log);
        assert_eq!(requests.len(), 2);
        assert_eq!(injected_faults(&requests, "extensions-controller"), 1);
        assert_eq!(injected_faults(&requests, "sandbox-controller"), 0);
    }

    #[test]
    fn a_request_logged_at_two_stages_counts_once() {
        let staged = |stage: &str, id: &str| {
            let mut v: Value = serde_json::from_str(&line(
                "2026-01-01T00:00:01Z",
                "watch",
                A,
                "sandboxes",
                "",
                200,
            ))
            .unwrap();
            v["stage"] = Value::from(stage);
            v["auditID"] = Value::from(id);
            v.to_string()
        };
        let log = [
            staged("ResponseStarted", "a"),
            staged("ResponseComplete", "a"),
            staged("ResponseStarted", "b"),
        ]
        .join("\n");
        assert_eq!(watches_opened(&read(&log), "extensions-controller"), 2);
    }

    #[test]
    fn only_accepted_watches_of_the_binary_count_as_opened() {
        const CORE: &str = "sandbox-controller/v0.1.0 (core-1_3)";
        let log = [
            line("2026-01-01T00:00:01Z", "watch", A, "sandboxes", "", 200),
            line("2026-01-01T00:00:02Z", "watch", A, "sandboxes", "", 200),
            line("2026-01-01T00:00:03Z", "watch", A, "sandboxes", "", 500),
            line("2026-01-01T00:00:04Z", "list", A, "sandboxes", "", 200),
            line("2026-01-01T00:00:05Z", "watch", CORE, "pods", "", 200),
        ]
        .join("\n");
        let requests = read(&log);
        assert_eq!(watches_opened(&requests, "extensions-controller"), 2);
        assert_eq!(watches_opened(&requests, "sandbox-controller"), 1);
        let streams = watch_streams(&requests, "extensions-controller");
        assert_eq!(streams.len(), 1);
        assert_eq!(
            streams[0].to_string(),
            "extensions-controller (pod-a_1) watch sandboxes in ns opened 2 time(s)"
        );
        let core = watch_streams(&requests, "sandbox-controller");
        assert_eq!(core.len(), 1);
        assert_eq!(
            (core[0].resource.as_str(), core[0].opened),
            ("pods in ns", 1)
        );
    }

    #[test]
    fn takes_are_read_from_the_controllers_log_lines() {
        let log = [
            r#"{"message":"adopted warm pool Sandbox","sandbox":"default/pool-x","claim.resource_version":"41","span":{"claim":"default/c1"}}"#,
            r#"{"message":"created cold Sandbox","sandbox":"default/c2","claim.resource_version":"7","span":{"claim":"default/c2"}}"#,
            r#"{"message":"something else","sandbox":"default/pool-y","span":{"claim":"default/c3"}}"#,
            r#"{"message":"take abandoned","sandbox":"default/pool-z","reason":"the claim was deleted","span":{"claim":"default/c4"}}"#,
            "not json",
        ]
        .join("\n");
        assert_eq!(abandoned_takes(&log), 1);
        assert_eq!(
            takes(&log),
            vec![
                ("c1".to_owned(), "pool-x".to_owned(), 41),
                ("c2".to_owned(), "c2".to_owned(), 7)
            ]
        );
    }
}
