//! Changes that reach the controller only through a relist (its watch fell behind and got
//! `410 Expired`) must still reach the Sandbox's status, and must not wait for a periodic
//! re-check.

use crate::{cluster, harness};

use std::time::Duration;

use cluster::Cluster;
use harness::*;
use serde_json::json;

#[tokio::test]
async fn a_pod_turning_ready_during_a_watch_gap_makes_the_sandbox_ready() {
    let api = Cluster::start().await;
    let ctl = start_controller(&api);
    for name in ["gap-a", "gap-b"] {
        api.apply("sandboxes", sandbox(name, json!({}))).await;
    }
    // Both Pods start running; the status proves the controller saw that through its watch.
    for name in ["gap-a", "gap-b"] {
        wait_for("pod", || api.get("pods", NS, name)).await;
        api.patch_pod_status(name, json!({"phase": "Running"}))
            .await;
    }
    for name in ["gap-a", "gap-b"] {
        wait_for("running status", || {
            api.get("sandboxes", NS, name)
                .and_then(|s| condition(&s, "Ready"))
                .filter(|c| c.2 == "Pod is Running but not Ready")
        })
        .await;
    }

    // The controller's Pod watch falls behind: the Pods turn Ready unseen, then the watch is
    // expired and the relist is slow (its first page arrives two seconds before the rest).
    api.pause_watches("pods");
    make_pod_ready(&api, "gap-a", "node-1", "127.0.0.21").await;
    make_pod_ready(&api, "gap-b", "node-2", "127.0.0.22").await;
    api.slow_lists("pods", Duration::from_secs(2));
    api.expire_watches("pods");

    for (name, ip) in [("gap-a", "127.0.0.21"), ("gap-b", "127.0.0.22")] {
        let sb = wait_for("Ready after the relist", || {
            api.get("sandboxes", NS, name)
                .filter(|s| condition(s, "Ready").is_some_and(|c| c.0 == "True"))
        })
        .await;
        assert_eq!(sb["status"]["podIPs"], json!([ip]));
    }
    ctl.stop().await;
}
