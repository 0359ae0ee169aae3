//! `cargo xtask migrate`: moving an install that stored `v1alpha1` objects (the reference's
//! v0.4.x, or a v0.5.x never migrated) to `v1beta1` storage, in the reference's two phases
//! (`v1alpha1-conversion.md` §9). docs/upgrade.md says when to run which.
//!
//! - `--phase=bootstrap`, before the new CRDs are applied: every cold-start v1alpha1 claim
//!   (`warmpool` `default`, `none` or empty, not bound to a warm Sandbox) will convert to the
//!   pool `shadow-pool-<template>`; this phase creates each such pool (0 replicas, marked
//!   `agents.x-k8s.io/migration-shadow: "true"`) so those claims keep working. Claims that name
//!   a pool that does not exist are listed for the operator.
//! - `--phase=migrate`, after the new CRDs are applied and the webhooks answer: every object of
//!   the four kinds is rewritten (annotation `agents.x-k8s.io/storage-migrated-at`), so etcd
//!   holds it as `v1beta1`; then, when every object of a CRD was rewritten (no `--namespace`,
//!   no failure), that CRD's `status.storedVersions` is set to `["v1beta1"]` (the reference
//!   leaves this to the operator; the API server never does it).
//!
//! Both phases are idempotent, go on past a failed object, print a summary, and exit 1 when
//! anything failed. Why an xtask verb: the migration spans both controllers' kinds and CRDs
//! (neither binary should carry the other's), needs rights no controller has (`patch` on
//! `customresourcedefinitions/status`), and runs once per upgrade with the operator's own
//! kubeconfig, like the reference's script run from a checkout.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use api_types::conversion::{
    HUB_VERSION, Kind, SANDBOX, SANDBOX_CLAIM, SANDBOX_TEMPLATE, SANDBOX_WARM_POOL,
    SHADOW_POOL_PREFIX, SPOKE_VERSION,
};
use api_types::keys::{
    MIGRATION_SHADOW_ANNOTATION, MIGRATION_SOURCE_TEMPLATE_ANNOTATION,
    STORAGE_MIGRATED_AT_ANNOTATION,
};
use api_types::v1alpha1::{self, is_specific_pool};
use api_types::warm_pool::SandboxTemplateRef;
use clap::{Args, ValueEnum};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

/// Arguments of `cargo xtask migrate`.
#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// `bootstrap` before applying the new CRDs, `migrate` after (docs/upgrade.md).
    #[arg(long, value_enum)]
    pub phase: Phase,
    /// Say what would be done, change nothing.
    #[arg(long, env = "MIGRATE_DRY_RUN")]
    pub dry_run: bool,
    /// Only this namespace (default: all). `migrate` then leaves `storedVersions` alone.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// `migrate` only: rewrite the objects but leave `status.storedVersions` as it is.
    #[arg(long)]
    pub keep_stored_versions: bool,
}

/// The two phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Phase {
    Bootstrap,
    Migrate,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Bootstrap => "bootstrap",
            Phase::Migrate => "migrate",
        }
    }
}

/// Lines printed, as `[migrate:<phase>] ...` (warnings and errors on stderr).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Log {
    pub lines: Vec<String>,
}

impl Log {
    fn info(&mut self, phase: Phase, line: String) {
        let line = format!("[migrate:{}] {line}", phase.name());
        println!("{line}");
        self.lines.push(line);
    }
    fn warn(&mut self, phase: Phase, line: String) {
        let line = format!("[migrate:{}] WARN: {line}", phase.name());
        eprintln!("{line}");
        self.lines.push(line);
    }
    fn error(&mut self, phase: Phase, line: String) {
        let line = format!("[migrate:{}] ERROR: {line}", phase.name());
        eprintln!("{line}");
        self.lines.push(line);
    }
}

// --- bootstrap: the plan -----------------------------------------------------------------------

/// What bootstrap needs of one v1alpha1 claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimFacts {
    pub namespace: String,
    pub name: String,
    pub template: String,
    pub warmpool: Option<String>,
    pub bound_sandbox: String,
}

/// Bootstrap's decision over all claims (pure; see [`plan_bootstrap`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BootstrapPlan {
    /// Warm-started claims: they convert to the pool of their Sandbox.
    pub warm_start_skipped: usize,
    /// `(namespace, claim, pool)` of claims naming a specific pool (checked for existence).
    pub specific: Vec<(String, String, String)>,
    /// `(namespace, template)` pairs that need a shadow pool.
    pub shadow: BTreeSet<(String, String)>,
    /// Claims that cannot be planned (no template).
    pub errors: Vec<String>,
}

/// Mirrors the conversion rules (`api_types::conversion::claim`): a specific pool stays; a
/// claim bound to a Sandbox not named like it is a warm start; anything else needs
/// `shadow-pool-<template>` in its namespace.
pub fn plan_bootstrap(claims: &[ClaimFacts]) -> BootstrapPlan {
    let mut plan = BootstrapPlan::default();
    for claim in claims {
        let id = format!("{}/{}", claim.namespace, claim.name);
        match claim.warmpool.as_deref() {
            Some(pool) if is_specific_pool(pool) => {
                plan.specific
                    .push((claim.namespace.clone(), claim.name.clone(), pool.to_owned()));
            }
            _ if claim.template.is_empty() => {
                plan.errors.push(format!(
                    "claim {id} has no spec.sandboxTemplateRef.name; skipped"
                ));
            }
            _ if !claim.bound_sandbox.is_empty() && claim.bound_sandbox != claim.name => {
                plan.warm_start_skipped += 1;
            }
            _ => {
                plan.shadow
                    .insert((claim.namespace.clone(), claim.template.clone()));
            }
        }
    }
    plan
}

/// `shadow-pool-<template>`, or an error when it exceeds a label's 63 characters.
pub fn shadow_pool_name(template: &str) -> Result<String, String> {
    let name = format!("{SHADOW_POOL_PREFIX}{template}");
    if name.len() > 63 {
        Err(format!(
            "{name} is longer than 63 characters: rename template {template} (at most 51 characters) or create a pool its cold-start claims can use and re-point them"
        ))
    } else {
        Ok(name)
    }
}

/// The shadow pool bootstrap creates (v1alpha1, the version every install serves).
pub fn shadow_pool(namespace: &str, template: &str, name: &str) -> v1alpha1::SandboxWarmPool {
    v1alpha1::SandboxWarmPool {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            annotations: Some(BTreeMap::from([
                (MIGRATION_SHADOW_ANNOTATION.to_owned(), "true".to_owned()),
                (
                    MIGRATION_SOURCE_TEMPLATE_ANNOTATION.to_owned(),
                    template.to_owned(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        spec: v1alpha1::SandboxWarmPoolSpec {
            replicas: 0,
            sandbox_template_ref: SandboxTemplateRef {
                name: template.to_owned(),
            },
            update_strategy: None,
        },
        status: None,
    }
}

/// Bootstrap's counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BootstrapSummary {
    pub scanned: usize,
    pub warm_start_skipped: usize,
    pub specific_existing: usize,
    pub created: usize,
    pub skipped_existing_shadow: usize,
    pub errors: usize,
    /// `namespace/claim -> pool` for claims whose pool does not exist.
    pub operator_action: Vec<String>,
}

/// Migrate's counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MigrateSummary {
    /// Per CRD: (rewritten, failed), in the order migrated.
    pub per_crd: Vec<(String, usize, usize)>,
    pub total_success: usize,
    pub total_failure: usize,
    /// CRDs whose `storedVersions` is now `["v1beta1"]`.
    pub pruned: Vec<String>,
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

fn scoped(client: &Client, namespace: Option<&str>, resource: &ApiResource) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

fn resource(kind: Kind, version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(kind.group, version, kind.kind),
        kind.plural,
    )
}

/// Runs bootstrap against `client`.
pub async fn bootstrap(
    client: &Client,
    args: &MigrateArgs,
    log: &mut Log,
) -> Result<BootstrapSummary, crate::XtaskError> {
    let phase = Phase::Bootstrap;
    let mut summary = BootstrapSummary::default();
    let claims: Api<v1alpha1::SandboxClaim> = match &args.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let listed = match claims.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) if is_status(&e, 404) => {
            log.info(phase, "no v1alpha1 SandboxClaim API on this cluster: nothing stored as v1alpha1, nothing to do".into());
            return Ok(summary);
        }
        Err(e) => {
            return Err(crate::XtaskError::Migrate(format!(
                "listing v1alpha1 SandboxClaims failed (the caller needs get/list on sandboxclaims.extensions.agents.x-k8s.io): {e}"
            )));
        }
    };
    let facts: Vec<ClaimFacts> = listed
        .iter()
        .map(|c| ClaimFacts {
            namespace: c.metadata.namespace.clone().unwrap_or_default(),
            name: c.metadata.name.clone().unwrap_or_default(),
            template: c.spec.sandbox_template_ref.name.clone(),
            warmpool: c.spec.warmpool.clone(),
            bound_sandbox: c
                .status
                .as_ref()
                .map(|s| s.sandbox.name.clone())
                .unwrap_or_default(),
        })
        .collect();
    summary.scanned = facts.len();
    if facts.is_empty() {
        log.info(phase, "no SandboxClaims: nothing to do".into());
        return Ok(summary);
    }
    let plan = plan_bootstrap(&facts);
    summary.warm_start_skipped = plan.warm_start_skipped;
    for error in &plan.errors {
        log.warn(phase, error.clone());
        summary.errors += 1;
    }
    let pools_resource = resource(SANDBOX_WARM_POOL, SPOKE_VERSION);
    for (namespace, claim, pool) in &plan.specific {
        let pools: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &pools_resource);
        match pools.get_opt(pool).await {
            Ok(Some(_)) => summary.specific_existing += 1,
            Ok(None) => summary
                .operator_action
                .push(format!("{namespace}/{claim} -> {pool}")),
            Err(e) => {
                log.error(
                    phase,
                    format!("looking up pool {namespace}/{pool} for claim {claim}: {e}"),
                );
                summary.errors += 1;
            }
        }
    }
    for (namespace, template) in &plan.shadow {
        let name = match shadow_pool_name(template) {
            Ok(name) => name,
            Err(e) => {
                log.error(phase, format!("namespace {namespace}: {e}"));
                summary.errors += 1;
                continue;
            }
        };
        let pools: Api<v1alpha1::SandboxWarmPool> = Api::namespaced(client.clone(), namespace);
        let existing: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &pools_resource);
        match existing.get_opt(&name).await {
            Ok(Some(pool)) => {
                let marked = pool
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(MIGRATION_SHADOW_ANNOTATION))
                    .map(String::as_str)
                    == Some("true");
                if marked {
                    summary.skipped_existing_shadow += 1;
                } else {
                    log.warn(phase, format!("pool {namespace}/{name} exists but is not a shadow pool (no {MIGRATION_SHADOW_ANNOTATION}: \"true\"); left alone, check that it serves template {template}"));
                    summary.errors += 1;
                }
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                log.error(phase, format!("looking up pool {namespace}/{name}: {e}"));
                summary.errors += 1;
                continue;
            }
        }
        if args.dry_run {
            log.info(
                phase,
                format!(
                    "dry run: would create shadow pool {namespace}/{name} for template {template}"
                ),
            );
            summary.created += 1;
            continue;
        }
        match pools
            .create(
                &PostParams::default(),
                &shadow_pool(namespace, template, &name),
            )
            .await
        {
            Ok(_) => {
                log.info(
                    phase,
                    format!("created shadow pool {namespace}/{name} for template {template}"),
                );
                summary.created += 1;
            }
            Err(e) if is_status(&e, 409) => summary.skipped_existing_shadow += 1,
            Err(e) => {
                log.error(
                    phase,
                    format!("creating shadow pool {namespace}/{name}: {e}"),
                );
                summary.errors += 1;
            }
        }
    }
    log.info(
        phase,
        format!(
            "summary: scanned={} warmstart_skipped={} specific_existing={} created={} skipped_existing_shadow={} errors={}",
            summary.scanned,
            summary.warm_start_skipped,
            summary.specific_existing,
            summary.created,
            summary.skipped_existing_shadow,
            summary.errors
        ),
    );
    if !summary.operator_action.is_empty() {
        log.warn(phase, "OPERATOR ACTION REQUIRED: these claims name a pool that does not exist; after the upgrade they point at it and stay not Ready (WarmPoolNotFound). Create the pools or re-point the claims:".into());
        for line in summary.operator_action.clone() {
            log.warn(phase, format!("  {line}"));
        }
    }
    Ok(summary)
}

/// The CRDs, in the order migrate rewrites them (pools and templates before what refers to
/// them).
pub const MIGRATION_ORDER: [Kind; 4] =
    [SANDBOX_WARM_POOL, SANDBOX_TEMPLATE, SANDBOX, SANDBOX_CLAIM];

/// The storage version a CRD declares.
fn storage_version(crd: &CustomResourceDefinition) -> Option<&str> {
    crd.spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.as_str())
}

/// Runs migrate against `client` at `timestamp` (`YYYY-MM-DDTHH:MM:SSZ`).
pub async fn migrate(
    client: &Client,
    args: &MigrateArgs,
    timestamp: &str,
    log: &mut Log,
) -> MigrateSummary {
    let phase = Phase::Migrate;
    let mut summary = MigrateSummary::default();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut complete = Vec::new();
    for kind in MIGRATION_ORDER {
        let crd_name = kind.crd_name();
        let crd = match crds.get_opt(&crd_name).await {
            Ok(Some(crd)) => crd,
            Ok(None) => {
                log.info(phase, format!("{crd_name}: not installed, skipped"));
                continue;
            }
            Err(e) => {
                log.error(phase, format!("{crd_name}: reading the CRD failed: {e}"));
                summary.per_crd.push((crd_name, 0, 1));
                summary.total_failure += 1;
                continue;
            }
        };
        if storage_version(&crd) != Some(HUB_VERSION) {
            log.error(phase, format!("{crd_name}: the CRD still stores {}; apply this release's CRDs first (docs/upgrade.md), then run this phase", storage_version(&crd).unwrap_or("nothing")));
            summary.per_crd.push((crd_name, 0, 1));
            summary.total_failure += 1;
            continue;
        }
        let api = scoped(
            client,
            args.namespace.as_deref(),
            &resource(kind, HUB_VERSION),
        );
        let objects = match api.list_metadata(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(e) => {
                log.error(phase, format!("{crd_name}: listing failed: {e}"));
                summary.per_crd.push((crd_name, 0, 1));
                summary.total_failure += 1;
                continue;
            }
        };
        if objects.is_empty() {
            log.info(phase, format!("{crd_name}: no objects"));
        }
        let (mut ok, mut failed) = (0, 0);
        let patch =
            json!({"metadata": {"annotations": {STORAGE_MIGRATED_AT_ANNOTATION: timestamp}}});
        for object in &objects {
            let name = object.metadata.name.clone().unwrap_or_default();
            let namespace = object.metadata.namespace.clone().unwrap_or_default();
            if args.dry_run {
                ok += 1;
                continue;
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &namespace, &resource(kind, HUB_VERSION));
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => ok += 1,
                Err(e) if is_status(&e, 404) => ok += 1, // deleted meanwhile: nothing to migrate
                Err(e) => {
                    log.error(phase, format!("{crd_name}: {namespace}/{name}: {e}"));
                    failed += 1;
                }
            }
        }
        log.info(
            phase,
            format!(
                "{crd_name}: {ok} {} rewritten as {HUB_VERSION}, {failed} failed",
                if args.dry_run { "would be" } else { "" }
            )
            .replace("  ", " "),
        );
        summary.per_crd.push((crd_name.clone(), ok, failed));
        summary.total_success += ok;
        summary.total_failure += failed;
        if failed == 0 {
            complete.push(crd);
        }
    }

    let prune = !args.dry_run && !args.keep_stored_versions && args.namespace.is_none();
    for crd in complete {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let stored = crd
            .status
            .as_ref()
            .and_then(|s| s.stored_versions.clone())
            .unwrap_or_default();
        if stored == [HUB_VERSION] {
            continue;
        }
        if !prune {
            log.info(
                phase,
                format!(
                    "{name}: storedVersions {stored:?} left as is{}",
                    if args.namespace.is_some() {
                        " (only one namespace was migrated)"
                    } else {
                        ""
                    }
                ),
            );
            continue;
        }
        let patch = json!({"status": {"storedVersions": [HUB_VERSION]}});
        match crds
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                log.info(
                    phase,
                    format!("{name}: storedVersions {stored:?} -> [\"{HUB_VERSION}\"]"),
                );
                summary.pruned.push(name);
            }
            Err(e) => {
                log.error(phase, format!("{name}: setting storedVersions failed (needs patch on customresourcedefinitions/status): {e}"));
                summary.total_failure += 1;
            }
        }
    }
    log.info(
        phase,
        format!(
            "summary: total_success={} total_failure={}",
            summary.total_success, summary.total_failure
        ),
    );
    summary
}

/// The timestamp migrate stamps, `YYYY-MM-DDTHH:MM:SSZ` in UTC.
pub fn timestamp_now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `cargo xtask migrate`.
pub fn run(args: &MigrateArgs) -> Result<(), crate::XtaskError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::XtaskError::Migrate(format!("cannot start a runtime: {e}")))?;
    runtime.block_on(async {
        let client = client(args.kubeconfig.as_deref()).await?;
        let mut log = Log::default();
        let phase = args.phase;
        log.info(
            phase,
            format!(
                "starting: dry_run={} namespace={}",
                args.dry_run,
                args.namespace.as_deref().unwrap_or("<all>")
            ),
        );
        let failed = match phase {
            Phase::Bootstrap => bootstrap(&client, args, &mut log).await?.errors > 0,
            Phase::Migrate => {
                migrate(&client, args, &timestamp_now(), &mut log)
                    .await
                    .total_failure
                    > 0
            }
        };
        if failed {
            Err(crate::XtaskError::Migrate(format!(
                "phase {} finished with errors (see above)",
                phase.name()
            )))
        } else {
            Ok(())
        }
    })
}

async fn client(kubeconfig: Option<&std::path::Path>) -> Result<Client, crate::XtaskError> {
    let error = |e: String| crate::XtaskError::Migrate(format!("cannot reach the cluster: {e}"));
    let config = match kubeconfig {
        Some(path) => {
            let file =
                kube::config::Kubeconfig::read_from(path).map_err(|e| error(e.to_string()))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|e| error(e.to_string()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| error(e.to_string()))?,
    };
    Client::try_from(config).map_err(|e| error(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, template: &str, warmpool: Option<&str>, bound: &str) -> ClaimFacts {
        ClaimFacts {
            namespace: "ns".into(),
            name: name.into(),
            template: template.into(),
            warmpool: warmpool.map(String::from),
            bound_sandbox: bound.into(),
        }
    }

    #[test]
    fn bootstrap_plans_shadow_pools_for_cold_start_claims_only() {
        let plan = plan_bootstrap(&[
            claim("cold", "t", Some("default"), ""),
            claim("cold-bound", "t", None, "cold-bound"),
            claim("none", "t2", Some("none"), "none"),
            claim("empty", "t3", Some(""), ""),
            claim("warm", "t4", Some("default"), "pool-abcde"),
            claim("specific", "t5", Some("pool"), ""),
            claim("no-template", "", Some("default"), ""),
        ]);
        assert_eq!(
            plan.shadow,
            BTreeSet::from([
                ("ns".to_owned(), "t".to_owned()),
                ("ns".to_owned(), "t2".to_owned()),
                ("ns".to_owned(), "t3".to_owned()),
            ]),
            "one pool per (namespace, template)"
        );
        assert_eq!(plan.warm_start_skipped, 1);
        assert_eq!(
            plan.specific,
            [("ns".to_owned(), "specific".to_owned(), "pool".to_owned())]
        );
        assert_eq!(plan.errors.len(), 1);
        assert!(plan.errors[0].contains("ns/no-template"));
    }

    #[test]
    fn shadow_pool_names_fit_a_label() {
        assert_eq!(shadow_pool_name("t").unwrap(), "shadow-pool-t");
        assert!(shadow_pool_name(&"x".repeat(51)).is_ok());
        let error = shadow_pool_name(&"x".repeat(52)).unwrap_err();
        assert!(error.contains("longer than 63"), "{error}");
    }

    #[test]
    fn shadow_pools_are_marked_and_empty() {
        let pool = shadow_pool("ns", "tmpl", "shadow-pool-tmpl");
        let value = serde_json::to_value(&pool).unwrap();
        assert_eq!(value["apiVersion"], "extensions.agents.x-k8s.io/v1alpha1");
        assert_eq!(
            value["spec"],
            json!({"replicas": 0, "sandboxTemplateRef": {"name": "tmpl"}})
        );
        assert_eq!(
            value["metadata"]["annotations"],
            json!({"agents.x-k8s.io/migration-shadow": "true",
                   "agents.x-k8s.io/migration-source-template": "tmpl"})
        );
    }

    #[test]
    fn the_timestamp_is_utc_seconds() {
        let stamp = timestamp_now();
        assert_eq!(stamp.len(), 20, "{stamp}");
        assert!(
            stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
            "{stamp}"
        );
    }
}
