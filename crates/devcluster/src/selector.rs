//! Label and field selectors, parsed from their query-string form and matched against objects.
//!
//! The grammar is the Kubernetes one (`k8s.io/apimachinery` `labels.Parse` and `fields.ParseSelector`):
//!
//! * label selectors: comma-separated requirements, each `key`, `!key`, `key=value`, `key==value`,
//!   `key!=value`, `key in (v1,v2)`, `key notin (v1,v2)`, `key>N` or `key<N`; keys are qualified names
//!   (optional DNS-subdomain prefix and `/`), values are label values (at most 63 characters).
//!   Whitespace between tokens is ignored; the empty selector matches everything.
//! * field selectors: comma-separated `key=value`, `key==value`, `key!=value`; `\,`, `\=` and `\\`
//!   escape those characters inside keys and values.
//!
//! kube-core's `Selector` only builds selectors and renders them; it cannot parse the string form a
//! server receives, hence the small recursive-descent parser here.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

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
}

/// The operator of one label requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LabelOperator {
    /// `key=value` or `key==value`
    Equals,
    /// `key!=value`
    NotEquals,
    /// `key in (a,b)`
    In,
    /// `key notin (a,b)`
    NotIn,
    /// `key`
    Exists,
    /// `!key`
    DoesNotExist,
    /// `key>N` (integer comparison)
    GreaterThan,
    /// `key<N` (integer comparison)
    LessThan,
}

/// One requirement of a label selector, e.g. `tier in (web,api)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelRequirement {
    pub key: String,
    pub operator: LabelOperator,
    pub values: BTreeSet<String>,
}

impl LabelRequirement {
    /// Whether a label set satisfies this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            LabelOperator::Equals | LabelOperator::In => {
                value.is_some_and(|v| self.values.contains(v))
            }
            LabelOperator::NotEquals | LabelOperator::NotIn => {
                value.is_none_or(|v| !self.values.contains(v))
            }
            LabelOperator::Exists => value.is_some(),
            LabelOperator::DoesNotExist => value.is_none(),
            LabelOperator::GreaterThan | LabelOperator::LessThan => {
                let Some(have) = value.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let Some(want) = self
                    .values
                    .iter()
                    .next()
                    .and_then(|v| v.parse::<i64>().ok())
                else {
                    return false;
                };
                if self.operator == LabelOperator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for LabelRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = || self.values.iter().next().map(String::as_str).unwrap_or("");
        let joined = || self.values.iter().cloned().collect::<Vec<_>>().join(",");
        match self.operator {
            LabelOperator::Equals => write!(f, "{}={}", self.key, first()),
            LabelOperator::NotEquals => write!(f, "{}!={}", self.key, first()),
            LabelOperator::In => write!(f, "{} in ({})", self.key, joined()),
            LabelOperator::NotIn => write!(f, "{} notin ({})", self.key, joined()),
            LabelOperator::Exists => write!(f, "{}", self.key),
            LabelOperator::DoesNotExist => write!(f, "!{}", self.key),
            LabelOperator::GreaterThan => write!(f, "{}>{}", self.key, first()),
            LabelOperator::LessThan => write!(f, "{}<{}", self.key, first()),
        }
    }
}

/// A parsed label selector: all requirements must hold. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// Parse the `labelSelector` query-string form.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let tokens = lex_labels(s)?;
        let mut parser = LabelParser {
            tokens,
            position: 0,
        };
        let mut requirements = parser.parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key).then(a.operator.cmp(&b.operator)));
        Ok(LabelSelector { requirements })
    }

    /// Whether the labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[LabelRequirement] {
        &self.requirements
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.requirements.iter().map(|r| r.to_string()).collect();
        f.write_str(&parts.join(","))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Identifier(String),
    Equals,
    DoubleEquals,
    NotEquals,
    Bang,
    In,
    NotIn,
    GreaterThan,
    LessThan,
    OpenParen,
    CloseParen,
    Comma,
    End,
}

impl Token {
    fn literal(&self) -> &str {
        match self {
            Token::Identifier(s) => s,
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::Bang => "!",
            Token::In => "in",
            Token::NotIn => "notin",
            Token::GreaterThan => ">",
            Token::LessThan => "<",
            Token::OpenParen => "(",
            Token::CloseParen => ")",
            Token::Comma => ",",
            Token::End => "",
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | '(' | ')' | ',' | '>' | '<')
}

fn lex_labels(s: &str) -> Result<Vec<Token>, SelectorError> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if is_special(c) {
            let next = chars.get(i + 1).copied();
            let (token, width) = match (c, next) {
                ('!', Some('=')) => (Token::NotEquals, 2),
                ('=', Some('=')) => (Token::DoubleEquals, 2),
                ('!', _) => (Token::Bang, 1),
                ('=', _) => (Token::Equals, 1),
                ('(', _) => (Token::OpenParen, 1),
                (')', _) => (Token::CloseParen, 1),
                (',', _) => (Token::Comma, 1),
                ('>', _) => (Token::GreaterThan, 1),
                _ => (Token::LessThan, 1),
            };
            tokens.push(token);
            i += width;
            continue;
        }
        let start = i;
        while i < chars.len() && !chars[i].is_whitespace() && !is_special(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        tokens.push(match word.as_str() {
            "in" => Token::In,
            "notin" => Token::NotIn,
            _ => Token::Identifier(word),
        });
    }
    tokens.push(Token::End);
    Ok(tokens)
}

struct LabelParser {
    tokens: Vec<Token>,
    position: usize,
}

impl LabelParser {
    fn peek(&self) -> &Token {
        self.tokens.get(self.position).unwrap_or(&Token::End)
    }

    fn next(&mut self) -> Token {
        let token = self.peek().clone();
        if self.position < self.tokens.len() {
            self.position += 1;
        }
        token
    }

    /// In value position the words `in` and `notin` are plain values.
    fn next_value(&mut self) -> Token {
        match self.next() {
            Token::In => Token::Identifier("in".to_string()),
            Token::NotIn => Token::Identifier("notin".to_string()),
            other => other,
        }
    }

    fn parse(&mut self) -> Result<Vec<LabelRequirement>, SelectorError> {
        let mut requirements = Vec::new();
        loop {
            match self.peek() {
                Token::End => return Ok(requirements),
                Token::Identifier(_) | Token::Bang => {
                    requirements.push(self.parse_requirement()?);
                    match self.next() {
                        Token::End => return Ok(requirements),
                        Token::Comma => {
                            if !matches!(self.peek(), Token::Identifier(_) | Token::Bang) {
                                let found = self.peek().literal().to_string();
                                return Err(SelectorError::Syntax(format!(
                                    "found '{found}', expected: identifier after ','"
                                )));
                            }
                        }
                        other => {
                            return Err(SelectorError::Syntax(format!(
                                "found '{}', expected: ',' or 'end of string'",
                                other.literal()
                            )));
                        }
                    }
                }
                other => {
                    return Err(SelectorError::Syntax(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        other.literal()
                    )));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<LabelRequirement, SelectorError> {
        let (key, bang) = self.parse_key_and_bang()?;
        validate_label_key(&key)?;
        if bang {
            return Ok(LabelRequirement {
                key,
                operator: LabelOperator::DoesNotExist,
                values: BTreeSet::new(),
            });
        }
        let operator = match self.peek() {
            Token::End | Token::Comma => {
                return Ok(LabelRequirement {
                    key,
                    operator: LabelOperator::Exists,
                    values: BTreeSet::new(),
                });
            }
            Token::Equals | Token::DoubleEquals => LabelOperator::Equals,
            Token::NotEquals => LabelOperator::NotEquals,
            Token::In => LabelOperator::In,
            Token::NotIn => LabelOperator::NotIn,
            Token::GreaterThan => LabelOperator::GreaterThan,
            Token::LessThan => LabelOperator::LessThan,
            other => {
                return Err(SelectorError::Syntax(format!(
                    "found '{}', expected: {}",
                    other.literal(),
                    "'=', '!=', '==', 'in', notin'"
                )));
            }
        };
        self.next();
        let values = match operator {
            LabelOperator::In | LabelOperator::NotIn => self.parse_value_set()?,
            _ => self.parse_exact_value()?,
        };
        let requirement = LabelRequirement {
            key,
            operator,
            values,
        };
        validate_requirement(&requirement)?;
        Ok(requirement)
    }

    fn parse_key_and_bang(&mut self) -> Result<(String, bool), SelectorError> {
        let bang = if self.peek() == &Token::Bang {
            self.next();
            true
        } else {
            false
        };
        match self.next() {
            Token::Identifier(key) => Ok((key, bang)),
            other => Err(SelectorError::Syntax(format!(
                "found '{}', expected: identifier",
                other.literal()
            ))),
        }
    }

    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        let mut values = BTreeSet::new();
        match self.peek() {
            Token::End | Token::Comma => {
                values.insert(String::new());
                return Ok(values);
            }
            _ => {}
        }
        match self.next_value() {
            Token::Identifier(v) => {
                values.insert(v);
                Ok(values)
            }
            other => Err(SelectorError::Syntax(format!(
                "found '{}', expected: identifier",
                other.literal()
            ))),
        }
    }

    fn parse_value_set(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        match self.next() {
            Token::OpenParen => {}
            other => {
                return Err(SelectorError::Syntax(format!(
                    "found '{}', expected: '('",
                    other.literal()
                )));
            }
        }
        let mut values = BTreeSet::new();
        if self.peek() == &Token::CloseParen {
            self.next();
            return Ok(values);
        }
        loop {
            match self.next_value() {
                Token::Identifier(v) => {
                    values.insert(v);
                    match self.next() {
                        Token::Comma => continue,
                        Token::CloseParen => return Ok(values),
                        other => {
                            return Err(SelectorError::Syntax(format!(
                                "found '{}', expected: ',' or ')'",
                                other.literal()
                            )));
                        }
                    }
                }
                // `in (a,)` and `in (,a)` carry an empty value, as apimachinery reads them.
                Token::Comma => {
                    values.insert(String::new());
                }
                Token::CloseParen => {
                    values.insert(String::new());
                    return Ok(values);
                }
                other => {
                    return Err(SelectorError::Syntax(format!(
                        "found '{}', expected: ',', ')' or identifier",
                        other.literal()
                    )));
                }
            }
        }
    }
}

fn validate_requirement(r: &LabelRequirement) -> Result<(), SelectorError> {
    match r.operator {
        LabelOperator::In | LabelOperator::NotIn if r.values.is_empty() => {
            return Err(SelectorError::InvalidRequirement(
                "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty"
                    .to_string(),
            ));
        }
        LabelOperator::GreaterThan | LabelOperator::LessThan => {
            let value = r.values.iter().next().map(String::as_str).unwrap_or("");
            if value.parse::<i64>().is_err() {
                return Err(SelectorError::InvalidRequirement(format!(
                    "values[0]: Invalid value: \"{value}\": for 'Gt', 'Lt' operators, the value must be an integer"
                )));
            }
            return Ok(());
        }
        _ => {}
    }
    for (i, value) in r.values.iter().enumerate() {
        if let Some(problem) = label_value_problem(value) {
            return Err(SelectorError::InvalidRequirement(format!(
                "values[{i}][{}]: Invalid value: \"{value}\": {problem}",
                r.key
            )));
        }
    }
    Ok(())
}

const NAME_FMT_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    !s.is_empty()
        && s.chars().all(is_name_char)
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

/// RFC 1123 subdomain: lowercase alphanumerics, '-' and '.', starting and ending alphanumeric.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && !s.is_empty()
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// Validate a label key as a Kubernetes qualified name (`[prefix/]name`).
pub fn validate_label_key(key: &str) -> Result<(), SelectorError> {
    let problem = qualified_name_problem(key);
    match problem {
        None => Ok(()),
        Some(p) => Err(SelectorError::InvalidRequirement(format!(
            "key: Invalid value: \"{key}\": {p}"
        ))),
    }
}

fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if name.contains('/') {
        return Some(
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_string(),
        );
    }
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Some("prefix part must be non-empty".to_string());
        }
        if !is_dns_subdomain(prefix) {
            return Some(
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                    .to_string(),
            );
        }
    }
    if name.is_empty() {
        return Some("name part must be non-empty".to_string());
    }
    if name.len() > 63 {
        return Some("name part must be no more than 63 characters".to_string());
    }
    if !is_qualified_name_part(name) {
        return Some(format!(
            "name part {NAME_FMT_MSG} (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        ));
    }
    None
}

fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    if value.len() > 63 {
        return Some("must be no more than 63 characters".to_string());
    }
    if !is_qualified_name_part(value) {
        return Some(format!(
            "a valid label {NAME_FMT_MSG} (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        ));
    }
    None
}

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
                field: unescape_field(raw_field)?,
                operator,
                value: unescape_field(raw_value)?,
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

/// Find the first unescaped operator (`!=`, `==` or `=`) in a term.
fn split_field_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'!' if bytes.get(i + 1) == Some(&b'=') => {
                return Some((&term[..i], FieldOperator::NotEquals, &term[i + 2..]));
            }
            b'=' if bytes.get(i + 1) == Some(&b'=') => {
                return Some((&term[..i], FieldOperator::Equals, &term[i + 2..]));
            }
            b'=' => return Some((&term[..i], FieldOperator::Equals, &term[i + 1..])),
            _ => i += 1,
        }
    }
    None
}

fn unescape_field(s: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(e @ ('\\' | ',' | '=')) => out.push(e),
            Some(other) => {
                return Err(SelectorError::FieldEscape(format!("\\{other}")));
            }
            None => return Err(SelectorError::FieldEscape("\\".to_string())),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
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
    fn empty_set_message_matches_apimachinery() {
        let err = LabelSelector::parse("a in ()").unwrap_err();
        assert!(
            err.to_string().contains("values set can't be empty"),
            "{err}"
        );
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
}
