//! Pointing a CRD's conversion webhook at this controller: the Service, the `/convert` path and
//! the CA bundle (managed certificates only).
//!
//! [`plan`] is pure: from the CRD as it is, the merge patch that makes it right, or why it is
//! left alone. Only the CRDs of the kinds this controller converts are ever looked at, so core
//! and extensions never touch each other's (the reference patches all four from one binary).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

/// Where the API server must send a CRD's conversion reviews.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub service: String,
    pub namespace: String,
    pub path: String,
    /// The CA bundle (PEM) that verifies the serving certificate.
    pub ca_pem: String,
}

/// What to do with one CRD.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Already right.
    Nothing,
    /// Send this JSON merge patch.
    Patch(Value),
    /// Left alone: its conversion strategy is not `Webhook` (e.g. `None` during a rollback).
    NotWebhook,
}

/// The default `conversionReviewVersions` written when a CRD has none.
pub const REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// What must change on `crd` for its conversion webhook to reach `target`.
pub fn plan(crd: &CustomResourceDefinition, target: &Target) -> Plan {
    let Some(conversion) = crd.spec.conversion.as_ref() else {
        return Plan::NotWebhook;
    };
    if conversion.strategy != "Webhook" {
        return Plan::NotWebhook;
    }
    let webhook = conversion.webhook.clone().unwrap_or_default();
    let config = webhook.client_config.clone().unwrap_or_default();
    let service = config.service.clone().unwrap_or_default();
    let current_ca = config
        .ca_bundle
        .as_ref()
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default();

    let mut patch = serde_json::Map::new();
    let mut client_config = serde_json::Map::new();
    if service.name != target.service
        || service.namespace != target.namespace
        || service.path.as_deref() != Some(target.path.as_str())
    {
        client_config.insert(
            "service".into(),
            json!({"name": target.service, "namespace": target.namespace, "path": target.path}),
        );
    }
    if config.url.is_some() {
        // `url` and `service` are exclusive.
        client_config.insert("url".into(), Value::Null);
    }
    if current_ca != target.ca_pem {
        use base64::Engine as _;
        client_config.insert(
            "caBundle".into(),
            json!(base64::engine::general_purpose::STANDARD.encode(&target.ca_pem)),
        );
    }
    if !client_config.is_empty() {
        patch.insert("clientConfig".into(), Value::Object(client_config));
    }
    if webhook.conversion_review_versions.is_empty() {
        patch.insert("conversionReviewVersions".into(), json!(REVIEW_VERSIONS));
    }
    if patch.is_empty() {
        Plan::Nothing
    } else {
        Plan::Patch(json!({"spec": {"conversion": {"webhook": patch}}}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceConversion, ServiceReference, WebhookClientConfig, WebhookConversion,
    };

    fn target() -> Target {
        Target {
            service: "new-service".into(),
            namespace: "new-namespace".into(),
            path: "/convert".into(),
            ca_pem: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
        }
    }

    fn crd(strategy: &str, config: Option<WebhookClientConfig>) -> CustomResourceDefinition {
        let mut crd = CustomResourceDefinition::default();
        crd.spec.conversion = Some(CustomResourceConversion {
            strategy: strategy.into(),
            webhook: (strategy == "Webhook").then(|| WebhookConversion {
                conversion_review_versions: vec!["v1".into(), "v1beta1".into()],
                client_config: config,
            }),
        });
        crd
    }

    fn shipped() -> WebhookClientConfig {
        WebhookClientConfig {
            service: Some(ServiceReference {
                name: "agent-sandbox-webhook-service".into(),
                namespace: "agent-sandbox-system".into(),
                path: Some("/convert".into()),
                port: None,
            }),
            ..WebhookClientConfig::default()
        }
    }

    /// Applies a JSON merge patch the way the API server does.
    fn patched(crd: &CustomResourceDefinition, plan: &Plan) -> CustomResourceDefinition {
        let Plan::Patch(patch) = plan else {
            return crd.clone();
        };
        let mut value = serde_json::to_value(crd).unwrap();
        json_patch::merge(&mut value, patch);
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn item_16_a_webhook_crd_gets_the_service_path_and_ca_bundle() {
        let crd = crd("Webhook", Some(shipped()));
        let plan = plan(&crd, &target());
        let after = patched(&crd, &plan);
        let config = after
            .spec
            .conversion
            .unwrap()
            .webhook
            .unwrap()
            .client_config
            .unwrap();
        let service = config.service.unwrap();
        assert_eq!(
            (service.name.as_str(), service.namespace.as_str()),
            ("new-service", "new-namespace")
        );
        assert_eq!(service.path.as_deref(), Some("/convert"));
        assert_eq!(
            config.ca_bundle,
            Some(ByteString(target().ca_pem.into_bytes()))
        );
    }

    #[test]
    fn item_16_a_crd_with_conversion_none_is_left_without_a_webhook() {
        assert_eq!(plan(&crd("None", None), &target()), Plan::NotWebhook);
        assert_eq!(
            plan(&CustomResourceDefinition::default(), &target()),
            Plan::NotWebhook
        );
    }

    #[test]
    fn a_crd_that_is_already_right_needs_no_write() {
        let crd = crd("Webhook", Some(shipped()));
        let after = patched(&crd, &plan(&crd, &target()));
        assert_eq!(plan(&after, &target()), Plan::Nothing);
    }

    #[test]
    fn only_the_ca_bundle_changes_when_only_the_ca_changed() {
        let crd = crd("Webhook", Some(shipped()));
        let after = patched(&crd, &plan(&crd, &target()));
        let rotated = Target {
            ca_pem: "other".into(),
            ..target()
        };
        let Plan::Patch(patch) = plan(&after, &rotated) else {
            panic!("a new CA must be written");
        };
        assert_eq!(
            patch,
            json!({"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": "b3RoZXI="}}}}})
        );
    }

    #[test]
    fn a_url_is_replaced_by_the_service_and_missing_review_versions_are_filled_in() {
        let mut crd = crd(
            "Webhook",
            Some(WebhookClientConfig {
                url: Some("https://example.invalid/convert".into()),
                ..WebhookClientConfig::default()
            }),
        );
        crd.spec
            .conversion
            .as_mut()
            .unwrap()
            .webhook
            .as_mut()
            .unwrap()
            .conversion_review_versions
            .clear();
        let after = patched(&crd, &plan(&crd, &target()));
        let webhook = after.spec.conversion.unwrap().webhook.unwrap();
        assert_eq!(webhook.conversion_review_versions, ["v1", "v1beta1"]);
        let config = webhook.client_config.unwrap();
        assert_eq!(config.url, None);
        assert_eq!(config.service.unwrap().name, "new-service");
    }
}
