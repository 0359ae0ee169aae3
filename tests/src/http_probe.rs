//! Plain HTTP/1.0 requests to a controller's probe and metrics port, as a kubelet or a
//! Prometheus scraper would send them.

use std::net::TcpListener;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port on 127.0.0.1")
}

/// `GET path` on 127.0.0.1:`port`: the status code and body, or `None` while nothing answers.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = String::new();
    conn.read_to_string(&mut buf).await.ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

/// Scrapes `/metrics` on 127.0.0.1:`port` until its body contains every one of `series`, and
/// returns that body; after `deadline` it panics naming the missing ones, with the last body.
///
/// A metric a controller records once it has read the response of a write (the claim
/// controller's startup latency after its Ready status write, a pass's reconcile count when
/// the pass ends) can appear after another client has already seen that write, so a test that
/// saw the write scrapes until the metric is there rather than once.
pub async fn wait_for_metrics(port: u16, series: &[&str], deadline: std::time::Duration) -> String {
    let start = std::time::Instant::now();
    loop {
        let body = http_get(port, "/metrics")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
        let missing: Vec<&str> = series
            .iter()
            .copied()
            .filter(|s| !body.contains(s))
            .collect();
        if missing.is_empty() {
            return body;
        }
        assert!(
            start.elapsed() < deadline,
            "after {deadline:?}, missing from /metrics: {missing:?}\n{body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}
