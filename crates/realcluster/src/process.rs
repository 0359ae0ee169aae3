//! The component processes: started with their output in a log file, watched by one monitor
//! thread, stopped by PID in reverse start order.
//!
//! Everything here is `std` (threads, `std::process`), not tokio: a cluster shared by the tests
//! of one process outlives the runtime of the test that started it, and stopping must work from
//! `Drop` without a runtime. Reaping (`try_wait`) and signalling happen under one lock, so a
//! signal never reaches a PID that was reaped and reused.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};
use tokio::sync::{oneshot, watch};

use crate::error::Error;

/// How many log lines an exit report shows.
pub const TAIL_LINES: usize = 20;
/// How often the monitor looks for exited components.
const POLL: Duration = Duration::from_millis(100);

/// A component that exited while the cluster was running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// The component's name, e.g. `kube-apiserver`.
    pub component: String,
    /// Its exit status, as `std` prints it (`exit status: 1`, `signal: 9 (SIGKILL)`).
    pub status: String,
    /// Its log file.
    pub log: PathBuf,
    /// The last [`TAIL_LINES`] whole lines of the log.
    pub tail: String,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} exited unexpectedly ({}); the last lines of its log:\n{}",
            self.component, self.status, self.tail
        )
    }
}

/// One running (or exited) component.
#[derive(Debug)]
struct Proc {
    name: String,
    child: Child,
    pid: u32,
    log: PathBuf,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Reaps the process if it has exited (under the supervisor's lock).
    fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.status = Some(status);
        }
        self.status
    }

    fn signal(&mut self, signal: Signal) {
        // Only while not reaped: the PID is still ours.
        if self.poll().is_none()
            && let Some(pid) = i32::try_from(self.pid).ok().and_then(Pid::from_raw)
        {
            let _ = kill_process(pid, signal);
        }
    }
}

#[derive(Debug)]
struct Shared {
    procs: Mutex<Vec<Proc>>,
    stopping: AtomicBool,
    exit: watch::Sender<Option<Exit>>,
}

impl Shared {
    fn procs(&self) -> MutexGuard<'_, Vec<Proc>> {
        // A panic while holding the lock leaves the list intact; keep using it.
        self.procs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the first unexpected exit (none once stopping has begun).
    fn record(&self, component: &str, status: &str, log: &Path) {
        if self.stopping.load(Ordering::SeqCst) {
            return;
        }
        let tail = log_tail(log, TAIL_LINES);
        self.exit.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(Exit {
                component: component.to_owned(),
                status: status.to_owned(),
                log: log.to_path_buf(),
                tail,
            });
            true
        });
    }
}

/// Reports the end of a component that runs inside this process (a thread, not a child
/// process, e.g. the [pod finisher](crate::finisher)), so it ends the cluster as a component
/// process's exit does: the first unexpected end is [`Supervisor::exited`], and nothing is
/// reported once the supervisor is stopping.
#[derive(Debug, Clone)]
pub struct ExitReporter {
    shared: Arc<Shared>,
}

impl ExitReporter {
    /// `component` ended with `status` (e.g. `panicked: ...`); its log is `log`.
    pub fn report(&self, component: &str, status: &str, log: &Path) {
        self.shared.record(component, status, log);
    }
}

/// A component that runs inside this process rather than as a child: a future on a thread with
/// a tokio runtime of its own (so it outlives the runtime of the test that started the cluster,
/// which may be shared by several `#[tokio::test]`s), until dropped. Dropping it stops the
/// future and joins the thread.
#[derive(Debug)]
pub struct InProcess {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl InProcess {
    /// Runs `work` on a thread named `realcluster-<name>`; if `work` ends before the drop (or
    /// panics, or no runtime can be built), `on_end` is told how (`ended`, `panicked: ...`).
    pub fn spawn(
        name: &str,
        work: impl Future<Output = ()> + Send + 'static,
        on_end: impl FnOnce(&str) + Send + 'static,
    ) -> Result<InProcess, Error> {
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name(format!("realcluster-{name}"))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => return on_end(&format!("no runtime: {e}")),
                };
                runtime.block_on(async move {
                    let task = tokio::spawn(work);
                    tokio::select! {
                        _ = stopped => {}
                        ended = task => on_end(&match ended {
                            Ok(()) => "ended".to_owned(),
                            Err(e) if e.is_panic() => format!("panicked: {}", panic_text(e)),
                            Err(e) => format!("stopped: {e}"),
                        }),
                    }
                });
            })
            .map_err(|source| Error::Io {
                action: "start a thread for",
                path: PathBuf::from(name),
                source,
            })?;
        Ok(InProcess {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn panic_text(e: tokio::task::JoinError) -> String {
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// Public facts about a started component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentInfo {
    pub name: String,
    pub pid: u32,
    pub log: PathBuf,
}

/// Starts, watches and stops the components of one cluster.
#[derive(Debug)]
pub struct Supervisor {
    shared: Arc<Shared>,
    monitor: Option<JoinHandle<()>>,
    own_process_groups: bool,
}

impl Supervisor {
    /// A supervisor with no component yet. With `own_process_groups`, each component leads a
    /// process group of its own, so a terminal's Ctrl-C reaches only the caller, which then stops
    /// them in order; without, they share the caller's group and a Ctrl-C of a test run ends them
    /// with it.
    pub fn new(own_process_groups: bool) -> Supervisor {
        let (exit, _) = watch::channel(None);
        let shared = Arc::new(Shared {
            procs: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
            exit,
        });
        let watched = Arc::clone(&shared);
        let monitor = std::thread::Builder::new()
            .name("realcluster-monitor".to_owned())
            .spawn(move || monitor(&watched))
            .ok();
        Supervisor {
            shared,
            monitor,
            own_process_groups,
        }
    }

    /// Starts `program args` with stdout and stderr going to `log` (created or truncated).
    pub fn spawn(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<u32, Error> {
        let io_error = |action: &'static str| {
            let path = log.to_path_buf();
            move |source| Error::Io {
                action,
                path,
                source,
            }
        };
        let out = File::create(log).map_err(io_error("create log file"))?;
        let err = out.try_clone().map_err(io_error("open log file"))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if self.own_process_groups {
            use std::os::unix::process::CommandExt as _;
            command.process_group(0);
        }
        let child = command.spawn().map_err(|source| Error::Spawn {
            program: program.to_path_buf(),
            source,
        })?;
        let pid = child.id();
        self.shared.procs().push(Proc {
            name: name.to_owned(),
            child,
            pid,
            log: log.to_path_buf(),
            status: None,
        });
        Ok(pid)
    }

    /// The components started so far.
    pub fn components(&self) -> Vec<ComponentInfo> {
        self.shared
            .procs()
            .iter()
            .map(|p| ComponentInfo {
                name: p.name.clone(),
                pid: p.pid,
                log: p.log.clone(),
            })
            .collect()
    }

    /// The first component that exited unexpectedly, if one has.
    pub fn exited(&self) -> Option<Exit> {
        self.shared.exit.borrow().clone()
    }

    /// Where a component running inside this process reports its end.
    pub fn exit_reporter(&self) -> ExitReporter {
        ExitReporter {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Resolves when a component exits unexpectedly (works on any tokio runtime).
    pub fn exit_watch(&self) -> watch::Receiver<Option<Exit>> {
        self.shared.exit.subscribe()
    }

    /// Stops every component, newest first: SIGTERM, up to `grace` to exit, then SIGKILL.
    /// Exits from here on are expected and not reported. Idempotent.
    pub fn stop(&self, grace: Duration) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let mut procs = self.shared.procs();
        for proc in procs.iter_mut().rev() {
            proc.signal(Signal::TERM);
            let deadline = Instant::now() + grace;
            while proc.poll().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if proc.poll().is_none() {
                proc.signal(Signal::KILL);
                if let Ok(status) = proc.child.wait() {
                    proc.status = Some(status);
                }
            }
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
        if let Some(monitor) = self.monitor.take() {
            let _ = monitor.join();
        }
    }
}

/// The monitor thread: records the first unexpected exit, ends once stopping has begun.
fn monitor(shared: &Shared) {
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let exit = {
            let mut procs = shared.procs();
            procs.iter_mut().find_map(|proc| {
                let status = proc.poll()?;
                Some((proc.name.clone(), status, proc.log.clone()))
            })
        };
        if let Some((component, status, log)) = exit {
            shared.record(&component, &status.to_string(), &log);
            return;
        }
        std::thread::sleep(POLL);
    }
}

/// The last `lines` whole lines of a log file (a partly written last line is left out; empty
/// when unreadable). Reads at most the last 256 KiB.
pub fn log_tail(path: &Path, lines: usize) -> String {
    use std::io::{Read as _, Seek as _, SeekFrom};
    const WINDOW: u64 = 256 * 1024;
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(WINDOW);
    if file.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    if file.read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut text: &str = &text;
    if start > 0 {
        // The window may begin mid-line: drop up to the first newline.
        text = text.split_once('\n').map(|(_, rest)| rest).unwrap_or("");
    }
    if !text.ends_with('\n') {
        // A line still being written is not whole yet.
        text = text.rsplit_once('\n').map(|(whole, _)| whole).unwrap_or("");
    }
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_is_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("x.log");
        std::fs::write(&log, "one\ntwo\nthree\nfour\npartial").unwrap();
        assert_eq!(log_tail(&log, 2), "three\nfour");
        std::fs::write(&log, "a\nb\n").unwrap();
        assert_eq!(log_tail(&log, 5), "a\nb");
        assert_eq!(log_tail(&dir.path().join("missing"), 5), "");
    }

    #[test]
    fn a_long_log_is_cut_at_a_line_start() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("x.log");
        let line = "x".repeat(1000);
        let text: String = (0..400).map(|i| format!("{i} {line}\n")).collect();
        std::fs::write(&log, text).unwrap();
        let tail = log_tail(&log, 3);
        let first: Vec<&str> = tail.lines().map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(first, ["397", "398", "399"]);
    }

    #[tokio::test]
    async fn an_unexpected_exit_is_reported_with_the_name_and_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let supervisor = Supervisor::new(true);
        let log = dir.path().join("sleeper.log");
        supervisor
            .spawn("sleeper", Path::new("sleep"), &["30".into()], &log)
            .unwrap();
        let crasher = dir.path().join("crasher.log");
        supervisor
            .spawn(
                "crasher",
                Path::new("sh"),
                &["-c".into(), "echo first; echo last words; exit 3".into()],
                &crasher,
            )
            .unwrap();
        let mut exits = supervisor.exit_watch();
        let exit = tokio::time::timeout(Duration::from_secs(10), exits.wait_for(Option::is_some))
            .await
            .expect("the exit is seen in time")
            .unwrap()
            .clone()
            .unwrap();
        assert_eq!(exit.component, "crasher");
        assert!(exit.status.contains('3'), "{}", exit.status);
        assert_eq!(exit.tail, "first\nlast words");
        let message = exit.to_string();
        assert!(
            message.starts_with("crasher exited unexpectedly"),
            "{message}"
        );

        let sleeper = supervisor.components()[0].pid;
        supervisor.stop(Duration::from_secs(5));
        assert!(
            !Path::new(&format!("/proc/{sleeper}")).exists(),
            "sleep {sleeper} was stopped and reaped"
        );
    }

    #[test]
    fn an_in_process_component_reports_its_end_until_the_stop() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("inside.log");
        std::fs::write(&log, "working\nlast words\n").unwrap();
        let supervisor = Supervisor::new(true);
        let reporter = supervisor.exit_reporter();
        reporter.report("inside", "panicked: boom", &log);
        let exit = supervisor.exited().expect("reported");
        assert_eq!(
            (
                exit.component.as_str(),
                exit.status.as_str(),
                exit.tail.as_str()
            ),
            ("inside", "panicked: boom", "working\nlast words")
        );
        reporter.report("other", "ended", &log);
        assert_eq!(
            supervisor.exited().unwrap().component,
            "inside",
            "the first stands"
        );

        let stopped = Supervisor::new(true);
        stopped.stop(Duration::from_secs(1));
        stopped.exit_reporter().report("inside", "ended", &log);
        assert_eq!(stopped.exited(), None, "an end during the stop is expected");
    }

    #[test]
    fn a_stop_is_not_an_unexpected_exit() {
        let dir = tempfile::tempdir().unwrap();
        let supervisor = Supervisor::new(true);
        supervisor
            .spawn(
                "sleeper",
                Path::new("sleep"),
                &["30".into()],
                &dir.path().join("s.log"),
            )
            .unwrap();
        let mut supervisor = supervisor;
        supervisor.stop(Duration::from_secs(5));
        // The monitor has seen the exit (or ends without looking) once joined.
        supervisor.monitor.take().unwrap().join().unwrap();
        assert_eq!(supervisor.exited(), None);
    }
}
