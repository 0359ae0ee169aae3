//! The protobuf field table of the built-in kinds (`schema.json`, generated from client-go's
//! scheme by `tests/protobuf-client/schema`), loaded once.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;

/// A protobuf scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    String,
    Bytes,
    Bool,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Double,
}

/// What a field holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Scalar(Scalar),
    /// A message of the table, by index.
    Message(usize),
    /// `metav1.Time`: `{seconds, nanos}`, RFC 3339 in JSON (whole seconds).
    Time,
    /// `metav1.MicroTime`: as `Time`, with microseconds in JSON.
    MicroTime,
    /// `metav1.Duration`: `{duration}` nanoseconds, Go's duration text in JSON.
    Duration,
    /// `resource.Quantity`: `{string}`, the string in JSON.
    Quantity,
    /// `intstr.IntOrString`: `{type, intVal, strVal}`, a number or a string in JSON.
    IntOrString,
    /// `runtime.RawExtension`, `metav1.FieldsV1`: `{raw}` JSON bytes, embedded in JSON.
    Raw,
}

/// One field of a message.
#[derive(Debug, Clone)]
pub struct Field {
    pub number: u32,
    pub json: String,
    pub kind: Kind,
    /// `map<key, value>`: `kind` is the value's, this the key's.
    pub map_key: Option<Kind>,
    pub repeated: bool,
    /// A Go pointer: present when set, whatever the value.
    pub pointer: bool,
    /// `omitempty` in the Go JSON tag.
    pub omitempty: bool,
    /// Embedded in JSON (`json:",inline"`), a field of its own in protobuf.
    pub inline: bool,
}

#[derive(Debug)]
pub struct Message {
    /// Sorted by number.
    pub fields: Vec<Field>,
}

impl Message {
    pub fn field(&self, number: u32) -> Option<&Field> {
        self.fields
            .binary_search_by_key(&number, |f| f.number)
            .ok()
            .map(|i| &self.fields[i])
    }
}

#[derive(Debug)]
pub struct Schema {
    pub messages: Vec<Message>,
    /// `apiVersion/Kind` (`v1/Pod`, `apps/v1/Deployment`) to its message.
    kinds: HashMap<String, usize>,
}

impl Schema {
    /// The message of a kind at an API version, if devcluster speaks protobuf for it.
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<usize> {
        self.kinds.get(&format!("{api_version}/{kind}")).copied()
    }
}

#[derive(Deserialize)]
struct Table {
    messages: HashMap<String, Vec<(u32, String, String, String)>>,
    kinds: HashMap<String, String>,
}

/// The table, parsed on first use.
pub fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let table: Table = serde_json::from_str(include_str!("schema.json"))
            .unwrap_or_else(|e| panic!("protobuf/schema.json is generated and valid: {e}"));
        build(table)
    })
}

fn build(table: Table) -> Schema {
    let mut names: Vec<&String> = table.messages.keys().collect();
    names.sort();
    let index: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let kind_of = |text: &str| -> Kind {
        match text {
            "string" => Kind::Scalar(Scalar::String),
            "bytes" => Kind::Scalar(Scalar::Bytes),
            "bool" => Kind::Scalar(Scalar::Bool),
            "int32" => Kind::Scalar(Scalar::Int32),
            "int64" => Kind::Scalar(Scalar::Int64),
            "uint32" => Kind::Scalar(Scalar::Uint32),
            "uint64" => Kind::Scalar(Scalar::Uint64),
            "double" => Kind::Scalar(Scalar::Double),
            "time" => Kind::Time,
            "microtime" => Kind::MicroTime,
            "duration" => Kind::Duration,
            "quantity" => Kind::Quantity,
            "intorstring" => Kind::IntOrString,
            "raw" => Kind::Raw,
            other => match other.strip_prefix("msg:").and_then(|n| index.get(n)) {
                Some(i) => Kind::Message(*i),
                None => panic!("protobuf/schema.json: unknown value kind {other}"),
            },
        }
    };
    let messages = names
        .iter()
        .map(|name| {
            let mut fields: Vec<Field> = table.messages[*name]
                .iter()
                .map(|(number, json, value, flags)| {
                    let (kind, map_key) = match value.strip_prefix("map:") {
                        Some(kv) => {
                            let (k, v) = kv.split_once(':').unwrap_or((kv, "string"));
                            (kind_of(v), Some(kind_of(k)))
                        }
                        None => (kind_of(value), None),
                    };
                    Field {
                        number: *number,
                        json: json.clone(),
                        kind,
                        map_key,
                        repeated: flags.contains('r'),
                        pointer: flags.contains('p'),
                        omitempty: flags.contains('o'),
                        inline: flags.contains('i'),
                    }
                })
                .collect();
            fields.sort_by_key(|f| f.number);
            Message { fields }
        })
        .collect();
    let kinds = table
        .kinds
        .iter()
        .filter_map(|(k, name)| index.get(name.as_str()).map(|i| (k.clone(), *i)))
        .collect();
    Schema { messages, kinds }
}
