//! Odd, generated input for every entry point: nothing may panic.

use serde_json::{Map, Value, json};

use super::*;

use super::test_gen::Gen;

impl Gen {
    /// A value shaped a bit like a Kubernetes object, with odd corners.
    fn value(&mut self, depth: u32) -> Value {
        const KEYS: &[&str] = &[
            "metadata",
            "spec",
            "status",
            "containers",
            "env",
            "name",
            "ports",
            "containerPort",
            "protocol",
            "finalizers",
            "labels",
            "conditions",
            "type",
            "value",
            "$patch",
            "$retainKeys",
            "$setElementOrder/containers",
            "$deleteFromPrimitiveList/finalizers",
            "managedFields",
            "selector",
            "",
            "~/",
        ];
        let choice = if depth == 0 {
            self.next() % 5
        } else {
            self.next() % 8
        };
        match choice {
            0 => Value::Null,
            1 => json!(self.next().is_multiple_of(3)),
            2 => json!(self.next() % 100),
            3 => json!(self.pick(&["a", "b", "TCP", "merge", "delete", "replace", ""])),
            4 => json!(-1.5),
            5 | 6 => {
                let mut map = Map::new();
                for _ in 0..(self.next() % 4) {
                    let key = self.pick(KEYS).to_string();
                    map.insert(key, self.value(depth - 1));
                }
                Value::Object(map)
            }
            _ => Value::Array(
                (0..(self.next() % 4))
                    .map(|_| self.value(depth - 1))
                    .collect(),
            ),
        }
    }

    fn pointer(&mut self) -> String {
        let mut p = String::new();
        for _ in 0..(self.next() % 4) {
            p.push('/');
            p.push_str(self.pick(&["metadata", "spec", "0", "-", "1", "x", "~0", "~1", "-1", ""]));
        }
        p
    }
}

#[test]
fn generated_input_never_panics() {
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    let pod = TypeMeta::new("v1", "Pod");
    let shape = builtin_shape(&pod);
    let crd_shape = |path: &[&str]| match path.last() {
        Some(&"finalizers") => Some(ListType::Set),
        Some(&"containers") => Some(ListType::Map(vec!["name".into()])),
        _ => None,
    };
    for _ in 0..5000 {
        let target = g.value(4);
        let patch = g.value(4);
        let _ = merge_patch(&target, &patch);
        let _ = merge_patch_request(&target, &patch);
        let _ = strategic_merge_patch(&target, &patch, &pod);

        let ops: Vec<Value> = (0..(g.next() % 4))
            .map(|_| {
                json!({
                    "op": g.pick(&["add", "remove", "replace", "move", "copy", "test", "x"]),
                    "path": g.pointer(),
                    "from": g.pointer(),
                    "value": g.value(2),
                })
            })
            .collect();
        let _ = json_patch(&target, &Value::Array(ops));

        let opts = ApplyOptions {
            manager: g.pick(&["a", "b", ""]).to_string(),
            force: g.next().is_multiple_of(2),
            subresource: (g.next().is_multiple_of(3)).then(|| "status".to_string()),
            now: "2026-01-01T00:00:00Z".to_string(),
            status_subresource: g.next().is_multiple_of(2),
        };
        let live = (!g.next().is_multiple_of(3)).then(|| target.clone());
        if let Ok(applied) = apply(live.as_ref(), &patch, &opts, &shape) {
            let _ = apply(Some(&applied), &g.value(4), &opts, &crd_shape);
        }
        let mut new = patch.clone();
        record_update(live.as_ref(), &mut new, "m", "Update", None, "t", &shape);
        let mut again = g.value(4);
        record_update(
            Some(&new),
            &mut again,
            "n",
            "Update",
            Some("status"),
            "t",
            &crd_shape,
        );
    }
}
