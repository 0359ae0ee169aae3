//! The extensions controller's integration suites, one module per file, built as one test
//! binary: one link instead of one per file (17 binaries took longer to link than to run).
//! The pure and plan tests are unit tests in `src/` (`cargo test -p extensions-controller
//! --lib` runs them in about two seconds).

#[path = "support/harness.rs"]
mod harness;

mod binary_wiring;
mod churn_triggers;
mod claim_bursts;
mod claim_conditions;
mod claim_lifecycle;
mod claim_safety;
mod claim_wire;
mod event_series;
mod pool_health;
mod pool_scaling;
mod pool_template_missing;
mod pool_unschedulable;
mod python_sdk;
mod template_policies;
mod user_examples;
mod warm_claims;
