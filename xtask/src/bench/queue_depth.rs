//! The deepest each controller's work queues got during a load phase: `workqueue_depth` from
//! the controllers' `/metrics`, sampled every [`SAMPLE_EVERY`]. The reference's capacity-cliff
//! test reports the same figure (`SandboxWorkqueueDepthMax`) per step.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::bench::cluster::{Stack, http_get};
use crate::bench::prom::{self, Sample};

/// How often the queues are sampled. Each sample is one scrape per controller, which costs the
/// sandbox-controller a pass over its Sandboxes (`agent_sandboxes`): once a second keeps that
/// out of the CPU figures (Prometheus itself scrapes every 15-30 s).
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Maximum depth seen so far, by `process/queue`.
type Maxima = BTreeMap<String, f64>;

/// Samples the work-queue depths in the background until [`DepthSampler::finish`].
pub struct DepthSampler {
    maxima: Arc<Mutex<Maxima>>,
    task: tokio::task::JoinHandle<()>,
}

impl DepthSampler {
    pub fn start(stack: &Stack) -> DepthSampler {
        let targets: Vec<(&'static str, SocketAddr)> = stack
            .controllers
            .iter()
            .map(|c| (c.kind.name(), c.metrics_addr))
            .collect();
        let maxima = Arc::new(Mutex::new(Maxima::new()));
        let task = tokio::spawn({
            let maxima = Arc::clone(&maxima);
            async move {
                loop {
                    for (process, addr) in &targets {
                        // A missed scrape (a controller restarting) leaves the maxima as they are.
                        if let Ok((200, body)) = http_get(*addr, "/metrics").await {
                            let mut maxima = maxima.lock().unwrap_or_else(|e| e.into_inner());
                            record(&mut maxima, process, &prom::parse(&body));
                        }
                    }
                    tokio::time::sleep(SAMPLE_EVERY).await;
                }
            }
        });
        DepthSampler { maxima, task }
    }

    /// Stops sampling; the maximum depth by `process/queue` (for example
    /// `sandbox-controller/sandbox`, `extensions-controller/sandboxclaim`).
    pub fn finish(&self) -> Maxima {
        self.task.abort();
        self.maxima
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for DepthSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Folds one scrape's `workqueue_depth` samples into the maxima.
fn record(maxima: &mut Maxima, process: &str, samples: &[Sample]) {
    for s in samples.iter().filter(|s| s.name == "workqueue_depth") {
        let slot = maxima
            .entry(format!("{process}/{}", s.label("name")))
            .or_insert(0.0);
        *slot = slot.max(s.value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deepest_sample_of_each_queue_is_kept() {
        let mut maxima = Maxima::new();
        let scrape = |claims: u32, pools: u32| {
            prom::parse(&format!(
                "# TYPE workqueue_depth gauge\n\
                 workqueue_depth{{name=\"sandboxclaim\",controller=\"sandboxclaim\"}} {claims}\n\
                 workqueue_depth{{name=\"sandboxwarmpool\",controller=\"sandboxwarmpool\"}} {pools}\n\
                 workqueue_adds_total{{name=\"sandboxclaim\",controller=\"sandboxclaim\"}} 900\n"
            ))
        };
        record(&mut maxima, "extensions-controller", &scrape(3, 0));
        record(&mut maxima, "extensions-controller", &scrape(41, 2));
        record(&mut maxima, "extensions-controller", &scrape(7, 1));
        assert_eq!(
            maxima,
            Maxima::from([
                ("extensions-controller/sandboxclaim".to_string(), 41.0),
                ("extensions-controller/sandboxwarmpool".to_string(), 2.0),
            ])
        );
    }
}
