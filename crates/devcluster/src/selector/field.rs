//! Field selectors: `fields.ParseSelector` grammar and matching.

use super::SelectorError;

/// The operator of one field selector term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldOperator {
    /// `=` or `==`
    Equals,
    /// `!=`
    NotEquals,
}

/// One field selector term, e.g. `status.phase!=Running`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub operator: FieldOperator,
    pub value: String,
}

/// A parsed field selector: every term must hold. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parse the `fieldSelector` query-string form.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for term in split_unescaped(s, ',') {
            if term.is_empty() {
                continue;
            }
            let Some((raw_field, operator, raw_value)) = split_field_term(&term) else {
                return Err(SelectorError::FieldTerm {
                    selector: s.to_string(),
                    term,
                });
            };
            requirements.push(FieldRequirement {
                field: raw_field.to_string(),
                operator,
                value: unescape_value(raw_value)?,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// The field labels the selector names; the server rejects those a kind does not support.
    pub fn field_names(&self) -> Vec<&str> {
        self.requirements.iter().map(|r| r.field.as_str()).collect()
    }

    /// The terms, in the order given.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Whether this selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object matches; `value_of` returns the value of a field label (a missing field
    /// compares as the empty string, as on a real server).
    pub fn matches(&self, value_of: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| {
            let value = value_of(&r.field).unwrap_or_default();
            match r.operator {
                FieldOperator::Equals => value == r.value,
                FieldOperator::NotEquals => value != r.value,
            }
        })
    }
}

/// Split on `sep` not preceded by an escaping backslash; escapes are kept for later unescaping.
fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            current.push(c);
            if let Some(next) = chars.next() {
                current.push(next);
            }
        } else if c == sep {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    parts.push(current);
    parts
}

/// Split a term at the first operator (`!=`, `==` or `=`, checked in that order at each
/// position). As in apimachinery, the field name has no escaping: the first operator wins.
fn split_field_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        if rest.starts_with("!=") {
            return Some((&term[..i], FieldOperator::NotEquals, &term[i + 2..]));
        }
        if rest.starts_with("==") {
            return Some((&term[..i], FieldOperator::Equals, &term[i + 2..]));
        }
        if rest.starts_with('=') {
            return Some((&term[..i], FieldOperator::Equals, &term[i + 1..]));
        }
    }
    None
}

/// Unescape a value: `\\`, `\,` and `\=` stand for themselves; any other escape, a trailing
/// backslash, or a bare `,` or `=` is an error.
fn unescape_value(s: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(other) => return Err(SelectorError::FieldEscape(format!("\\{other}"))),
                None => return Err(SelectorError::FieldEscape("\\".to_string())),
            },
            ',' | '=' => return Err(SelectorError::FieldUnescapedRune(c)),
            other => out.push(other),
        }
    }
    Ok(out)
}
