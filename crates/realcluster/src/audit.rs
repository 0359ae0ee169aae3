//! Reading kube-apiserver's audit log: the requests of the controllers' ServiceAccounts (the
//! only ones [the policy](crate::config::audit_policy) records), one per request, for tests
//! that check what a controller asked of the server (its grants; its writes per claim).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::Error;

/// One request as the audit log records it (`Metadata` level).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `system:serviceaccount:<namespace>:<name>` for the controllers.
    pub user: String,
    /// The client's `User-Agent` header.
    pub user_agent: String,
    /// Kubernetes' verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...
    pub verb: String,
    /// `core` for the core group (the log leaves it empty).
    pub group: String,
    /// The resource, or for a request to no resource (discovery) its path.
    pub resource: String,
    pub subresource: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
    /// The response's status code (of the last stage logged).
    pub code: i64,
}

impl Request {
    /// Whether it changes state: create, update, patch, delete or deletecollection.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// `resource` or `resource/subresource`.
    pub fn resource_path(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }
}

/// The requests in `log` (JSON lines of `audit.k8s.io/v1` Events), one per audit ID in the
/// order each was first logged: a watch is logged when its response starts and again when it
/// ends, and the last stage logged gives the code. Lines that are not events (e.g. a line cut
/// short while the server writes it) are skipped.
pub fn requests(log: &str) -> Vec<Request> {
    let mut order: Vec<String> = Vec::new();
    let mut by_id: BTreeMap<String, Value> = BTreeMap::new();
    for event in log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let Some(id) = event["auditID"].as_str().map(str::to_owned) else {
            continue;
        };
        if !by_id.contains_key(&id) {
            order.push(id.clone());
        }
        by_id.insert(id, event);
    }
    order
        .into_iter()
        .filter_map(|id| by_id.remove(&id))
        .map(|e| request(&e))
        .collect()
}

fn request(e: &Value) -> Request {
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let object = &e["objectRef"];
    let group = object["apiGroup"].as_str().unwrap_or("");
    Request {
        user: text(&e["user"]["username"]).unwrap_or_default(),
        user_agent: text(&e["userAgent"]).unwrap_or_default(),
        verb: text(&e["verb"]).unwrap_or_default(),
        group: if group.is_empty() { "core" } else { group }.to_owned(),
        resource: if object.is_null() {
            text(&e["requestURI"]).unwrap_or_default()
        } else {
            text(&object["resource"]).unwrap_or_default()
        },
        subresource: text(&object["subresource"]),
        name: text(&object["name"]),
        namespace: text(&object["namespace"]),
        code: e["responseStatus"]["code"].as_i64().unwrap_or(0),
    }
}

/// A position in the audit log, to read what was logged after it: [`Mark::now`] remembers the
/// log's length, [`Mark::requests_since`] reads the requests logged since (a request whose
/// events straddle the mark, e.g. a watch opened before it, counts with its later events).
#[derive(Debug, Clone)]
pub struct Mark {
    offset: u64,
}

impl Mark {
    /// The end of the log at `path` now (0 when it does not exist yet).
    pub fn now(path: &Path) -> Mark {
        let offset = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        Mark { offset }
    }

    /// The requests logged after this mark.
    pub fn requests_since(&self, path: &Path) -> Result<Vec<Request>, Error> {
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            action: "read the audit log",
            path: path.to_path_buf(),
            source,
        })?;
        let start = usize::try_from(self.offset)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        Ok(requests(&String::from_utf8_lossy(&bytes[start..])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str, stage: &str, verb: &str, code: i64, object: Value) -> String {
        serde_json::json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
            "auditID": id, "stage": stage, "verb": verb,
            "user": {"username": "system:serviceaccount:agent-sandbox-system:extensions-controller"},
            "userAgent": "extensions-controller/0.1",
            "requestURI": "/apis/x", "objectRef": object,
            "responseStatus": {"code": code},
        })
        .to_string()
    }

    #[test]
    fn one_request_per_audit_id_with_the_last_stage_code_in_first_seen_order() {
        let log = [
            line(
                "b",
                "ResponseStarted",
                "watch",
                200,
                serde_json::json!({"resource": "pods"}),
            ),
            line(
                "a",
                "ResponseComplete",
                "patch",
                200,
                serde_json::json!({"resource": "sandboxes", "apiGroup": "agents.x-k8s.io",
                    "namespace": "default", "name": "s", "subresource": "status"}),
            ),
            "{\"kind\": \"Event\", \"auditID\": \"c\"".to_owned(), // cut short: skipped
            line(
                "b",
                "ResponseComplete",
                "watch",
                500,
                serde_json::json!({"resource": "pods"}),
            ),
        ]
        .join("\n");
        let got = requests(&log);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            (got[0].verb.as_str(), got[0].group.as_str(), got[0].code),
            ("watch", "core", 500)
        );
        assert!(!got[0].is_write());
        assert_eq!(got[1].resource_path(), "sandboxes/status");
        assert_eq!(got[1].group, "agents.x-k8s.io");
        assert_eq!(got[1].name.as_deref(), Some("s"));
        assert_eq!(got[1].user_agent, "extensions-controller/0.1");
        assert!(got[1].is_write());
    }

    #[test]
    fn a_mark_reads_only_what_was_logged_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        assert!(Mark::now(&path).requests_since(&path).is_err());
        let before = line("a", "ResponseComplete", "create", 201, Value::Null);
        std::fs::write(&path, format!("{before}\n")).unwrap();
        let mark = Mark::now(&path);
        let after = line("b", "ResponseComplete", "delete", 200, Value::Null);
        std::fs::write(&path, format!("{before}\n{after}\n")).unwrap();
        let got = mark.requests_since(&path).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].verb.as_str(), got[0].resource.as_str()),
            ("delete", "/apis/x")
        );
        assert!(Mark::now(&path).requests_since(&path).unwrap().is_empty());
    }
}
