//! Label and field selectors, parsed from their query-string form and matched against objects.
//!
//! The grammar is the Kubernetes one (`k8s.io/apimachinery` `labels.Parse` and `fields.ParseSelector`):
//!
//! * label selectors: comma-separated requirements, each `key`, `!key`, `key=value`, `key==value`,
//!   `key!=value`, `key in (v1,v2)`, `key notin (v1,v2)`, `key>N` or `key<N`; keys are qualified names
//!   (optional DNS-subdomain prefix and `/`), values are label values (at most 63 characters).
//!   Whitespace between tokens is ignored; the empty selector matches everything.
//! * field selectors: comma-separated `key=value`, `key==value`, `key!=value`, split at the first
//!   operator; in values `\,`, `\=` and `\\` stand for those characters, and a bare `,` or `=`
//!   is an error.
//! * `metav1.LabelSelector` objects (`matchLabels`, `matchExpressions`) convert with
//!   [`LabelSelector::from_object`].
//!
//! kube-core's `Selector` only builds selectors and renders them; it cannot parse the string form a
//! server receives, hence the small recursive-descent parser here.

mod field;
mod label;

pub use field::{FieldOperator, FieldRequirement, FieldSelector};
pub(crate) use label::qualified_name_problems;
pub use label::{LabelOperator, LabelRequirement, LabelSelector, validate_label_key};

/// A selector that could not be parsed. Display is the message a real API server puts in the 400
/// `BadRequest` Status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The label selector string does not follow the grammar or names an invalid key or value.
    #[error("unable to parse requirement: {0}")]
    InvalidRequirement(String),
    /// A token appeared where another was expected.
    #[error("{0}")]
    Syntax(String),
    /// A field selector term has no `=`, `==` or `!=`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    FieldTerm { selector: String, term: String },
    /// A field selector uses a backslash escape other than `\,`, `\=` or `\\`.
    #[error("invalid field selector: invalid escape sequence: {0}")]
    FieldEscape(String),
    /// A field selector value holds a bare `,` or `=` (the message shows its code point, as
    /// apimachinery's does).
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.0))]
    FieldUnescapedRune(char),
}

#[cfg(test)]
mod tests;
