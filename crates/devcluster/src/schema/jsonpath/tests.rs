//! JSONPath evaluation and rendering.
use serde_json::json;

use super::*;

fn pod() -> Value {
    json!({
        "metadata": {"name": "p", "annotations": {"example.com/team": "a", "x.y": "dotted"}},
        "spec": {"containers": [
            {"name": "app", "image": "nginx", "ports": [{"containerPort": 80}]},
            {"name": "side", "image": "envoy", "ports": [{"containerPort": 9000}, {"containerPort": 9001}]}
        ]},
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
            ],
            "replicas": 3,
            "ratio": 1.5
        }
    })
}

#[test]
fn dotted_paths_with_and_without_braces_or_dollar() {
    let p = pod();
    for expr in [
        ".metadata.name",
        "{.metadata.name}",
        "$.metadata.name",
        "{$.metadata.name}",
        "metadata.name",
    ] {
        assert_eq!(eval(expr, &p).unwrap(), vec![json!("p")], "{expr}");
    }
    assert_eq!(
        eval(".metadata.missing.deeper", &p).unwrap(),
        Vec::<Value>::new()
    );
}

#[test]
fn quoted_keys_and_escaped_dots_reach_odd_field_names() {
    let p = pod();
    assert_eq!(
        eval(".metadata.annotations['example.com/team']", &p).unwrap(),
        vec![json!("a")]
    );
    assert_eq!(
        eval(r#"{.metadata.annotations["x.y"]}"#, &p).unwrap(),
        vec![json!("dotted")]
    );
    assert_eq!(
        eval(r"{.metadata.annotations.x\.y}", &p).unwrap(),
        vec![json!("dotted")]
    );
}

#[test]
fn indexes_slices_and_wildcards() {
    let p = pod();
    assert_eq!(
        eval(".spec.containers[0].name", &p).unwrap(),
        vec![json!("app")]
    );
    assert_eq!(
        eval(".spec.containers[-1].name", &p).unwrap(),
        vec![json!("side")]
    );
    assert_eq!(
        eval(".spec.containers[5].name", &p).unwrap(),
        Vec::<Value>::new()
    );
    assert_eq!(
        eval(".spec.containers[*].name", &p).unwrap(),
        vec![json!("app"), json!("side")]
    );
    assert_eq!(
        eval(".spec.containers[0:1].image", &p).unwrap(),
        vec![json!("nginx")]
    );
    assert_eq!(
        eval(".spec.containers[*].ports[*].containerPort", &p).unwrap(),
        vec![json!(80), json!(9000), json!(9001)]
    );
    assert_eq!(
        eval(".spec.containers[0,1].name", &p).unwrap(),
        vec![json!("app"), json!("side")]
    );
}

#[test]
fn filters_select_list_items() {
    let p = pod();
    assert_eq!(
        eval(".status.conditions[?(@.type=='Ready')].status", &p).unwrap(),
        vec![json!("False")]
    );
    assert_eq!(
        eval(r#".status.conditions[?(@.type == "Ready")].reason"#, &p).unwrap(),
        vec![json!("ContainersNotReady")]
    );
    assert_eq!(
        eval(".status.conditions[?(@.type!='Ready')].type", &p).unwrap(),
        vec![json!("PodScheduled")]
    );
    assert_eq!(
        eval(".status.conditions[?(@.reason)].type", &p).unwrap(),
        vec![json!("Ready")]
    );
    assert_eq!(
        eval(
            ".spec.containers[?(@.ports[0].containerPort > 100)].name",
            &p
        )
        .unwrap(),
        vec![json!("side")]
    );
    assert_eq!(
        eval(".status.conditions[?(@.type=='Missing')].status", &p).unwrap(),
        Vec::<Value>::new()
    );
}

#[test]
fn recursive_descent_finds_every_match() {
    let p = pod();
    assert_eq!(
        eval("..containerPort", &p).unwrap(),
        vec![json!(80), json!(9000), json!(9001)]
    );
    assert_eq!(
        eval("{..image}", &p).unwrap(),
        vec![json!("nginx"), json!("envoy")]
    );
}

#[test]
fn templates_render_text_values_and_ranges() {
    let p = pod();
    assert_eq!(render("{.metadata.name}", &p).unwrap(), "p");
    assert_eq!(
        render(
            "name={.metadata.name} replicas={.status.replicas} ratio={.status.ratio}",
            &p
        )
        .unwrap(),
        "name=p replicas=3 ratio=1.5"
    );
    assert_eq!(
        render("{.spec.containers[*].name}", &p).unwrap(),
        "app side"
    );
    assert_eq!(
        render(
            r#"{range .spec.containers[*]}{.name}:{.image}{"\n"}{end}"#,
            &p
        )
        .unwrap(),
        "app:nginx\nside:envoy\n"
    );
    assert_eq!(
        render("{.spec.containers[0].ports}", &p).unwrap(),
        r#"[{"containerPort":80}]"#
    );
}

#[test]
fn malformed_expressions_are_errors_not_panics() {
    let p = pod();
    for bad in [
        "{.metadata.name",
        ".spec.containers[",
        ".spec.containers[abc]",
        ".status.conditions[?(@.type=='Ready']",
        "{range .items[*]}{.x}",
        "{end}",
        ".a['unterminated]",
        ".status.conditions[?(@.type==bogus)]",
        "[1:2:3:4]",
        ".é[",
        "..",
        "{}",
    ] {
        let _ = eval(bad, &p);
        let _ = render(bad, &p);
    }
    assert!(eval("{.metadata.name", &p).is_err());
    assert!(eval(".spec.containers[abc]", &p).is_err());
    assert!(eval("{range .items[*]}{.x}", &p).is_err());
}
