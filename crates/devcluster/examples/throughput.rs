//! Measures devcluster's write throughput with watchers attached.
//!
//! `cargo run -p devcluster --example throughput -- [WRITERS] [WATCHERS] [SECONDS]`
//!
//! Starts an in-process devcluster (no simulated nodes), opens WATCHERS watches on configmaps
//! (each reads every event), then WRITERS concurrent clients create configmaps over HTTP for
//! SECONDS seconds. Prints writes per second and how many watch events each watcher received.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let writers = args.first().copied().unwrap_or(16);
    let watchers = args.get(1).copied().unwrap_or(4);
    let seconds = args.get(2).copied().unwrap_or(10);
    let dc = devcluster::DevCluster::start(devcluster::Config {
        node_agent: false,
        ..devcluster::Config::ephemeral()
    })
    .await?;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let received: Arc<Vec<AtomicU64>> =
        Arc::new((0..watchers).map(|_| AtomicU64::new(0)).collect());
    for i in 0..watchers as usize {
        let api = api.clone();
        let received = received.clone();
        let mut stream = api
            .watch(&WatchParams::default().timeout(3600), "0")
            .await?
            .boxed();
        tokio::spawn(async move {
            while let Some(Ok(ev)) = stream.next().await {
                if matches!(ev, WatchEvent::Added(_)) {
                    received[i].fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    let written = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let api = api.clone();
        let written = written.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("w{w}-{n}"), "labels": {"writer": w.to_string()}},
                    "data": {"payload": "x".repeat(256)},
                }))
                .expect("configmap");
                if api.create(&PostParams::default(), &cm).await.is_ok() {
                    written.fetch_add(1, Ordering::Relaxed);
                }
                n += 1;
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = written.load(Ordering::Relaxed);
    // Let watchers drain.
    let drain_deadline = Instant::now() + Duration::from_secs(10);
    while received.iter().any(|r| r.load(Ordering::Relaxed) < total)
        && Instant::now() < drain_deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "writers={writers} watchers={watchers} seconds={elapsed:.1} writes={total} writes_per_second={:.0}",
        total as f64 / elapsed
    );
    for (i, r) in received.iter().enumerate() {
        println!("watcher {i}: {} ADDED events", r.load(Ordering::Relaxed));
    }
    dc.shutdown().await;
    Ok(())
}
