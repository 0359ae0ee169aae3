//! Helm templates made from release objects by punching holes into them.
//!
//! A piece of `deploy/` is parsed into a YAML value; the chart generator replaces some of its
//! values with *holes* (a scalar expression, a block that may render nothing, extra list
//! items), serializes the value, and swaps each hole's marker for its template text. Everything
//! that is not a hole is the release object itself, so the chart and the manifests cannot
//! drift: with default values each hole renders what it replaced (tests/chart.rs checks that
//! with the real `helm`).

use serde_yaml::{Mapping, Value};

use crate::chart::ChartError;

/// What a hole renders, given the indentation (in spaces) of the line it replaces.
type Render = Box<dyn Fn(usize) -> String>;

enum Hole {
    /// A scalar value: the marker is replaced by the text, in place.
    Scalar(String),
    /// A whole `key: value` line (and the block below it).
    Block(Render),
    /// One list item line (`- marker`): replaced by any number of items.
    Item(Render),
}

/// A YAML document with holes.
pub struct Holed {
    value: Value,
    holes: Vec<Hole>,
}

/// One step of a path into a YAML value.
#[derive(Debug, Clone, Copy)]
pub enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

pub use Step::{Index, Key};

fn describe(path: &[Step<'_>]) -> String {
    path.iter()
        .map(|step| match step {
            Key(key) => format!(".{key}"),
            Index(index) => format!("[{index}]"),
        })
        .collect()
}

impl Holed {
    pub fn new(value: Value) -> Self {
        Holed {
            value,
            holes: Vec::new(),
        }
    }

    /// The value at `path`.
    pub fn get(&self, path: &[Step<'_>]) -> Option<&Value> {
        let mut current = &self.value;
        for step in path {
            current = match step {
                Key(key) => current.as_mapping()?.get(*key)?,
                Index(index) => current.as_sequence()?.get(*index)?,
            };
        }
        Some(current)
    }

    fn get_mut(&mut self, path: &[Step<'_>]) -> Result<&mut Value, ChartError> {
        let mut current = &mut self.value;
        for step in path {
            current = match step {
                Key(key) => current.as_mapping_mut().and_then(|m| m.get_mut(*key)),
                Index(index) => current.as_sequence_mut().and_then(|s| s.get_mut(*index)),
            }
            .ok_or_else(|| ChartError::Generate(format!("no {} in the piece", describe(path))))?;
        }
        Ok(current)
    }

    fn mapping_mut(&mut self, path: &[Step<'_>]) -> Result<&mut Mapping, ChartError> {
        let description = describe(path);
        self.get_mut(path)?
            .as_mapping_mut()
            .ok_or_else(|| ChartError::Generate(format!("{description} is not a mapping")))
    }

    /// The marker of the next hole (the `-E` ends it, so hole 1 never matches hole 10's).
    fn marker(&self, kind: &str) -> String {
        format!("HOLE-{kind}-{}-E", self.holes.len())
    }

    /// Replaces the value at `path` with the template expression `text` (e.g.
    /// `{{ .Values.x }}`). Returns the value that was there.
    pub fn scalar(
        &mut self,
        path: &[Step<'_>],
        text: impl Into<String>,
    ) -> Result<Value, ChartError> {
        let marker = self.marker("S");
        let slot = self.get_mut(path)?;
        let old = std::mem::replace(slot, Value::String(marker));
        self.holes.push(Hole::Scalar(text.into()));
        Ok(old)
    }

    /// Replaces the entry `key` of the mapping at `path` (keeping its position) with a block,
    /// or appends the block when `key` is absent. Returns the replaced value, if any.
    pub fn block(
        &mut self,
        path: &[Step<'_>],
        key: &str,
        render: impl Fn(usize) -> String + 'static,
    ) -> Result<Option<Value>, ChartError> {
        let marker = self.marker("B");
        let mapping = self.mapping_mut(path)?;
        let mut old = None;
        let mut rebuilt = Mapping::new();
        for (k, v) in std::mem::take(mapping) {
            if k.as_str() == Some(key) {
                old = Some(v);
                rebuilt.insert(Value::String(marker.clone()), Value::Null);
            } else {
                rebuilt.insert(k, v);
            }
        }
        if old.is_none() {
            rebuilt.insert(Value::String(marker), Value::Null);
        }
        *mapping = rebuilt;
        self.holes.push(Hole::Block(Box::new(render)));
        Ok(old)
    }

    /// Appends a hole to the list at `path` that renders zero or more items.
    pub fn items(
        &mut self,
        path: &[Step<'_>],
        render: impl Fn(usize) -> String + 'static,
    ) -> Result<(), ChartError> {
        let marker = self.marker("I");
        let description = describe(path);
        self.get_mut(path)?
            .as_sequence_mut()
            .ok_or_else(|| ChartError::Generate(format!("{description} is not a list")))?
            .push(Value::String(marker));
        self.holes.push(Hole::Item(Box::new(render)));
        Ok(())
    }

    /// The template text.
    pub fn render(&self) -> Result<String, ChartError> {
        let yaml = serde_yaml::to_string(&self.value)
            .map_err(|e| ChartError::Generate(format!("cannot serialize a template: {e}")))?;
        let mut used = vec![false; self.holes.len()];
        let mut out = String::new();
        'lines: for line in yaml.lines() {
            let indent = line.len() - line.trim_start().len();
            for (index, hole) in self.holes.iter().enumerate() {
                let rendered = match hole {
                    Hole::Scalar(text) => {
                        let marker = format!("HOLE-S-{index}-E");
                        if !line.contains(&marker) {
                            continue;
                        }
                        line.replace(&marker, text)
                    }
                    Hole::Block(render) => {
                        let marker = format!("HOLE-B-{index}-E: null");
                        if line.trim() == format!("- {marker}") {
                            return Err(ChartError::Generate(format!(
                                "hole {index} is the first key of a list item; put it after another key"
                            )));
                        }
                        if line.trim() != marker {
                            continue;
                        }
                        render(indent)
                    }
                    Hole::Item(render) => {
                        if line.trim() != format!("- HOLE-I-{index}-E") {
                            continue;
                        }
                        render(indent)
                    }
                };
                used[index] = true;
                out.push_str(rendered.trim_end_matches('\n'));
                out.push('\n');
                continue 'lines;
            }
            out.push_str(line);
            out.push('\n');
        }
        if let Some(unused) = used.iter().position(|used| !used) {
            return Err(ChartError::Generate(format!(
                "hole {unused} was not found in the serialized template:\n{yaml}"
            )));
        }
        Ok(out)
    }
}

/// `n` spaces.
pub fn pad(n: usize) -> String {
    " ".repeat(n)
}

/// A block that renders `key:` and the YAML of `expr` below it, only when `expr` is not
/// empty (Helm's `with`).
pub fn with_block(key: &str, expr: &str) -> impl Fn(usize) -> String + 'static {
    let (key, expr) = (key.to_string(), expr.to_string());
    move |indent| {
        format!(
            "{{{{- with {expr} }}}}\n{pad}{key}:\n{pad}  {{{{- toYaml . | nindent {inner} }}}}\n{{{{- end }}}}",
            pad = pad(indent),
            inner = indent + 2,
        )
    }
}

/// Items rendered from the list expression `expr` (nothing when it is empty).
pub fn with_items(expr: &str) -> impl Fn(usize) -> String + 'static {
    let expr = expr.to_string();
    move |indent| {
        format!(
            "{{{{- with {expr} }}}}\n{pad}{{{{- toYaml . | nindent {indent} }}}}\n{{{{- end }}}}",
            pad = pad(indent),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Holed {
        Holed::new(
            serde_yaml::from_str(
                "metadata:\n  name: x\n  namespace: ns\nspec:\n  replicas: 1\n  args:\n  - --a\n  resources:\n    cpu: 1\n  after: true\n",
            )
            .unwrap(),
        )
    }

    #[test]
    fn holes_replace_their_markers_in_place() {
        let mut doc = doc();
        let old = doc
            .scalar(
                &[Key("metadata"), Key("namespace")],
                "{{ .Release.Namespace }}",
            )
            .unwrap();
        assert_eq!(old, Value::String("ns".into()));
        doc.block(
            &[Key("spec")],
            "resources",
            with_block("resources", "$.Values.r"),
        )
        .unwrap()
        .unwrap();
        doc.items(&[Key("spec"), Key("args")], with_items("$.Values.extra"))
            .unwrap();
        let text = doc.render().unwrap();
        assert_eq!(
            text,
            "metadata:\n  name: x\n  namespace: {{ .Release.Namespace }}\nspec:\n  replicas: 1\n  args:\n  - --a\n{{- with $.Values.extra }}\n  {{- toYaml . | nindent 2 }}\n{{- end }}\n{{- with $.Values.r }}\n  resources:\n    {{- toYaml . | nindent 4 }}\n{{- end }}\n  after: true\n"
        );
    }

    #[test]
    fn a_missing_path_is_an_error_naming_it() {
        let mut doc = doc();
        let error = doc
            .scalar(&[Key("spec"), Key("template")], "x")
            .unwrap_err()
            .to_string();
        assert!(error.contains(".spec.template"), "{error}");
    }
}
