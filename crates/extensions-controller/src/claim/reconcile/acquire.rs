//! Getting a Sandbox for an unbound claim: the warm path (ranked candidates, guarded
//! ownership transfer) and the cold path (a Sandbox named after the claim).

use super::*;

/// How long a pool wake waits for the Sandbox cache to show an adoption.
const ADOPTION_CACHE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often that wait looks at the cache.
const ADOPTION_CACHE_POLL: std::time::Duration = std::time::Duration::from_millis(20);

impl Pass<'_> {
    /// Tries the ranked warm candidates; the guarded patch decides races.
    pub(super) async fn adopt(
        &self,
        pool: &SandboxWarmPool,
        template: Option<&SandboxTemplate>,
        template_name: &str,
    ) -> Result<Adoption, Error> {
        let claim_state = &self.ctx.claim;
        let recreate = pool.spec.effective_update_strategy() == UpdateStrategyType::Recreate;
        // Under Recreate a member must be vetted against the template; without it, take none.
        if recreate && template.is_none() {
            return Ok(Adoption::NoCandidate);
        }
        let facts = template.filter(|_| recreate).map(|template| {
            crate::warm_pool::blueprint::TemplateFacts {
                blueprint_hash: crate::warm_pool::blueprint::blueprint_hash(
                    &template.spec.blueprint,
                ),
                template: Arc::new(template.clone()),
            }
        });
        let now = Instant::now();
        let skip = |sb: &Sandbox| {
            claim_state.is_reserved(
                &self.namespace,
                sb.metadata.name.as_deref().unwrap_or_default(),
                now,
            ) || facts
                .as_ref()
                .is_some_and(|f| is_stale(template_name, f, sb, true))
        };
        let pool_ref = PoolRef {
            namespace: &self.namespace,
            name: pool.metadata.name.as_deref().unwrap_or_default(),
            uid: pool.metadata.uid.as_deref(),
        };
        let stores = &self.ctx.stores;
        let select = tracing::info_span!(
            "selectCandidate",
            warmpool.name = pool_ref.name,
            candidates = tracing::field::Empty,
        );
        let ordered = select.in_scope(|| {
            choose(
                &stores.sandboxes,
                &stores.sandbox_index,
                &pool_ref,
                2 * MAX_ADOPTION_ATTEMPTS,
                &skip,
            )
        });
        select.record("candidates", ordered.len());
        let mut attempts = 0;
        for candidate in ordered {
            if attempts >= MAX_ADOPTION_ATTEMPTS {
                break;
            }
            let Some(sb_name) = candidate.metadata.name.clone() else {
                continue;
            };
            let key = format!("{}/{sb_name}", self.namespace);
            if !claim_state.reserve(&key, Instant::now()) {
                continue;
            }
            attempts += 1;
            let mut current = candidate;
            // One fresh re-read per candidate: a 409 from an unrelated write (e.g. the core
            // controller's status update) should not cost us the member.
            for fresh_read in [false, true] {
                let patch = match adoption_patch(
                    &current,
                    self.claim,
                    template,
                    template_name,
                    self.domains(),
                ) {
                    Ok(Some(p)) => p,
                    Ok(None) => break,
                    Err(e) => {
                        claim_state.release(&key);
                        return Ok(Adoption::Failed(metadata_failure(e)));
                    }
                };
                let write = tracing::info_span!(
                    "adoptSandbox",
                    sandbox.name = %sb_name,
                    attempt = attempts,
                    fresh_read,
                    error.reason = tracing::field::Empty,
                );
                let written = self
                    .sandboxes
                    .patch(&sb_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .instrument(write.clone())
                    .await;
                if let Err(e) = &written {
                    let reason = if is_conflict(e) {
                        "Conflict"
                    } else if is_not_found(e) {
                        "NotFound"
                    } else {
                        "APIError"
                    };
                    write.record("error.reason", reason);
                    if reason != "APIError" {
                        crate::claim::trace::count_adoption_conflict(&self.uid);
                    }
                }
                match written {
                    Ok(Lean(adopted)) => {
                        claim_state.own_writes.record(&adopted.metadata);
                        crate::claim::trace::mark_bound(&self.uid);
                        claim_state.bind(&self.uid, &sb_name);
                        self.adopted(pool, &current, &adopted);
                        return Ok(Adoption::Adopted(Arc::new(adopted)));
                    }
                    Err(e) if (is_conflict(&e) || is_not_found(&e)) && !fresh_read => {
                        match self.sandboxes.get_opt(&sb_name).await {
                            Ok(Some(Lean(fresh)))
                                if crate::claim::candidate::is_member(&fresh, &pool_ref) =>
                            {
                                current = Arc::new(fresh)
                            }
                            Ok(_) => break,
                            Err(e) => {
                                claim_state.release(&key);
                                return Err(Error::kube(format!("get Sandbox {key}"), e));
                            }
                        }
                    }
                    Err(e) if is_conflict(&e) || is_not_found(&e) => break,
                    Err(e) => {
                        claim_state.release(&key);
                        return Err(Error::kube(format!("adopt Sandbox {key}"), e));
                    }
                }
            }
            claim_state.release(&key);
        }
        let pending =
            has_pending_network(&stores.sandboxes, &stores.sandbox_index, &pool_ref, &skip);
        Ok(if pending {
            Adoption::PendingNetwork
        } else {
            Adoption::NoCandidate
        })
    }

    pub(super) fn adopted(&self, pool: &SandboxWarmPool, before: &Sandbox, adopted: &Sandbox) {
        if let Some(wake) = &self.ctx.claim.pool_wake {
            let pool_ref = kube::runtime::reflector::ObjectRef::from_obj(pool);
            let _ = wake.unbounded_send(pool_ref.clone());
            // The pool may reconcile from a Sandbox cache that has not seen the adoption yet and
            // count the taken member as its own; the adopted Sandbox's own event wakes no pool
            // (it is no longer a member). So wake the pool again once the cache shows the new
            // owner, bounded so a lost event cannot keep a task alive.
            let wake = wake.clone();
            let store = self.ctx.stores.sandboxes.clone();
            let key = kube::runtime::reflector::ObjectRef::from_obj(adopted);
            let adopted_rv = adopted.metadata.resource_version.clone();
            tokio::spawn(async move {
                let deadline = tokio::time::Instant::now() + ADOPTION_CACHE_WAIT;
                while tokio::time::Instant::now() < deadline {
                    let seen = store.get(&key).is_none_or(|cached| {
                        cached.metadata.resource_version == adopted_rv
                            || controlling_pool(&cached.metadata).is_none()
                    });
                    if seen {
                        break;
                    }
                    tokio::time::sleep(ADOPTION_CACHE_POLL).await;
                }
                let _ = wake.unbounded_send(pool_ref);
            });
        }
        let ready = before
            .status
            .as_ref()
            .is_some_and(|s| api_types::conditions::is_true(&s.conditions, READY));
        self.count_creation(
            adopted,
            SANDBOX_LAUNCH_TYPE_WARM,
            controlling_pool(&before.metadata)
                .map(|o| o.name.clone())
                .unwrap_or_else(|| "none".into()),
            if ready { "ready" } else { "not_ready" },
        );
        tracing::info!(sandbox = %format!("{}/{}", self.namespace, adopted.metadata.name.as_deref().unwrap_or_default()), "adopted warm pool Sandbox");
        // One API write per warm claim for news the claim's status already carries: opt-in.
        if !self.ctx.claim.settings.publishes_adoption_event() {
            return;
        }
        Context::event_detached(
            self.ctx.claim_recorder.as_ref(),
            self.claim,
            EventType::Normal,
            "SandboxAdopted",
            "Adoption",
            format!(
                "Adopted warm pool Sandbox {:?}",
                adopted.metadata.name.as_deref().unwrap_or_default()
            ),
        );
    }

    pub(super) fn count_creation(
        &self,
        sandbox: &Sandbox,
        launch_type: &str,
        pool: String,
        pod_condition: &str,
    ) {
        let template = sandbox
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SANDBOX_TEMPLATE_REF_ANNOTATION))
            .cloned()
            .unwrap_or_else(|| UNKNOWN_TEMPLATE.into());
        self.ctx
            .claim
            .metrics
            .claim_creation
            .get_or_create(&ClaimCreationLabels {
                namespace: self.namespace.clone(),
                sandbox_template: template,
                launch_type: launch_type.into(),
                warmpool_name: pool,
                pod_condition: pod_condition.into(),
                created_by: normalize_created_by(claim_created_by(self.claim)).into(),
            })
            .inc();
    }

    pub(super) async fn create_cold(
        &self,
        template: &SandboxTemplate,
        template_name: &str,
        pool_name: &str,
    ) -> Result<Binding, Error> {
        let sandbox = match build_cold_sandbox(self.claim, template, template_name, self.domains())
        {
            Ok(sb) => sb,
            Err(ColdError::VolumeClaimTemplates(e)) => {
                return Ok(Binding::Failed(Failure::VolumeClaimTemplates(e)));
            }
            Err(ColdError::Metadata(e)) => return Ok(Binding::Failed(metadata_failure(e))),
            Err(ColdError::Env(EnvError::Rejected(e))) => {
                return Ok(Binding::Failed(Failure::EnvRejected(e)));
            }
            Err(ColdError::Env(EnvError::Invalid(e))) => {
                return Ok(Binding::Failed(Failure::Reconciler(e)));
            }
            Err(e @ ColdError::Incomplete) => {
                return Ok(Binding::Failed(Failure::Reconciler(e.to_string())));
            }
        };
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        let write = tracing::info_span!(
            "createSandbox",
            sandbox.name = %self.name,
            sandbox.template = template_name,
            error.reason = tracing::field::Empty,
        );
        let created = self
            .sandboxes
            .create(&params, &Lean(sandbox))
            .instrument(write.clone())
            .await;
        if let Err(e) = &created {
            write.record(
                "error.reason",
                if is_already_exists(e) {
                    "AlreadyExists"
                } else {
                    "APIError"
                },
            );
        }
        match created {
            Ok(Lean(created)) => {
                self.ctx.claim.own_writes.record(&created.metadata);
                crate::claim::trace::mark_bound(&self.uid);
                self.ctx.claim.bind(&self.uid, &self.name);
                self.count_creation(&created, "cold", pool_name.to_owned(), "not_ready");
                Context::event(
                    self.ctx.claim_recorder.as_ref(),
                    self.claim,
                    EventType::Normal,
                    "SandboxProvisioned",
                    "Provisioning",
                    format!("Created Sandbox {:?}", self.name),
                )
                .await;
                Ok(Binding::Bound(Arc::new(created)))
            }
            Err(e) if is_already_exists(&e) => Ok(Binding::Failed(Failure::CreatePending)),
            Err(e) => Ok(Binding::Failed(Failure::Reconciler(format!(
                "sandbox create error: {e}"
            )))),
        }
    }
}

pub(super) enum Adoption {
    Adopted(Arc<Sandbox>),
    Failed(Failure),
    PendingNetwork,
    NoCandidate,
}
