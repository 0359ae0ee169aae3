use serde_json::{Value, json};

use super::*;
use crate::webhook::{Conversions, ConvertibleKind};

/// Converts `example.com` `Widget`s between v1 and v2 by rewriting `apiVersion` and recording
/// the hop in `spec.via`; `spec.fail` makes it fail, `spec.panic` makes it panic.
fn widgets() -> Conversions {
    Conversions::new(
        vec![ConvertibleKind::new(
            "example.com",
            "Widget",
            "widgets.example.com",
            &["v2", "v1"],
        )],
        |object: &Value, desired: &str| {
            if object.pointer("/spec/fail").is_some() {
                return Err("spec.fail is set".into());
            }
            if object.pointer("/spec/panic").is_some() {
                panic!("converter bug");
            }
            let mut out = object.clone();
            out["apiVersion"] = json!(desired);
            out["spec"]["via"] = json!(object["apiVersion"]);
            Ok(out)
        },
    )
}

fn widget(version: &str, name: &str) -> Value {
    json!({"apiVersion": format!("example.com/{version}"), "kind": "Widget",
           "metadata": {"name": name, "namespace": "ns"}, "spec": {}})
}

fn review(desired: &str, objects: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                    "desiredAPIVersion": desired, "objects": objects},
    }))
    .unwrap()
}

fn message(answer: &Answer) -> String {
    answer.review["response"]["result"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_review_is_answered_in_order_with_the_request_uid() {
    let answer = handle(
        &review(
            "example.com/v2",
            vec![widget("v1", "a"), widget("v2", "b"), widget("v1", "c")],
        ),
        &widgets(),
    );
    assert_eq!(answer.status, StatusCode::OK);
    assert!(answer.succeeded(), "{}", answer.review);
    let response = &answer.review["response"];
    assert_eq!(answer.review["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(answer.review["kind"], "ConversionReview");
    assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    let objects = response["convertedObjects"].as_array().unwrap();
    let names: Vec<_> = objects
        .iter()
        .map(|o| o["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("a"), json!("b"), json!("c")]);
    assert_eq!(objects[0]["apiVersion"], "example.com/v2");
    assert_eq!(objects[0]["spec"]["via"], "example.com/v1");
    assert_eq!(
        objects[1],
        widget("v2", "b"),
        "already in the desired version: as is"
    );
}

#[test]
fn a_v1beta1_review_is_answered_as_v1beta1() {
    let mut body: Value = serde_json::from_slice(&review("example.com/v1", vec![])).unwrap();
    body["apiVersion"] = json!("apiextensions.k8s.io/v1beta1");
    let answer = handle(&serde_json::to_vec(&body).unwrap(), &widgets());
    assert!(answer.succeeded());
    assert_eq!(answer.review["apiVersion"], "apiextensions.k8s.io/v1beta1");
    assert_eq!(answer.review["response"]["convertedObjects"], json!([]));
}

#[test]
fn one_failing_object_fails_the_whole_review_naming_it() {
    let mut bad = widget("v1", "broken");
    bad["spec"]["fail"] = json!(true);
    let answer = handle(
        &review("example.com/v2", vec![widget("v1", "a"), bad]),
        &widgets(),
    );
    assert_eq!(answer.status, StatusCode::OK);
    assert!(!answer.succeeded());
    assert_eq!(answer.review["response"]["result"]["status"], "Failure");
    assert_eq!(answer.review["response"]["convertedObjects"], json!([]));
    assert_eq!(
        message(&answer),
        "converting Widget ns/broken from example.com/v1 to example.com/v2: spec.fail is set"
    );
}

#[test]
fn a_panicking_converter_is_a_failure_not_a_crash() {
    let mut bad = widget("v1", "boom");
    bad["spec"]["panic"] = json!(true);
    let answer = handle(&review("example.com/v2", vec![bad]), &widgets());
    assert!(!answer.succeeded());
    assert!(
        message(&answer).contains("panicked"),
        "{}",
        message(&answer)
    );
}

#[test]
fn mixed_kinds_are_refused() {
    let mut gadget = widget("v1", "g");
    gadget["kind"] = json!("Gadget");
    let answer = handle(
        &review("example.com/v2", vec![widget("v1", "a"), gadget]),
        &widgets(),
    );
    assert!(!answer.succeeded());
    assert!(
        message(&answer).starts_with(
            "mixed kinds in one ConversionReview: Widget.example.com and Gadget.example.com"
        ),
        "{}",
        message(&answer)
    );
}

#[test]
fn kinds_and_versions_this_webhook_does_not_serve_are_refused() {
    let mut pod = widget("v1", "p");
    pod["apiVersion"] = json!("v1");
    pod["kind"] = json!("Pod");
    let answer = handle(&review("v1", vec![pod]), &widgets());
    assert_eq!(
        message(&answer),
        "this webhook does not convert Pod.; it converts Widget.example.com (v2, v1)"
    );

    let answer = handle(
        &review("example.com/v3", vec![widget("v1", "a")]),
        &widgets(),
    );
    assert_eq!(
        message(&answer),
        "desiredAPIVersion \"example.com/v3\" is not a version of Widget.example.com; served: example.com/v2, example.com/v1"
    );
    let answer = handle(&review("other.io/v2", vec![widget("v1", "a")]), &widgets());
    assert!(message(&answer).starts_with("desiredAPIVersion \"other.io/v2\""));

    let answer = handle(
        &review("example.com/v2", vec![widget("v0", "old")]),
        &widgets(),
    );
    assert_eq!(
        message(&answer),
        "cannot convert Widget ns/old from example.com/v0: not a served version"
    );
}

#[test]
fn garbage_gets_a_400_with_a_review_that_says_why() {
    let cases: [(&[u8], &str); 7] = [
        (b"{not json", "the request body is not a JSON ConversionReview"),
        (b"[]", "unsupported ConversionReview apiVersion \"\""),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x"}}"#,
            "unsupported ConversionReview apiVersion \"admission.k8s.io/v1\"",
        ),
        (
            br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"Pod"}"#,
            "expected kind \"ConversionReview\", got \"Pod\"",
        ),
        (
            br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}"#,
            "the ConversionReview has no request",
        ),
        (
            br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"desiredAPIVersion":"example.com/v1"}}"#,
            "the ConversionReview request has no uid",
        ),
        (b"", "the request body is not a JSON ConversionReview"),
    ];
    for (body, expected) in cases {
        let answer = handle(body, &widgets());
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{expected}");
        assert_eq!(answer.review["kind"], "ConversionReview");
        assert_eq!(answer.review["response"]["result"]["status"], "Failure");
        assert!(
            message(&answer).starts_with(expected),
            "{} does not start with {expected}",
            message(&answer)
        );
    }
}

#[test]
fn malformed_requests_with_a_uid_fail_with_200_and_the_uid() {
    let cases = [
        (
            json!({"uid": "u"}),
            "the ConversionReview request has no desiredAPIVersion",
        ),
        (
            json!({"uid": "u", "desiredAPIVersion": "example.com/v2", "objects": {"a": 1}}),
            "request.objects must be a list",
        ),
        (
            json!({"uid": "u", "desiredAPIVersion": "example.com/v2", "objects": [42]}),
            "request.objects[0] is not an object with an apiVersion and a kind",
        ),
    ];
    for (request, expected) in cases {
        let body = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                          "request": request});
        let answer = handle(&serde_json::to_vec(&body).unwrap(), &widgets());
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.review["response"]["uid"], "u");
        assert_eq!(message(&answer), expected);
    }
}
