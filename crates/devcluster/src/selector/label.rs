//! Label selectors: `labels.Parse` grammar, validation and matching.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::SelectorError;

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
    /// the selector of a `null` `metav1.LabelSelector`: matches nothing
    nothing: bool,
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
        Ok(LabelSelector {
            requirements,
            nothing: false,
        })
    }

    /// Convert a `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`), as found in
    /// `spec.selector` of workloads. `null` selects nothing; `{}` selects everything.
    pub fn from_object(selector: &serde_json::Value) -> Result<Self, SelectorError> {
        use serde_json::Value;
        let Value::Object(fields) = selector else {
            return Ok(LabelSelector {
                requirements: Vec::new(),
                nothing: true,
            });
        };
        let mut requirements = Vec::new();
        if let Some(Value::Object(labels)) = fields.get("matchLabels") {
            for (key, value) in labels {
                let value = value.as_str().unwrap_or_default().to_string();
                let requirement = LabelRequirement {
                    key: key.clone(),
                    operator: LabelOperator::Equals,
                    values: BTreeSet::from([value]),
                };
                validate_label_key(key)?;
                validate_requirement(&requirement)?;
                requirements.push(requirement);
            }
        }
        if let Some(Value::Array(expressions)) = fields.get("matchExpressions") {
            for expression in expressions {
                let key = expression
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let operator_name = expression
                    .get("operator")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let operator = match operator_name {
                    "In" => LabelOperator::In,
                    "NotIn" => LabelOperator::NotIn,
                    "Exists" => LabelOperator::Exists,
                    "DoesNotExist" => LabelOperator::DoesNotExist,
                    other => {
                        return Err(SelectorError::Syntax(format!(
                            "{other:?} is not a valid label selector operator"
                        )));
                    }
                };
                let values: BTreeSet<String> = expression
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|vs| {
                        vs.iter()
                            .map(|v| v.as_str().unwrap_or_default().to_string())
                            .collect()
                    })
                    .unwrap_or_default();
                validate_label_key(&key)?;
                if matches!(
                    operator,
                    LabelOperator::Exists | LabelOperator::DoesNotExist
                ) && !values.is_empty()
                {
                    return Err(SelectorError::InvalidRequirement(format!(
                        "values: Invalid value: {values:?}: values set must be empty for exists and does not exist"
                    )));
                }
                let requirement = LabelRequirement {
                    key,
                    operator,
                    values,
                };
                validate_requirement(&requirement)?;
                requirements.push(requirement);
            }
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key).then(a.operator.cmp(&b.operator)));
        Ok(LabelSelector {
            requirements,
            nothing: false,
        })
    }

    /// Whether the labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this selector matches everything.
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
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
                    // apimachinery reports every error inside a requirement with this prefix
                    let requirement = self.parse_requirement().map_err(|e| match e {
                        SelectorError::Syntax(m) => SelectorError::InvalidRequirement(m),
                        other => other,
                    })?;
                    requirements.push(requirement);
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
                    "found '{}' expected: '('",
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

pub(crate) fn qualified_name_problem(key: &str) -> Option<String> {
    qualified_name_problems(key).into_iter().next()
}

/// Every problem a real server reports for a qualified name, in its order: an empty or too long
/// name part is also reported as not matching the name format (two causes).
pub(crate) fn qualified_name_problems(key: &str) -> Vec<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if name.contains('/') {
        return vec![
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_string(),
        ];
    }
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return vec!["prefix part must be non-empty".to_string()];
        }
        if !is_dns_subdomain(prefix) {
            return vec![
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                    .to_string(),
            ];
        }
    }
    let mut problems = Vec::new();
    if name.is_empty() {
        problems.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        problems.push("name part must be no more than 63 characters".to_string());
    }
    if !is_qualified_name_part(name) {
        problems.push(format!(
            "name part {NAME_FMT_MSG} (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        ));
    }
    problems
}

fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    if value.len() > 63 {
        return Some("must be no more than 63 characters".to_string());
    }
    if !is_qualified_name_part(value) {
        return Some(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
                .to_string(),
        );
    }
    None
}
