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
