//! The sandbox controller's integration suites, one module per file, built as one test
//! binary (one link instead of one per file). The pure tests (desired state, status, plans)
//! are unit tests in `src/`: `cargo test -p sandbox-controller --lib`.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/harness.rs"]
mod harness;

mod controller;
mod lagging_cache;
mod watch_gaps;
mod work_queue;
mod write_budget;
