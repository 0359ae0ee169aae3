//! The Kubernetes JSONPath dialect, as CRD printer columns and `kubectl -o jsonpath` use it.
//!
//! Supported: `$`, `.field`, `.*`, `..field` (recursive descent), `['field']` / `["field"]`
//! (several for a union), `[0]`, `[-1]`, `[1:3]`, `[::2]`, `[*]`, `[?(@.type=='Ready')]` with
//! `==`, `!=`, `<`, `<=`, `>`, `>=` (or a bare `@.path` for existence), backslash-escaped dots in
//! field names, with or without `{}` braces. Templates (text with several `{...}` actions, string
//! literals, `{range ...}{end}`) are rendered by [`render`]. Missing keys yield no result rather
//! than an error, as with the server's printer columns and kubectl's defaults.

use serde_json::Value;

/// A JSONPath expression that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPathError {
    #[error("unclosed action in template {0:?}")]
    UnclosedAction(String),
    #[error("unrecognized character in action: {0:?}")]
    Unexpected(String),
    #[error("unterminated string literal in {0:?}")]
    UnterminatedString(String),
    #[error("invalid array index {0:?}")]
    BadIndex(String),
    #[error("invalid filter {0:?}")]
    BadFilter(String),
    #[error("{{range}} without {{end}} in {0:?}")]
    UnclosedRange(String),
    #[error("{{end}} without {{range}} in {0:?}")]
    UnexpectedEnd(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Field(String),
    Wildcard,
    Recursive,
    Select(Vec<Selector>),
    Filter(Box<Filter>),
}

#[derive(Debug, Clone, PartialEq)]
enum Selector {
    Index(i64),
    Slice(Option<i64>, Option<i64>, Option<i64>),
    Key(String),
    All,
}

#[derive(Debug, Clone, PartialEq)]
struct Filter {
    left: Operand,
    cmp: Option<(CmpOp, Operand)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    /// `@...` (relative to the element) or `$...` (relative to the root).
    Path {
        from_root: bool,
        segments: Vec<Segment>,
    },
    Literal(Value),
}

/// Evaluates one JSONPath expression (`.status.phase`, `{.items[*].metadata.name}`, ...) and returns
/// every value it selects, in order. A template with several actions returns the values of all.
pub fn eval(expr: &str, obj: &Value) -> Result<Vec<Value>, JsonPathError> {
    let trimmed = expr.trim();
    let nodes = if trimmed.contains('{') {
        parse_template(trimmed)?
    } else {
        vec![TemplateNode::Path(parse_path(trimmed)?)]
    };
    let mut out = Vec::new();
    collect_values(&nodes, obj, obj, &mut out);
    Ok(out)
}

/// Renders a template the way `kubectl -o jsonpath=...` prints it: text is copied, each action
/// prints its values separated by spaces (objects and lists as compact JSON).
pub fn render(template: &str, obj: &Value) -> Result<String, JsonPathError> {
    let nodes = if template.contains('{') {
        parse_template(template)?
    } else {
        vec![TemplateNode::Path(parse_path(template.trim())?)]
    };
    let mut out = String::new();
    render_nodes(&nodes, obj, obj, &mut out);
    Ok(out)
}

/// Prints one selected value as JSONPath output does: strings bare, numbers and booleans as
/// text, objects and lists as compact JSON.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                n.to_string()
            } else {
                super::validate::go_float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        other => other.to_string(),
    }
}

// ---- templates -----------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum TemplateNode {
    Text(String),
    Path(Vec<Segment>),
    Range(Vec<Segment>, Vec<TemplateNode>),
}

fn parse_template(t: &str) -> Result<Vec<TemplateNode>, JsonPathError> {
    let mut stack: Vec<(Vec<Segment>, Vec<TemplateNode>)> = Vec::new();
    let mut current: Vec<TemplateNode> = Vec::new();
    let mut rest = t;
    while !rest.is_empty() {
        match rest.find('{') {
            None => {
                current.push(TemplateNode::Text(rest.to_string()));
                break;
            }
            Some(start) => {
                if start > 0 {
                    current.push(TemplateNode::Text(rest[..start].to_string()));
                }
                let after = &rest[start + 1..];
                let end = find_action_end(after)
                    .ok_or_else(|| JsonPathError::UnclosedAction(t.to_string()))?;
                let action = after[..end].trim();
                rest = &after[end + 1..];
                if let Some(path) = action.strip_prefix("range ") {
                    stack.push((parse_path(path.trim())?, std::mem::take(&mut current)));
                } else if action == "end" {
                    let (path, outer) = stack
                        .pop()
                        .ok_or_else(|| JsonPathError::UnexpectedEnd(t.to_string()))?;
                    let body = std::mem::replace(&mut current, outer);
                    current.push(TemplateNode::Range(path, body));
                } else if let Some(lit) = parse_string_literal(action) {
                    current.push(TemplateNode::Text(lit));
                } else {
                    current.push(TemplateNode::Path(parse_path(action)?));
                }
            }
        }
    }
    if !stack.is_empty() {
        return Err(JsonPathError::UnclosedRange(t.to_string()));
    }
    Ok(current)
}

/// The index of the `}` closing an action, skipping quoted strings.
fn find_action_end(s: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match (quote, c) {
            (_, '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (None, '}') => return Some(i),
            _ => {}
        }
    }
    None
}

fn parse_string_literal(action: &str) -> Option<String> {
    let inner = action.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some(other) => out.push(other),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

fn collect_values(nodes: &[TemplateNode], root: &Value, cur: &Value, out: &mut Vec<Value>) {
    for node in nodes {
        match node {
            TemplateNode::Text(_) => {}
            TemplateNode::Path(p) => out.extend(apply(p, root, cur).into_iter().cloned()),
            TemplateNode::Range(p, body) => {
                for item in range_items(p, root, cur) {
                    collect_values(body, root, item, out);
                }
            }
        }
    }
}

fn render_nodes(nodes: &[TemplateNode], root: &Value, cur: &Value, out: &mut String) {
    for node in nodes {
        match node {
            TemplateNode::Text(t) => out.push_str(t),
            TemplateNode::Path(p) => {
                let values = apply(p, root, cur);
                out.push_str(
                    &values
                        .iter()
                        .map(|v| value_text(v))
                        .collect::<Vec<_>>()
                        .join(" "),
                );
            }
            TemplateNode::Range(p, body) => {
                for item in range_items(p, root, cur) {
                    render_nodes(body, root, item, out);
                }
            }
        }
    }
}

/// `{range X}` iterates the elements of X when X is one list, else the selected values.
fn range_items<'a>(p: &[Segment], root: &'a Value, cur: &'a Value) -> Vec<&'a Value> {
    let values = apply(p, root, cur);
    match values.as_slice() {
        [Value::Array(items)] => items.iter().collect(),
        _ => values,
    }
}

// ---- paths ---------------------------------------------------------------------------------------

struct Cursor<'a> {
    src: &'a str,
    pos: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }
    fn starts_with(&self, s: &str) -> bool {
        self.src[self.pos..].starts_with(s)
    }
    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }
    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }
    fn err(&self) -> JsonPathError {
        JsonPathError::Unexpected(self.src[self.pos..].to_string())
    }
}

fn parse_path(src: &str) -> Result<Vec<Segment>, JsonPathError> {
    let mut c = Cursor { src, pos: 0 };
    c.skip_ws();
    if c.peek() == Some('$') {
        c.bump();
    }
    let segments = parse_segments(&mut c, false)?;
    c.skip_ws();
    if c.pos != src.len() {
        return Err(c.err());
    }
    Ok(segments)
}

fn is_field_terminator(ch: char) -> bool {
    matches!(
        ch,
        '.' | '[' | ']' | '}' | '(' | ')' | '=' | '!' | '<' | '>' | ',' | '&' | '|'
    ) || ch.is_whitespace()
}

fn parse_field_name(c: &mut Cursor<'_>) -> String {
    let mut name = String::new();
    while let Some(ch) = c.peek() {
        if ch == '\\' {
            c.bump();
            if let Some(escaped) = c.bump() {
                name.push(escaped);
            }
            continue;
        }
        if is_field_terminator(ch) {
            break;
        }
        name.push(ch);
        c.bump();
    }
    name
}

/// Parses segments until the end of input or, inside a filter, a character that ends an operand.
fn parse_segments(c: &mut Cursor<'_>, in_filter: bool) -> Result<Vec<Segment>, JsonPathError> {
    let mut segments = Vec::new();
    loop {
        match c.peek() {
            Some('.') => {
                c.bump();
                if c.peek() == Some('.') {
                    c.bump();
                    segments.push(Segment::Recursive);
                    if c.peek() == Some('[') {
                        continue;
                    }
                }
                if c.peek() == Some('*') {
                    c.bump();
                    segments.push(Segment::Wildcard);
                    continue;
                }
                let name = parse_field_name(c);
                if !name.is_empty() {
                    segments.push(Segment::Field(name));
                } else if !segments.is_empty() && segments.last() != Some(&Segment::Recursive) {
                    return Err(c.err());
                }
            }
            Some('[') => {
                c.bump();
                segments.push(parse_bracket(c)?);
            }
            Some(ch)
                if !in_filter
                    && !ch.is_whitespace()
                    && segments.is_empty()
                    && !is_field_terminator(ch) =>
            {
                // A bare leading field name (`metadata.name`) reads as `.metadata.name`.
                let name = parse_field_name(c);
                segments.push(Segment::Field(name));
            }
            _ => break,
        }
    }
    Ok(segments)
}

fn parse_bracket(c: &mut Cursor<'_>) -> Result<Segment, JsonPathError> {
    c.skip_ws();
    if c.starts_with("?(") {
        c.pos += 2;
        let filter = parse_filter(c)?;
        c.skip_ws();
        if c.bump() != Some(')') {
            return Err(c.err());
        }
        c.skip_ws();
        if c.bump() != Some(']') {
            return Err(c.err());
        }
        return Ok(Segment::Filter(Box::new(filter)));
    }
    let start = c.pos;
    let mut selectors = Vec::new();
    loop {
        c.skip_ws();
        match c.peek() {
            Some('\'' | '"') => selectors.push(Selector::Key(parse_quoted(c)?)),
            Some('*') => {
                c.bump();
                selectors.push(Selector::All);
            }
            Some(_) => {
                let begin = c.pos;
                while c.peek().is_some_and(|ch| ch != ',' && ch != ']') {
                    c.bump();
                }
                selectors.push(parse_index(c.src[begin..c.pos].trim())?);
            }
            None => return Err(JsonPathError::BadIndex(c.src[start..].to_string())),
        }
        c.skip_ws();
        match c.bump() {
            Some(',') => continue,
            Some(']') => break,
            _ => return Err(JsonPathError::BadIndex(c.src[start..].to_string())),
        }
    }
    if selectors == [Selector::All] {
        return Ok(Segment::Wildcard);
    }
    Ok(Segment::Select(selectors))
}

fn parse_index(s: &str) -> Result<Selector, JsonPathError> {
    let bad = || JsonPathError::BadIndex(s.to_string());
    if s.contains(':') {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() > 3 {
            return Err(bad());
        }
        let num = |p: Option<&&str>| -> Result<Option<i64>, JsonPathError> {
            match p.map(|x| x.trim()) {
                None | Some("") => Ok(None),
                Some(x) => x.parse().map(Some).map_err(|_| bad()),
            }
        };
        return Ok(Selector::Slice(
            num(parts.first())?,
            num(parts.get(1))?,
            num(parts.get(2))?,
        ));
    }
    s.parse().map(Selector::Index).map_err(|_| bad())
}

fn parse_quoted(c: &mut Cursor<'_>) -> Result<String, JsonPathError> {
    let start = c.pos;
    let quote = c.bump().ok_or_else(|| c.err())?;
    let mut out = String::new();
    loop {
        match c.bump() {
            None => {
                return Err(JsonPathError::UnterminatedString(
                    c.src[start..].to_string(),
                ));
            }
            Some('\\') => {
                if let Some(ch) = c.bump() {
                    out.push(ch);
                }
            }
            Some(ch) if ch == quote => return Ok(out),
            Some(ch) => out.push(ch),
        }
    }
}

fn parse_filter(c: &mut Cursor<'_>) -> Result<Filter, JsonPathError> {
    let left = parse_operand(c)?;
    c.skip_ws();
    let op = if c.starts_with("==") {
        Some(CmpOp::Eq)
    } else if c.starts_with("!=") {
        Some(CmpOp::Ne)
    } else if c.starts_with("<=") {
        Some(CmpOp::Le)
    } else if c.starts_with(">=") {
        Some(CmpOp::Ge)
    } else if c.starts_with("<") {
        Some(CmpOp::Lt)
    } else if c.starts_with(">") {
        Some(CmpOp::Gt)
    } else {
        None
    };
    let Some(op) = op else {
        return Ok(Filter { left, cmp: None });
    };
    c.pos += if matches!(op, CmpOp::Lt | CmpOp::Gt) {
        1
    } else {
        2
    };
    let right = parse_operand(c)?;
    Ok(Filter {
        left,
        cmp: Some((op, right)),
    })
}

fn parse_operand(c: &mut Cursor<'_>) -> Result<Operand, JsonPathError> {
    c.skip_ws();
    match c.peek() {
        Some('@') | Some('$') => {
            let from_root = c.bump() == Some('$');
            let segments = parse_segments(c, true)?;
            Ok(Operand::Path {
                from_root,
                segments,
            })
        }
        Some('\'' | '"') => Ok(Operand::Literal(Value::String(parse_quoted(c)?))),
        Some(_) => {
            let begin = c.pos;
            while c.peek().is_some_and(|ch| {
                !ch.is_whitespace() && ch != ')' && !matches!(ch, '=' | '!' | '<' | '>')
            }) {
                c.bump();
            }
            let word = &c.src[begin..c.pos];
            let lit = match word {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                "null" | "nil" => Value::Null,
                w => match serde_json::from_str::<serde_json::Number>(w) {
                    Ok(n) => Value::Number(n),
                    Err(_) => return Err(JsonPathError::BadFilter(c.src.to_string())),
                },
            };
            Ok(Operand::Literal(lit))
        }
        None => Err(JsonPathError::BadFilter(c.src.to_string())),
    }
}

// ---- evaluation ----------------------------------------------------------------------------------

fn apply<'a>(segments: &[Segment], root: &'a Value, cur: &'a Value) -> Vec<&'a Value> {
    let mut current = vec![cur];
    for seg in segments {
        let mut next = Vec::new();
        for v in current {
            step(seg, root, v, &mut next);
        }
        current = next;
    }
    current
}

fn step<'a>(seg: &Segment, root: &'a Value, v: &'a Value, out: &mut Vec<&'a Value>) {
    match seg {
        Segment::Field(name) => {
            if let Some(x) = v.as_object().and_then(|m| m.get(name)) {
                out.push(x);
            }
        }
        Segment::Wildcard => match v {
            Value::Object(m) => out.extend(m.values()),
            Value::Array(a) => out.extend(a.iter()),
            _ => {}
        },
        Segment::Recursive => descend(v, out),
        Segment::Select(selectors) => {
            for sel in selectors {
                select(sel, v, out);
            }
        }
        Segment::Filter(filter) => {
            if let Value::Array(items) = v {
                out.extend(
                    items
                        .iter()
                        .filter(|item| filter_matches(filter, root, item)),
                );
            }
        }
    }
}

/// The value and all its descendants that have children, parents before children.
fn descend<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    let children: Vec<&Value> = match v {
        Value::Object(m) => m.values().collect(),
        Value::Array(a) => a.iter().collect(),
        _ => return,
    };
    if children.is_empty() {
        return;
    }
    out.push(v);
    for child in children {
        descend(child, out);
    }
}

fn select<'a>(sel: &Selector, v: &'a Value, out: &mut Vec<&'a Value>) {
    match (sel, v) {
        (Selector::Key(k), Value::Object(m)) => out.extend(m.get(k)),
        (Selector::All, Value::Array(a)) => out.extend(a.iter()),
        (Selector::All, Value::Object(m)) => out.extend(m.values()),
        (Selector::Index(i), Value::Array(a)) => {
            let len = a.len() as i64;
            let idx = if *i < 0 { len + i } else { *i };
            if (0..len).contains(&idx) {
                out.push(&a[idx as usize]);
            }
        }
        (Selector::Slice(start, end, step), Value::Array(a)) => {
            let len = a.len() as i64;
            let norm = |x: i64| if x < 0 { (len + x).max(0) } else { x.min(len) };
            let s = start.map(norm).unwrap_or(0);
            let e = end.map(norm).unwrap_or(len);
            let st = step.unwrap_or(1).max(1);
            let mut i = s;
            while i < e {
                out.push(&a[i as usize]);
                i += st;
            }
        }
        _ => {}
    }
}

fn operand_values<'a>(op: &'a Operand, root: &'a Value, item: &'a Value) -> Vec<&'a Value> {
    match op {
        Operand::Path {
            from_root,
            segments,
        } => apply(segments, root, if *from_root { root } else { item }),
        Operand::Literal(v) => vec![v],
    }
}

fn filter_matches(filter: &Filter, root: &Value, item: &Value) -> bool {
    let left = operand_values(&filter.left, root, item);
    let Some((op, right_op)) = &filter.cmp else {
        return !left.is_empty();
    };
    let right = operand_values(right_op, root, item);
    let (Some(l), Some(r)) = (left.first(), right.first()) else {
        return false;
    };
    compare(*op, l, r)
}

fn compare(op: CmpOp, l: &Value, r: &Value) -> bool {
    use std::cmp::Ordering;
    let ord = match (l, r) {
        (Value::Number(a), Value::Number(b)) => a.as_f64().partial_cmp(&b.as_f64()),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        _ => {
            if l == r {
                Some(Ordering::Equal)
            } else {
                None
            }
        }
    };
    match op {
        CmpOp::Eq => ord == Some(Ordering::Equal),
        CmpOp::Ne => ord != Some(Ordering::Equal),
        CmpOp::Lt => ord == Some(Ordering::Less),
        CmpOp::Le => matches!(ord, Some(Ordering::Less | Ordering::Equal)),
        CmpOp::Gt => ord == Some(Ordering::Greater),
        CmpOp::Ge => matches!(ord, Some(Ordering::Greater | Ordering::Equal)),
    }
}

#[cfg(test)]
mod tests;
