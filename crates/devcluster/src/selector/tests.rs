use std::collections::BTreeMap;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sel(s: &str) -> LabelSelector {
    LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
}

#[test]
fn empty_selector_matches_everything() {
    assert!(sel("").matches(&labels(&[])));
    assert!(sel("   ").matches(&labels(&[("a", "b")])));
    assert!(sel("").is_empty());
}

#[test]
fn equality_operators() {
    let l = labels(&[("app", "web"), ("tier", "front")]);
    assert!(sel("app=web").matches(&l));
    assert!(sel("app==web").matches(&l));
    assert!(!sel("app=db").matches(&l));
    assert!(sel("app!=db").matches(&l));
    assert!(!sel("app!=web").matches(&l));
    // != matches objects without the label, as on a real server
    assert!(sel("missing!=x").matches(&l));
    assert!(!sel("missing=x").matches(&l));
    assert!(sel("app=web,tier=front").matches(&l));
    assert!(!sel("app=web,tier=back").matches(&l));
}

#[test]
fn set_based_operators() {
    let l = labels(&[("env", "prod")]);
    assert!(sel("env in (prod,staging)").matches(&l));
    assert!(sel("env in(prod)").matches(&l));
    assert!(!sel("env in (dev)").matches(&l));
    assert!(sel("env notin (dev,qa)").matches(&l));
    assert!(!sel("env notin (prod)").matches(&l));
    assert!(sel("other notin (prod)").matches(&l));
    assert!(!sel("other in (prod)").matches(&l));
    assert!(sel("env").matches(&l));
    assert!(!sel("other").matches(&l));
    assert!(sel("!other").matches(&l));
    assert!(sel("! other").matches(&l));
    assert!(!sel("!env").matches(&l));
}

#[test]
fn whitespace_between_tokens_is_ignored() {
    let l = labels(&[("a", "1"), ("b", "2")]);
    assert!(sel(" a = 1 , b in ( 2 , 3 ) ").matches(&l));
    assert!(sel("a == 1,  !c").matches(&l));
}

#[test]
fn empty_values() {
    assert!(sel("a=").matches(&labels(&[("a", "")])));
    assert!(!sel("a=").matches(&labels(&[("a", "x")])));
    assert!(sel("a in (x,)").matches(&labels(&[("a", "")])));
    assert!(sel("a=in").matches(&labels(&[("a", "in")])));
    assert!(sel("a in (notin)").matches(&labels(&[("a", "notin")])));
}

#[test]
fn qualified_keys() {
    let l = labels(&[("agents.x-k8s.io/sandbox-name", "s1")]);
    assert!(sel("agents.x-k8s.io/sandbox-name=s1").matches(&l));
    assert!(sel("agents.x-k8s.io/sandbox-name in (s1, s2)").matches(&l));
}

#[test]
fn numeric_comparisons() {
    let l = labels(&[("n", "5")]);
    assert!(sel("n>4").matches(&l));
    assert!(!sel("n>5").matches(&l));
    assert!(sel("n<6").matches(&l));
    assert!(!sel("x<6").matches(&l));
    assert!(!sel("n<6").matches(&labels(&[("n", "abc")])));
    assert!(LabelSelector::parse("n>abc").is_err());
}

#[test]
fn rejects_bad_syntax_with_a_message() {
    for bad in [
        "a=b,",
        ",a",
        "a in",
        "a in (",
        "a in (b",
        "a in ()",
        "a b",
        "=b",
        "a=b=c",
        "a!",
        "a in (b c)",
        "(a)",
        "a notin b",
    ] {
        let err = LabelSelector::parse(bad).expect_err(bad);
        assert!(!err.to_string().is_empty(), "{bad}");
    }
}

#[test]
fn rejects_invalid_keys_and_values() {
    let err = LabelSelector::parse("-a=b").unwrap_err();
    assert!(
        err.to_string().starts_with("unable to parse requirement: "),
        "{err}"
    );
    assert!(err.to_string().contains("\"-a\""), "{err}");
    for bad in [
        "a/b/c=d",
        "/a=b",
        "Upper.Case/a=b",
        "a=-b",
        "a=b c",
        "a in (ok, -bad)",
    ] {
        assert!(
            LabelSelector::parse(bad).is_err(),
            "{bad} should be rejected"
        );
    }
    let long = "x".repeat(64);
    assert!(LabelSelector::parse(&format!("{long}=a")).is_err());
    assert!(LabelSelector::parse(&format!("a={long}")).is_err());
    assert!(LabelSelector::parse(&format!("a={}", "x".repeat(63))).is_ok());
    assert!(LabelSelector::parse("example.com/My_Name.1=Val-1.x_y").is_ok());
}

#[test]
fn messages_match_apimachinery() {
    assert_eq!(
        LabelSelector::parse("a=-b").unwrap_err().to_string(),
        "unable to parse requirement: values[0][a]: Invalid value: \"-b\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
    );
    assert_eq!(
        LabelSelector::parse("a in (b").unwrap_err().to_string(),
        "unable to parse requirement: found '', expected: ',' or ')'"
    );
    assert_eq!(
        LabelSelector::parse("a=b x").unwrap_err().to_string(),
        "found 'x', expected: ',' or 'end of string'"
    );
}

#[test]
fn empty_set_message_matches_apimachinery() {
    let err = LabelSelector::parse("a in ()").unwrap_err();
    assert!(
        err.to_string().contains("values set can't be empty"),
        "{err}"
    );
}

#[test]
fn from_label_selector_objects() {
    let l = labels(&[("app", "web"), ("tier", "front")]);
    let s = LabelSelector::from_object(&serde_json::json!({
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]},
                             {"key": "gone", "operator": "DoesNotExist"}]
    }))
    .unwrap();
    assert!(s.matches(&l));
    assert_eq!(s.to_string(), "app=web,!gone,tier in (back,front)");
    assert!(
        LabelSelector::from_object(&serde_json::json!({}))
            .unwrap()
            .matches(&l)
    );
    assert!(
        !LabelSelector::from_object(&serde_json::json!(null))
            .unwrap()
            .matches(&l)
    );
    let err = LabelSelector::from_object(
        &serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Near"}]}),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "\"Near\" is not a valid label selector operator"
    );
    assert!(
        LabelSelector::from_object(
            &serde_json::json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})
        )
        .is_err()
    );
    assert!(
        LabelSelector::from_object(
            &serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]})
        )
        .is_err()
    );
    assert!(LabelSelector::from_object(&serde_json::json!({"matchLabels": {"a": "-x"}})).is_err());
}

#[test]
fn display_round_trips() {
    let s = sel("b in (y,x),a,!c,d!=1");
    assert_eq!(s.to_string(), "a,b in (x,y),!c,d!=1");
    assert_eq!(LabelSelector::parse(&s.to_string()).unwrap(), s);
}

#[test]
fn odd_input_never_panics() {
    for s in [
        "\u{0}",
        "é=ü",
        "a=é",
        "!!",
        "!=",
        "==",
        "in",
        "notin",
        "in (a)",
        ")",
        "((",
        "a in ((b))",
        ",,,",
        "a,,b",
        "\\",
        "a=\"b\"",
        "🦀=1",
        "a=🦀",
    ] {
        let _ = LabelSelector::parse(s);
        let _ = FieldSelector::parse(s);
    }
}

fn field_value<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn field_selectors_match() {
    let pod = [
        ("metadata.name", "p1"),
        ("metadata.namespace", "default"),
        ("status.phase", "Running"),
    ];
    let f = FieldSelector::parse("metadata.name=p1,status.phase!=Pending").unwrap();
    assert_eq!(f.field_names(), vec!["metadata.name", "status.phase"]);
    assert!(f.matches(field_value(&pod)));
    assert!(
        FieldSelector::parse("metadata.name==p1")
            .unwrap()
            .matches(field_value(&pod))
    );
    assert!(
        !FieldSelector::parse("metadata.name=p2")
            .unwrap()
            .matches(field_value(&pod))
    );
    // a missing field compares as ""
    assert!(
        FieldSelector::parse("spec.nodeName=")
            .unwrap()
            .matches(field_value(&pod))
    );
    assert!(
        !FieldSelector::parse("spec.nodeName!=")
            .unwrap()
            .matches(field_value(&pod))
    );
    assert!(FieldSelector::parse("").unwrap().is_empty());
    assert!(FieldSelector::parse("a=b,,").unwrap().requirements().len() == 1);
}

#[test]
fn field_selector_escapes() {
    let f = FieldSelector::parse(r"metadata.name=a\,b\=c\\d,x!=y").unwrap();
    assert_eq!(f.requirements()[0].value, r"a,b=c\d");
    // bare , or = in a value (after the first operator) is an error, as in apimachinery
    assert_eq!(
        FieldSelector::parse("metadata.name=a=b")
            .unwrap_err()
            .to_string(),
        "invalid field selector: unescaped character in value: 61"
    );
    // the field name is not unescaped: the first operator splits
    let g = FieldSelector::parse(r"a\!=b").unwrap();
    assert_eq!(g.requirements()[0].field, r"a\");
    assert_eq!(g.requirements()[0].operator, FieldOperator::NotEquals);
    assert_eq!(f.requirements()[1].operator, FieldOperator::NotEquals);
    assert!(matches!(
        FieldSelector::parse(r"a=b\n"),
        Err(SelectorError::FieldEscape(_))
    ));
    assert!(FieldSelector::parse(r"a=b\").is_err());
}

#[test]
fn field_selector_without_operator_is_rejected() {
    let err = FieldSelector::parse("metadata.name").unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
    );
}

#[test]
fn generated_selector_strings_never_panic() {
    let pieces = [
        "a", "b/c", "x.io/y", "=", "==", "!=", "!", "in", "notin", "(", ")", ",", " ", ">", "<",
        "1", "-", "\\", "\\,", "é", "",
    ];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..5000 {
        let mut s = String::new();
        for _ in 0..(state % 8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            s.push_str(pieces[(state % pieces.len() as u64) as usize]);
        }
        if let Ok(selector) = LabelSelector::parse(&s) {
            // what parses prints back to something that parses to the same selector
            let printed = selector.to_string();
            assert_eq!(
                LabelSelector::parse(&printed).ok(),
                Some(selector),
                "{s:?} -> {printed:?}"
            );
        }
        let _ = FieldSelector::parse(&s);
    }
}
