//! `--profile-apiserver`: kube-apiserver's own CPU profile over a scenario's measured phases,
//! and where in kube-apiserver that CPU went.
//!
//! On the real control plane kube-apiserver is the process that works (docs/performance.md:
//! about 36 ms of its CPU per bound claim against the controllers' 3-4 ms), so the figure
//! that says what a claim costs there is inside it. kube-apiserver serves Go's profiler at
//! `/debug/pprof/profile` (`--profiling`, on by default; the admin credentials may read it).
//! That endpoint profiles for a fixed number of seconds given up front, while a phase's length
//! is known only at its end, so the recorder asks for consecutive [`CHUNK_SECONDS`] pieces
//! until the phase ends: the profile covers the phase plus at most one piece after it, and a
//! few milliseconds between pieces are not sampled. At the end of the scenario the pieces are
//! merged into `kube-apiserver.cpu.pb.gz` with `go tool pprof -proto` (Go is there: it built
//! the control plane) and `focused_share` reads, with `go tool pprof -focus`, which share of
//! the samples passed through each part of kube-apiserver (`details.kube_apiserver_cpu_profile`).
//! Reading the profile is `go tool pprof`'s job; nothing here decodes it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use futures::AsyncReadExt;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Length of one profile request. Short, because the last one runs on past the phase's end;
/// Go's profiler samples at 100 Hz, so a piece still holds a few hundred samples on 2 cores.
pub const CHUNK_SECONDS: u64 = 2;

/// The profile file in the scenario's directory.
pub const FILE: &str = "kube-apiserver.cpu.pb.gz";

/// The activities of kube-apiserver that do not overlap (no stack passes through two of them):
/// each share is of every sample, and what none of them holds is reported as `other` (the
/// filter chain every request passes: authentication, authorization, API Priority and
/// Fairness, audit, tracing; reading and decoding the request; the Go runtime's own work).
/// A write's storage work (admission, the patch, the field manager, etcd) runs in a goroutine
/// of its own (`finishRequest`), so the patch row counts that part and the row after update
/// the response the handler then serializes (a create's or an update's handler does both in
/// one goroutine, hence that row's `ignore`).
pub const ACTIVITIES: [(&str, &str, &str); 10] = [
    (
        "patch requests",
        r"handlers\.\(\*patcher\)\.patchResource",
        "",
    ),
    ("create requests", r"createHandler", ""),
    ("update requests", r"handlers\.UpdateResource", ""),
    (
        "writing responses of patch, get and list requests",
        r"responsewriters\.WriteObjectNegotiated",
        r"createHandler|handlers\.UpdateResource",
    ),
    (
        "delete requests",
        r"handlers\.DeleteResource|handlers\.DeleteCollection",
        "",
    ),
    ("get requests", r"handlers\.GetResource", ""),
    (
        "list requests",
        r"handlers\.ListResource",
        r"handlers\.serveWatch|WatchServer\)\.HandleHTTP",
    ),
    (
        "serving watches",
        r"handlers\.serveWatch|WatchServer\)\.HandleHTTP",
        "",
    ),
    (
        "watch caches decoding etcd's events",
        r"etcd3\.\(\*watchChan\)",
        "",
    ),
    (
        "Go garbage collector in the background",
        r"runtime\.gcBgMarkWorker|runtime\.bgsweep|runtime\.bgscavenge",
        "",
    ),
];

/// Work that runs inside the activities above (a share here is also counted there).
pub const ACROSS: [(&str, &str); 7] = [
    (
        "JSON encoding and decoding",
        r"encoding/json|sigs\.k8s\.io/json",
    ),
    ("managedFields (the field manager)", r"managedfields"),
    ("admission", r"admission\.chainAdmissionHandler"),
    (
        "audit",
        r"k8s\.io/apiserver/pkg/audit\.|k8s\.io/apiserver/plugin/pkg/audit",
    ),
    (
        "conversion webhook calls",
        r"conversion\.\(\*webhookConverter\)",
    ),
    ("TLS", r"crypto/tls"),
    ("garbage collection assists", r"runtime\.gcAssistAlloc"),
];

/// What `details.kube_apiserver_cpu_profile` says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileSummary {
    /// The merged profile, in the scenario's directory (`go tool pprof -top FILE`).
    pub file: String,
    /// Requests of [`CHUNK_SECONDS`] that make it up.
    pub pieces: usize,
    /// CPU time sampled, seconds.
    pub sampled_cpu_s: f64,
    /// Per cent of the samples in each of [`ACTIVITIES`], plus `other`.
    pub activities: Vec<Share>,
    /// Per cent of the samples in each of [`ACROSS`].
    pub across: Vec<Share>,
}

/// One part's share of the samples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Share {
    pub part: String,
    pub pct: f64,
}

type Pieces = Result<Vec<Vec<u8>>, String>;

/// Records kube-apiserver's CPU profile while a phase runs (see the module comment).
pub struct ApiserverProfiler {
    client: kube::Client,
    /// The latest recording; it waits for the one before it, whose pieces it carries on.
    running: Mutex<Option<JoinHandle<Pieces>>>,
}

/// Ends the phase's recording (after the piece in flight).
pub struct StopProfile(watch::Sender<bool>);

impl StopProfile {
    pub fn stop(&self) {
        let _ = self.0.send(true);
    }
}

impl ApiserverProfiler {
    pub fn new(client: kube::Client) -> Self {
        ApiserverProfiler {
            client,
            running: Mutex::new(None),
        }
    }

    /// Starts recording a phase; it ends at [`StopProfile::stop`] (or when that is dropped).
    pub fn start(&self) -> StopProfile {
        let (stop, stopped) = watch::channel(false);
        let client = self.client.clone();
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let before = running.take();
        *running = Some(tokio::spawn(async move {
            let mut pieces = match before {
                Some(task) => task.await.map_err(|e| e.to_string())??,
                None => Vec::new(),
            };
            loop {
                pieces.push(piece(&client).await?);
                // Stopped, or the StopProfile dropped.
                if *stopped.borrow() || stopped.has_changed().is_err() {
                    return Ok(pieces);
                }
            }
        }));
        StopProfile(stop)
    }

    /// Waits for the recordings, merges them into [`FILE`] in `dir` and reads the shares.
    /// `None` when no phase was recorded; an error names what failed (the report keeps it).
    pub async fn finish(&self, dir: &Path) -> Option<Result<ProfileSummary, String>> {
        let task = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        let pieces = match task.await {
            Ok(Ok(pieces)) => pieces,
            Ok(Err(e)) => return Some(Err(e)),
            Err(e) => return Some(Err(format!("the profile recorder stopped: {e}"))),
        };
        let dir = dir.to_path_buf();
        Some(
            tokio::task::spawn_blocking(move || merge_and_read(&dir, &pieces))
                .await
                .unwrap_or_else(|e| Err(format!("reading the profile: {e}"))),
        )
    }
}

/// One profile of [`CHUNK_SECONDS`].
async fn piece(client: &kube::Client) -> Result<Vec<u8>, String> {
    let request = http::Request::get(format!("/debug/pprof/profile?seconds={CHUNK_SECONDS}"))
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let read = async {
        let mut body = Vec::new();
        client
            .request_stream(request)
            .await
            .map_err(|e| e.to_string())?
            .read_to_end(&mut body)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(body)
    };
    let answer_within = CHUNK_SECONDS + 30;
    tokio::time::timeout(Duration::from_secs(answer_within), read)
        .await
        .map_err(|_| {
            format!("kube-apiserver's /debug/pprof/profile did not answer in {answer_within} s")
        })?
        .map_err(|e| format!("kube-apiserver's /debug/pprof/profile: {e}"))
}

fn merge_and_read(dir: &Path, pieces: &[Vec<u8>]) -> Result<ProfileSummary, String> {
    let parts = dir.join("kube-apiserver.cpu.pieces");
    std::fs::create_dir_all(&parts).map_err(|e| format!("{}: {e}", parts.display()))?;
    let mut paths = Vec::new();
    for (i, bytes) in pieces.iter().enumerate() {
        let path = parts.join(format!("{i:04}.pb.gz"));
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        paths.push(path);
    }
    let file = dir.join(FILE);
    let merged = go_pprof(
        &[
            "-proto".into(),
            "-output".into(),
            file.display().to_string(),
        ],
        &paths,
    );
    let _ = std::fs::remove_dir_all(&parts);
    merged?;
    let mut activities = Vec::new();
    let mut sampled_ms = 0.0;
    for (name, focus, ignore) in ACTIVITIES {
        // Every call reports the same total: the profile's.
        let pct;
        (pct, sampled_ms) = focused_share(&file, focus, ignore)?;
        activities.push(Share {
            part: name.into(),
            pct,
        });
    }
    let accounted: f64 = activities.iter().map(|s| s.pct).sum();
    activities.push(Share {
        part: "other".into(),
        pct: round2((100.0 - accounted).max(0.0)),
    });
    let mut across = Vec::new();
    for (name, focus) in ACROSS {
        across.push(Share {
            part: name.into(),
            pct: focused_share(&file, focus, "")?.0,
        });
    }
    Ok(ProfileSummary {
        file: FILE.into(),
        pieces: pieces.len(),
        sampled_cpu_s: round2(sampled_ms / 1000.0),
        activities,
        across,
    })
}

/// The share (per cent) of `file`'s samples whose stack has a function matching `focus` and
/// none matching `ignore`, and the profile's total in milliseconds.
fn focused_share(file: &Path, focus: &str, ignore: &str) -> Result<(f64, f64), String> {
    let mut args = vec![
        "-top".to_string(),
        "-unit=ms".into(),
        "-nodefraction=0".into(),
        format!("-focus={focus}"),
    ];
    if !ignore.is_empty() {
        args.push(format!("-ignore={ignore}"));
    }
    let text = go_pprof(&args, &[file.to_path_buf()])?;
    parse_accounting(&text).ok_or_else(|| {
        format!(
            "go tool pprof -focus={focus}: no 'Showing nodes accounting for' line in: {}",
            text.lines().take(10).collect::<Vec<_>>().join(" | ")
        )
    })
}

fn go_pprof(args: &[String], files: &[PathBuf]) -> Result<String, String> {
    let output = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .args(files)
        .output()
        .map_err(|e| format!("running go tool pprof (Go is needed, as for the cluster): {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "go tool pprof {}: {}: {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Reads `Showing nodes accounting for 9400ms, 36.99% of 25410ms total` (with `-unit=ms` and
/// `-nodefraction=0`, every sample the filters kept): the share and the total. A filter that
/// kept nothing prints `accounting for 0, 0% of ...`.
pub fn parse_accounting(text: &str) -> Option<(f64, f64)> {
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Showing nodes accounting for "))?;
    let (_, rest) = line.split_once(", ")?;
    let (pct, rest) = rest.split_once("% of ")?;
    let total = rest.strip_suffix(" total")?.trim();
    let total = total.strip_suffix("ms").unwrap_or(total);
    Some((pct.trim().parse().ok()?, total.parse().ok()?))
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_share_and_the_total_of_a_focused_top() {
        let text = "File: kube-apiserver\nType: cpu\nDuration: 20s, Total samples = 25410ms (127.04%)\nActive filters:\n   focus=patcher\nShowing nodes accounting for 9400ms, 36.99% of 25410ms total\n      flat  flat%\n";
        assert_eq!(parse_accounting(text), Some((36.99, 25410.0)));
        let none = "Showing nodes accounting for 0, 0% of 25410ms total\n";
        assert_eq!(parse_accounting(none), Some((0.0, 25410.0)));
        assert_eq!(parse_accounting("File: kube-apiserver\n"), None);
    }
}
