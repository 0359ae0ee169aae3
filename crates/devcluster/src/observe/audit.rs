//! The optional audit log: one JSON line per request.
//!
//! Field names follow the Kubernetes `audit.k8s.io/v1` Event where one exists (`verb`,
//! `requestURI`, `userAgent`, `sourceIPs`, `objectRef`, `responseStatus.code`,
//! `requestReceivedTimestamp`, `stageTimestamp`), plus `latencyMs` and `injectedFault`. Only the
//! `Metadata` level is written (no request or response bodies).

use std::fs::File;
use std::io::{self, LineWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::request_info::RequestInfo;

/// What is known about one request when its response starts.
pub struct AuditRecord<'a> {
    pub info: &'a RequestInfo,
    /// Path and query as received.
    pub request_uri: &'a str,
    pub user_agent: &'a str,
    pub source_ip: Option<String>,
    pub code: u16,
    pub latency: Duration,
    /// RFC 3339 time the request arrived.
    pub received: String,
    /// RFC 3339 time the response started.
    pub responded: String,
    pub injected_fault: bool,
}

/// Renders one audit line (pure, without the trailing newline).
pub fn audit_line(record: &AuditRecord<'_>) -> Value {
    let info = record.info;
    let mut line = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "stage": "ResponseStarted",
        "requestURI": record.request_uri,
        "verb": info.verb,
        "userAgent": record.user_agent,
        "responseStatus": { "code": record.code },
        "requestReceivedTimestamp": record.received,
        "stageTimestamp": record.responded,
        "latencyMs": record.latency.as_secs_f64() * 1000.0,
    });
    if let Some(ip) = &record.source_ip {
        line["sourceIPs"] = json!([ip]);
    }
    if info.is_resource_request {
        let mut object_ref = json!({ "resource": info.resource, "apiVersion": info.api_version });
        for (key, value) in [
            ("apiGroup", &info.api_group),
            ("namespace", &info.namespace),
            ("name", &info.name),
            ("subresource", &info.subresource),
        ] {
            if !value.is_empty() {
                object_ref[key] = json!(value);
            }
        }
        line["objectRef"] = object_ref;
    }
    if record.injected_fault {
        line["injectedFault"] = json!(true);
    }
    line
}

/// An append-only audit log file; lines are written whole and flushed one by one.
pub struct AuditLog {
    out: Mutex<LineWriter<File>>,
    warned: AtomicBool,
}

impl AuditLog {
    /// Opens (creating or appending to) the log file.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            out: Mutex::new(LineWriter::new(file)),
            warned: AtomicBool::new(false),
        })
    }

    /// Appends one record. A write failure is logged once and otherwise ignored: auditing must
    /// not fail requests.
    pub fn write(&self, record: &AuditRecord<'_>) {
        let mut text = audit_line(record).to_string();
        text.push('\n');
        let result = match self.out.lock() {
            Ok(mut out) => out.write_all(text.as_bytes()),
            Err(_) => Err(io::Error::other("audit log lock poisoned")),
        };
        if let Err(err) = result
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(error = %err, "writing the audit log failed; further failures are not logged");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::parse_request_info;
    use http::Method;

    #[test]
    fn audit_lines_are_json_with_object_ref() {
        let info = parse_request_info(
            &Method::DELETE,
            "/apis/agents.x-k8s.io/v1beta1/namespaces/team/sandboxes/s1",
            None,
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(&path).unwrap();
        for code in [200, 404] {
            log.write(&AuditRecord {
                info: &info,
                request_uri: "/apis/agents.x-k8s.io/v1beta1/namespaces/team/sandboxes/s1",
                user_agent: "kubectl/v1.32.0",
                source_ip: Some("127.0.0.1".into()),
                code,
                latency: Duration::from_micros(1500),
                received: "2026-01-01T00:00:00.000000Z".into(),
                responded: "2026-01-01T00:00:00.001500Z".into(),
                injected_fault: code == 404,
            });
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["verb"], "delete");
        assert_eq!(lines[0]["userAgent"], "kubectl/v1.32.0");
        assert_eq!(lines[0]["responseStatus"]["code"], 200);
        assert_eq!(lines[0]["latencyMs"], 1.5);
        assert_eq!(lines[0]["sourceIPs"][0], "127.0.0.1");
        assert_eq!(
            lines[0]["objectRef"],
            json!({"resource": "sandboxes", "apiGroup": "agents.x-k8s.io", "apiVersion": "v1beta1", "namespace": "team", "name": "s1"})
        );
        assert!(lines[0].get("injectedFault").is_none());
        assert_eq!(lines[1]["injectedFault"], true);
    }

    #[test]
    fn non_resource_requests_have_no_object_ref() {
        let info = parse_request_info(&Method::GET, "/version", None);
        let line = audit_line(&AuditRecord {
            info: &info,
            request_uri: "/version",
            user_agent: "",
            source_ip: None,
            code: 200,
            latency: Duration::ZERO,
            received: String::new(),
            responded: String::new(),
            injected_fault: false,
        });
        assert!(line.get("objectRef").is_none());
        assert!(line.get("sourceIPs").is_none());
        assert_eq!(line["verb"], "get");
    }
}
