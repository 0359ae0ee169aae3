//! The processes of a running `cargo xtask dev`, and what happens when one exits: a controller
//! is restarted (after a line saying so and the end of its log), up to [`MAX_QUICK_RESTARTS`]
//! restarts in a row; devcluster is not (its state is in memory, so a new one would be an
//! empty cluster under the controllers' feet): its exit ends the run with an error.

use std::time::Duration;

use crate::dev::DevError;
use crate::dev::process::{ChildGroup, log_tail};

/// Restarts in a row after which `cargo xtask dev` gives up on a controller.
pub const MAX_QUICK_RESTARTS: u32 = 5;
/// A controller that ran at least this long before exiting starts a new row of restarts.
pub const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// Lines of a log shown when its process exits.
pub const TAIL_LINES: usize = 10;

/// What to do after a child exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterExit {
    /// Start it again after `delay`; this is restart `attempt` (1-based) of the current row.
    Restart { attempt: u32, delay: Duration },
    /// Stop everything and report the exit.
    GiveUp,
}

/// The decision for a child that exited after running `ran_for`, with `row` quick restarts
/// before this exit. Delays double from 1 s.
pub fn after_exit(restartable: bool, row: u32, ran_for: Duration) -> AfterExit {
    if !restartable {
        return AfterExit::GiveUp;
    }
    let row = if ran_for >= HEALTHY_RUN { 0 } else { row };
    if row >= MAX_QUICK_RESTARTS {
        return AfterExit::GiveUp;
    }
    AfterExit::Restart {
        attempt: row + 1,
        delay: Duration::from_secs(1 << row.min(4)),
    }
}

/// One supervised process.
#[derive(Debug)]
struct Supervised {
    child: ChildGroup,
    /// Restarted when it exits (the controllers).
    restartable: bool,
    /// Quick restarts in a row so far.
    row: u32,
}

/// The processes of a running dev environment, in start order, and the real control plane
/// when it runs on one (started before the children, stopped after them).
#[derive(Debug, Default)]
pub struct Running {
    children: Vec<Supervised>,
    real: Option<realcluster::RealCluster>,
}

impl Running {
    /// Takes over the real control plane: checked with the children, stopped after them. Like
    /// devcluster it is not restarted (its state would be lost).
    pub fn set_real(&mut self, cluster: realcluster::RealCluster) {
        self.real = Some(cluster);
    }

    /// The real control plane, when the environment runs on one.
    pub fn real(&self) -> Option<&realcluster::RealCluster> {
        self.real.as_ref()
    }

    /// Adds a started child; `restartable` ones are restarted when they exit.
    pub fn push(&mut self, child: ChildGroup, restartable: bool) {
        self.children.push(Supervised {
            child,
            restartable,
            row: 0,
        });
    }

    /// Drops the last child pushed (one that exited and is not to be restarted).
    pub fn forget_last(&mut self) {
        self.children.pop();
    }

    /// Stops the children in reverse start order (controllers before the API server).
    pub async fn stop_all(&mut self) {
        while let Some(mut supervised) = self.children.pop() {
            supervised.child.stop(Duration::from_secs(10)).await;
        }
        if let Some(cluster) = self.real.take() {
            // Stops every component by PID (SIGTERM, then SIGKILL) and removes its data: blocking.
            let _ = tokio::task::spawn_blocking(move || cluster.stop()).await;
        }
    }

    /// Looks at every child once: restarts a controller that exited (waiting its delay, while
    /// the caller's signal handlers stay live), or returns the error that ends the run.
    pub async fn check(&mut self) -> Result<(), DevError> {
        if let Some(exit) = self
            .real
            .as_ref()
            .and_then(realcluster::RealCluster::exited)
        {
            return Err(DevError::Real(realcluster::Error::ComponentExited(
                Box::new(exit),
            )));
        }
        for supervised in &mut self.children {
            let Some(status) = supervised.child.try_exit_status() else {
                continue;
            };
            let child = &mut supervised.child;
            let ran_for = child.running_for();
            match after_exit(supervised.restartable, supervised.row, ran_for) {
                AfterExit::GiveUp => {
                    return Err(child_exited(child, &status.to_string(), supervised.row));
                }
                AfterExit::Restart { attempt, delay } => {
                    eprintln!(
                        "==> {} exited ({status}) after {:.1}s; last lines of {}:",
                        child.name(),
                        ran_for.as_secs_f64(),
                        child.log().display()
                    );
                    for line in log_tail(child.log(), TAIL_LINES).lines() {
                        eprintln!("    {line}");
                    }
                    eprintln!(
                        "==> restarting {} in {}s (restart {attempt} of at most \
                         {MAX_QUICK_RESTARTS} in a row; its log continues in the same file)",
                        child.name(),
                        delay.as_secs()
                    );
                    tokio::time::sleep(delay).await;
                    child.respawn(&format!(
                        "restarted by cargo xtask dev after it exited ({status})"
                    ))?;
                    supervised.row = attempt;
                    eprintln!("    {} pid {}", child.name(), child.pid());
                }
            }
        }
        Ok(())
    }

    /// Returns only when a child has exited for good (devcluster, a component of the real
    /// control plane, or a controller past its restarts), with the error describing it.
    pub async fn supervise(&mut self) -> DevError {
        loop {
            if let Err(error) = self.check().await {
                return error;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn child_exited(child: &ChildGroup, status: &str, restarts: u32) -> DevError {
    DevError::ChildExited {
        name: child.name().to_owned(),
        status: if restarts > 0 {
            format!("{status}; gave up after {restarts} restarts in a row")
        } else {
            status.to_owned()
        },
        log: child.log().display().to_string(),
        tail: log_tail(child.log(), TAIL_LINES),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controllers_restart_with_growing_delays_up_to_the_limit() {
        let quick = Duration::from_secs(2);
        let mut row = 0;
        let mut delays = Vec::new();
        while let AfterExit::Restart { attempt, delay } = after_exit(true, row, quick) {
            assert_eq!(attempt, row + 1);
            delays.push(delay.as_secs());
            row = attempt;
        }
        assert_eq!(delays, [1, 2, 4, 8, 16]);
        assert_eq!(row, MAX_QUICK_RESTARTS);
    }

    #[test]
    fn a_long_healthy_run_starts_a_new_row_and_devcluster_is_never_restarted() {
        assert_eq!(
            after_exit(true, MAX_QUICK_RESTARTS, HEALTHY_RUN),
            AfterExit::Restart {
                attempt: 1,
                delay: Duration::from_secs(1)
            }
        );
        assert_eq!(after_exit(false, 0, HEALTHY_RUN), AfterExit::GiveUp);
    }
}
