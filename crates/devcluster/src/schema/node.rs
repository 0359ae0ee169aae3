//! The structural schema tree, parsed from an `openAPIV3Schema` value, and the structural checks the
//! apiextensions API applies when a CRD is written.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::cel_rules::CompiledRule;
use super::{FieldError, FieldErrorKind};

/// The JSON type a schema node declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JsonType {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl JsonType {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "object" => Self::Object,
            "array" => Self::Array,
            "string" => Self::String,
            "integer" => Self::Integer,
            "number" => Self::Number,
            "boolean" => Self::Boolean,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Object => "object",
            Self::Array => "array",
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
        }
    }
}

/// `additionalProperties`: a schema for every value of a map, or `true` (any value).
#[derive(Debug, Clone)]
pub(crate) enum Additional {
    Schema(Box<Node>),
    Any,
}

/// One node of a structural schema (or of a value-validation subtree under allOf/anyOf/oneOf/not).
#[derive(Debug, Clone, Default)]
pub(crate) struct Node {
    pub ty: Option<JsonType>,
    pub nullable: bool,
    pub format: Option<String>,
    pub properties: BTreeMap<String, Node>,
    pub additional: Option<Additional>,
    pub items: Option<Box<Node>>,
    pub required: Vec<String>,
    pub enum_values: Option<Vec<Value>>,
    pub default: Option<Value>,
    pub minimum: Option<serde_json::Number>,
    pub exclusive_minimum: bool,
    pub maximum: Option<serde_json::Number>,
    pub exclusive_maximum: bool,
    pub multiple_of: Option<serde_json::Number>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub pattern: Option<(String, regex::Regex)>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub preserve_unknown: bool,
    pub embedded: bool,
    pub int_or_string: bool,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
    pub map_type: Option<String>,
    pub rules: Vec<CompiledRule>,
    pub all_of: Vec<Node>,
    pub any_of: Vec<Node>,
    pub one_of: Vec<Node>,
    pub not: Option<Box<Node>>,
}

/// Where a node sits, for the "type must not be empty" messages.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Field,
    Item,
    /// Inside allOf/anyOf/oneOf/not: value validation only.
    Junctor,
}

/// Keywords with no meaning to a structural schema that the real server refuses outright.
const FORBIDDEN_KEYWORDS: &[(&str, &str)] = &[
    ("$ref", "$ref is not supported"),
    ("definitions", "definitions are not supported"),
    ("dependencies", "dependencies are not supported"),
    ("patternProperties", "patternProperties is not supported"),
    ("additionalItems", "additionalItems is not supported"),
];

pub(crate) struct Parser {
    pub errors: Vec<FieldError>,
}

fn forbidden(path: &str, message: impl Into<String>) -> FieldError {
    FieldError::new(path, FieldErrorKind::Forbidden, None, message)
}

fn required(path: &str, message: impl Into<String>) -> FieldError {
    FieldError::new(path, FieldErrorKind::Required, None, message)
}

fn invalid(path: &str, value: Value, message: impl Into<String>) -> FieldError {
    FieldError::new(path, FieldErrorKind::Invalid, Some(value), message)
}

fn unsupported(path: &str, value: &str, supported: &[&str]) -> FieldError {
    FieldError::not_supported(path, Value::String(value.to_string()), supported)
}

impl Parser {
    pub fn new() -> Self {
        Parser { errors: Vec::new() }
    }

    pub fn parse_root(&mut self, v: &Value, path: &str) -> Node {
        let node = self.parse(v, path, Level::Root);
        if let Some(ty) = node.ty
            && ty != JsonType::Object
        {
            self.errors.push(invalid(
                &format!("{path}.type"),
                Value::String(ty.name().into()),
                "must be object at the root",
            ));
        }
        if node.nullable {
            self.errors.push(forbidden(
                &format!("{path}.nullable"),
                "must be false at the root",
            ));
        }
        if node.default.is_some() {
            self.errors.push(forbidden(
                &format!("{path}.default"),
                "must not be set at the root",
            ));
        }
        if node.embedded {
            self.errors.push(forbidden(
                &format!("{path}.x-kubernetes-embedded-resource"),
                "must be false at the root",
            ));
        }
        if let Some(meta) = node.properties.get("metadata") {
            let allowed = ["name", "generateName"];
            if meta
                .properties
                .keys()
                .any(|k| !allowed.contains(&k.as_str()))
                || meta.additional.is_some()
                || meta.preserve_unknown
            {
                self.errors.push(forbidden(
                    &format!("{path}.properties[metadata]"),
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                ));
            }
            if let Some(ty) = meta.ty
                && ty != JsonType::Object
            {
                self.errors.push(invalid(
                    &format!("{path}.properties[metadata].type"),
                    Value::String(ty.name().into()),
                    "must be object",
                ));
            }
        }
        node
    }

    fn parse(&mut self, v: &Value, path: &str, level: Level) -> Node {
        let Some(obj) = v.as_object() else {
            self.errors.push(invalid(
                path,
                v.clone(),
                "must be an object (a JSON schema)",
            ));
            return Node::default();
        };
        let mut node = Node::default();
        for (key, msg) in FORBIDDEN_KEYWORDS {
            if obj.contains_key(*key) {
                self.errors.push(forbidden(&format!("{path}.{key}"), *msg));
            }
        }

        node.ty = match obj.get("type") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => match JsonType::parse(s) {
                Some(t) => Some(t),
                None => {
                    self.errors.push(unsupported(
                        &format!("{path}.type"),
                        s,
                        &["array", "boolean", "integer", "number", "object", "string"],
                    ));
                    None
                }
            },
            Some(other) => {
                self.errors.push(invalid(
                    &format!("{path}.type"),
                    other.clone(),
                    "must be a string",
                ));
                None
            }
        };
        node.nullable = self.bool_field(obj, "nullable", path);
        node.format = self.string_field(obj, "format", path);
        node.preserve_unknown = self.bool_field(obj, "x-kubernetes-preserve-unknown-fields", path);
        if obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
            self.errors.push(invalid(
                &format!("{path}.x-kubernetes-preserve-unknown-fields"),
                Value::Bool(false),
                "must be true or undefined",
            ));
        }
        node.embedded = self.bool_field(obj, "x-kubernetes-embedded-resource", path);
        node.int_or_string = self.bool_field(obj, "x-kubernetes-int-or-string", path);

        // Children.
        if let Some(props) = obj.get("properties") {
            match props.as_object() {
                Some(props) => {
                    for (name, child) in props {
                        let child_path = format!("{path}.properties[{name}]");
                        let child_level = if level == Level::Junctor {
                            Level::Junctor
                        } else {
                            Level::Field
                        };
                        let child_node = self.parse(child, &child_path, child_level);
                        node.properties.insert(name.clone(), child_node);
                    }
                }
                None => self.errors.push(invalid(
                    &format!("{path}.properties"),
                    props.clone(),
                    "must be an object",
                )),
            }
        }
        match obj.get("additionalProperties") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(true)) => node.additional = Some(Additional::Any),
            Some(Value::Bool(false)) => self.errors.push(forbidden(
                &format!("{path}.additionalProperties"),
                "additionalProperties cannot be set to false",
            )),
            Some(child @ Value::Object(_)) => {
                let child_level = if level == Level::Junctor {
                    Level::Junctor
                } else {
                    Level::Field
                };
                let child_node =
                    self.parse(child, &format!("{path}.additionalProperties"), child_level);
                node.additional = Some(Additional::Schema(Box::new(child_node)));
            }
            Some(other) => self.errors.push(invalid(
                &format!("{path}.additionalProperties"),
                other.clone(),
                "must be a schema object or a boolean",
            )),
        }
        if !node.properties.is_empty() && node.additional.is_some() {
            self.errors.push(forbidden(
                &format!("{path}.additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        if let Some(items) = obj.get("items") {
            match items {
                Value::Object(_) => {
                    let child_level = if level == Level::Junctor {
                        Level::Junctor
                    } else {
                        Level::Item
                    };
                    let child = self.parse(items, &format!("{path}.items"), child_level);
                    node.items = Some(Box::new(child));
                }
                Value::Array(_) => self.errors.push(forbidden(
                    &format!("{path}.items"),
                    "items must be a schema object and not an array",
                )),
                other => self.errors.push(invalid(
                    &format!("{path}.items"),
                    other.clone(),
                    "must be a schema object",
                )),
            }
        }
        if node.ty == Some(JsonType::Array) && node.items.is_none() && level != Level::Junctor {
            self.errors
                .push(required(&format!("{path}.items"), "must be specified"));
        }

        node.required = self.string_list(obj, "required", path);
        if let Some(e) = obj.get("enum") {
            match e.as_array() {
                Some(values) => node.enum_values = Some(values.clone()),
                None => self.errors.push(invalid(
                    &format!("{path}.enum"),
                    e.clone(),
                    "must be an array",
                )),
            }
        }
        node.default = obj.get("default").cloned();
        node.minimum = self.number_field(obj, "minimum", path);
        node.maximum = self.number_field(obj, "maximum", path);
        node.multiple_of = self.number_field(obj, "multipleOf", path);
        if let Some(m) = &node.multiple_of
            && m.as_f64().is_some_and(|f| f <= 0.0)
        {
            self.errors.push(invalid(
                &format!("{path}.multipleOf"),
                Value::Number(m.clone()),
                "must be greater than zero",
            ));
        }
        node.exclusive_minimum = self.bool_field(obj, "exclusiveMinimum", path);
        node.exclusive_maximum = self.bool_field(obj, "exclusiveMaximum", path);
        node.min_length = self.count_field(obj, "minLength", path);
        node.max_length = self.count_field(obj, "maxLength", path);
        node.min_items = self.count_field(obj, "minItems", path);
        node.max_items = self.count_field(obj, "maxItems", path);
        node.min_properties = self.count_field(obj, "minProperties", path);
        node.max_properties = self.count_field(obj, "maxProperties", path);
        if obj.get("uniqueItems") == Some(&Value::Bool(true)) {
            self.errors.push(forbidden(
                &format!("{path}.uniqueItems"),
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            ));
        }
        if let Some(p) = self.string_field(obj, "pattern", path) {
            match regex::Regex::new(&p) {
                Ok(re) => node.pattern = Some((p, re)),
                Err(e) => self.errors.push(invalid(
                    &format!("{path}.pattern"),
                    Value::String(p.clone()),
                    format!("must be a valid regular expression: {e}"),
                )),
            }
        }
        node.list_type = self.string_field(obj, "x-kubernetes-list-type", path);
        node.list_map_keys = self.string_list(obj, "x-kubernetes-list-map-keys", path);
        node.map_type = self.string_field(obj, "x-kubernetes-map-type", path);

        // Junctors: value validation only.
        for (key, target) in [("allOf", 0usize), ("anyOf", 1), ("oneOf", 2)] {
            if let Some(list) = obj.get(key) {
                let Some(list) = list.as_array() else {
                    self.errors.push(invalid(
                        &format!("{path}.{key}"),
                        list.clone(),
                        "must be an array of schemas",
                    ));
                    continue;
                };
                let mut nodes = Vec::new();
                for (i, sub) in list.iter().enumerate() {
                    let sub_path = format!("{path}.{key}[{i}]");
                    let sub_node = self.parse(sub, &sub_path, Level::Junctor);
                    self.check_value_validation(
                        &sub_node,
                        sub,
                        &sub_path,
                        node.int_or_string && key == "anyOf",
                    );
                    nodes.push(sub_node);
                }
                match target {
                    0 => node.all_of = nodes,
                    1 => node.any_of = nodes,
                    _ => node.one_of = nodes,
                }
            }
        }
        if let Some(sub) = obj.get("not") {
            let sub_path = format!("{path}.not");
            let sub_node = self.parse(sub, &sub_path, Level::Junctor);
            self.check_value_validation(&sub_node, sub, &sub_path, false);
            node.not = Some(Box::new(sub_node));
        }

        // An int-or-string field validates as `anyOf: [{type: integer}, {type: string}]`, written
        // out or not, as the real server does.
        if node.int_or_string && node.any_of.is_empty() {
            node.any_of = [JsonType::Integer, JsonType::String]
                .into_iter()
                .map(|ty| Node {
                    ty: Some(ty),
                    ..Node::default()
                })
                .collect();
        }

        if let Some(rules) = obj.get("x-kubernetes-validations") {
            node.rules = super::cel_rules::compile_rules(
                rules,
                &format!("{path}.x-kubernetes-validations"),
                &mut self.errors,
            );
        }

        if level != Level::Junctor {
            self.check_structural(&node, path, level);
        }
        node
    }

    /// The structural rules for a node outside a junctor.
    fn check_structural(&mut self, node: &Node, path: &str, level: Level) {
        if node.ty.is_none() && !node.embedded && !node.int_or_string && !node.preserve_unknown {
            let msg = match level {
                Level::Root => "must not be empty at the root",
                Level::Item => "must not be empty for specified array items",
                _ => "must not be empty for specified object fields",
            };
            self.errors.push(required(&format!("{path}.type"), msg));
        }
        if node.embedded && node.ty != Some(JsonType::Object) {
            self.errors.push(required(
                &format!("{path}.type"),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
        if node.int_or_string
            && let Some(ty) = node.ty
        {
            self.errors.push(invalid(
                &format!("{path}.type"),
                Value::String(ty.name().into()),
                "must be empty if x-kubernetes-int-or-string is true",
            ));
        }
        if node.preserve_unknown
            && let Some(ty) = node.ty
            && ty != JsonType::Object
            && !node.int_or_string
        {
            self.errors.push(invalid(
                &format!("{path}.type"),
                Value::String(ty.name().into()),
                "must be object if x-kubernetes-preserve-unknown-fields is true",
            ));
        }
        if (!node.properties.is_empty() || node.additional.is_some())
            && node.ty.is_some()
            && node.ty != Some(JsonType::Object)
        {
            self.errors.push(invalid(
                &format!("{path}.type"),
                Value::String(node.ty.map(|t| t.name()).unwrap_or_default().into()),
                "must be object if properties or additionalProperties are specified",
            ));
        }
        if let Some(lt) = &node.list_type {
            let lt_path = format!("{path}.x-kubernetes-list-type");
            if node.ty != Some(JsonType::Array) {
                self.errors.push(invalid(
                    &lt_path,
                    Value::String(lt.clone()),
                    "must only be used if type is array",
                ));
            }
            match lt.as_str() {
                "atomic" | "set" => {
                    if !node.list_map_keys.is_empty() {
                        self.errors.push(forbidden(
                            &format!("{path}.x-kubernetes-list-map-keys"),
                            "must be empty if x-kubernetes-list-type is not map",
                        ));
                    }
                }
                "map" => {
                    if node.list_map_keys.is_empty() {
                        self.errors.push(required(
                            &format!("{path}.x-kubernetes-list-map-keys"),
                            "must not be empty if x-kubernetes-list-type is map",
                        ));
                    }
                    if let Some(items) = &node.items {
                        if items.ty != Some(JsonType::Object) {
                            self.errors.push(invalid(
                                &format!("{path}.items.type"),
                                Value::String(
                                    items.ty.map(|t| t.name()).unwrap_or_default().into(),
                                ),
                                "must be object if parent array's x-kubernetes-list-type is map",
                            ));
                        }
                        for key in &node.list_map_keys {
                            if !items.properties.contains_key(key) {
                                self.errors.push(required(
                                    &format!("{path}.items.properties[{key}]"),
                                    "entries of x-kubernetes-list-map-keys must be specified as properties",
                                ));
                            }
                        }
                    }
                }
                other => self
                    .errors
                    .push(unsupported(&lt_path, other, &["atomic", "set", "map"])),
            }
        } else if !node.list_map_keys.is_empty() {
            self.errors.push(required(
                &format!("{path}.x-kubernetes-list-type"),
                "must be map if x-kubernetes-list-map-keys is non-empty",
            ));
        }
        if let Some(mt) = &node.map_type {
            let mt_path = format!("{path}.x-kubernetes-map-type");
            if !matches!(mt.as_str(), "granular" | "atomic") {
                self.errors
                    .push(unsupported(&mt_path, mt, &["granular", "atomic"]));
            } else if node.ty != Some(JsonType::Object) {
                self.errors.push(invalid(
                    &mt_path,
                    Value::String(mt.clone()),
                    "must only be used if type is object",
                ));
            }
        }
    }

    /// Inside allOf/anyOf/oneOf/not the real server forbids anything that would change the
    /// structure (type, default, nullable, additionalProperties, description, x-kubernetes-*),
    /// except the `anyOf: [{type: integer}, {type: string}]` pattern of int-or-string fields.
    fn check_value_validation(
        &mut self,
        node: &Node,
        raw: &Value,
        path: &str,
        int_or_string_any_of: bool,
    ) {
        let Some(obj) = raw.as_object() else { return };
        let type_allowed = int_or_string_any_of
            && matches!(node.ty, Some(JsonType::Integer) | Some(JsonType::String));
        if node.ty.is_some() && !type_allowed {
            self.errors.push(forbidden(
                &format!("{path}.type"),
                "must be empty to be structural",
            ));
        }
        for key in [
            "default",
            "description",
            "nullable",
            "additionalProperties",
            "x-kubernetes-preserve-unknown-fields",
            "x-kubernetes-embedded-resource",
            "x-kubernetes-int-or-string",
            "x-kubernetes-list-type",
            "x-kubernetes-list-map-keys",
            "x-kubernetes-map-type",
            "x-kubernetes-validations",
        ] {
            if obj.contains_key(key) {
                self.errors.push(forbidden(
                    &format!("{path}.{key}"),
                    "must be undefined to be structural",
                ));
            }
        }
    }

    fn bool_field(&mut self, obj: &Map<String, Value>, key: &str, path: &str) -> bool {
        match obj.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.errors.push(invalid(
                    &format!("{path}.{key}"),
                    other.clone(),
                    "must be a boolean",
                ));
                false
            }
        }
    }

    fn string_field(&mut self, obj: &Map<String, Value>, key: &str, path: &str) -> Option<String> {
        match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.errors.push(invalid(
                    &format!("{path}.{key}"),
                    other.clone(),
                    "must be a string",
                ));
                None
            }
        }
    }

    fn number_field(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Option<serde_json::Number> {
        match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => Some(n.clone()),
            Some(other) => {
                self.errors.push(invalid(
                    &format!("{path}.{key}"),
                    other.clone(),
                    "must be a number",
                ));
                None
            }
        }
    }

    fn count_field(&mut self, obj: &Map<String, Value>, key: &str, path: &str) -> Option<u64> {
        match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64(),
            Some(other) => {
                self.errors.push(invalid(
                    &format!("{path}.{key}"),
                    other.clone(),
                    "must be a non-negative integer",
                ));
                None
            }
        }
    }

    fn string_list(&mut self, obj: &Map<String, Value>, key: &str, path: &str) -> Vec<String> {
        match obj.get(key) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item.as_str() {
                        Some(s) => out.push(s.to_string()),
                        None => self.errors.push(invalid(
                            &format!("{path}.{key}[{i}]"),
                            item.clone(),
                            "must be a string",
                        )),
                    }
                }
                out
            }
            Some(other) => {
                self.errors.push(invalid(
                    &format!("{path}.{key}"),
                    other.clone(),
                    "must be an array of strings",
                ));
                Vec::new()
            }
        }
    }
}

impl Node {
    /// The schema that applies to the value under `key` of an object described by this node.
    pub(crate) fn child(&self, key: &str) -> Option<&Node> {
        if let Some(n) = self.properties.get(key) {
            return Some(n);
        }
        match &self.additional {
            Some(Additional::Schema(n)) => Some(n),
            _ => None,
        }
    }
}
