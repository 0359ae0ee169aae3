//! A message of the table to and from its JSON form, as the API server's Go types do it: field
//! numbers and wire types from the table, JSON names and Go's `encoding/json` rules (zero values
//! of `omitempty` fields left out, pointers present when set, inline structs merged).

use base64::Engine as _;
use bytes::Buf as _;
use jiff::Timestamp;
use prost::encoding::{WireType, decode_key, decode_varint, encode_key, encode_varint};
use serde_json::{Map, Number, Value, json};

use super::ProtobufError;
use super::schema::{Field, Kind, Scalar, Schema};

type Result<T> = std::result::Result<T, ProtobufError>;

fn invalid(message: impl Into<String>) -> ProtobufError {
    ProtobufError::Invalid(message.into())
}

/// Decodes message `index` into its JSON object.
pub fn to_json(schema: &Schema, index: usize, mut buf: &[u8]) -> Result<Map<String, Value>> {
    let message = &schema.messages[index];
    let mut out = Map::new();
    let mut inline = Map::new();
    while buf.has_remaining() {
        let (number, wire) = decode_key(&mut buf)?;
        let Some(field) = message.field(number) else {
            skip(wire, &mut buf)?;
            continue;
        };
        if let Some(key_kind) = &field.map_key {
            let entry = length_delimited(wire, &mut buf)?;
            let (key, value) = map_entry(schema, key_kind, &field.kind, entry)?;
            let map = out
                .entry(field.json.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(map) = map {
                map.insert(key, value);
            }
            continue;
        }
        if field.repeated {
            let values = repeated(schema, &field.kind, wire, &mut buf)?;
            let list = out
                .entry(field.json.clone())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(list) = list {
                list.extend(values);
            }
            continue;
        }
        let value = single(schema, &field.kind, wire, &mut buf)?;
        if field.inline {
            if let Value::Object(members) = value {
                inline.extend(members);
            }
            continue;
        }
        out.insert(field.json.clone(), value);
    }
    // Go decodes into a struct, then `encoding/json` writes it: fields left out of the message
    // are zero values, written unless `omitempty` (or a pointer, or a list or map: those are
    // left out here rather than written as `null`); zero values of `omitempty` fields go.
    for field in &message.fields {
        if field.inline || field.map_key.is_some() || field.repeated || field.pointer {
            continue;
        }
        match out.get(&field.json) {
            Some(value) if field.omitempty && is_zero(&field.kind, value) => {
                out.remove(&field.json);
            }
            Some(_) => {}
            None if !field.omitempty => {
                if let Some(zero) = zero_value(schema, &field.kind)? {
                    out.insert(field.json.clone(), zero);
                }
            }
            None => {}
        }
    }
    for (key, value) in inline {
        out.entry(key).or_insert(value);
    }
    Ok(out)
}

fn is_zero(kind: &Kind, value: &Value) -> bool {
    match (kind, value) {
        (_, Value::Null) => true,
        (Kind::Scalar(_) | Kind::Quantity | Kind::Duration, Value::String(s)) => {
            s.is_empty() || (matches!(kind, Kind::Duration) && s == "0s")
        }
        (Kind::Scalar(_), Value::Number(n)) => n.as_f64() == Some(0.0),
        (Kind::Scalar(_), Value::Bool(b)) => !b,
        (Kind::IntOrString, Value::Number(n)) => n.as_i64() == Some(0),
        _ => false,
    }
}

/// The JSON of a field the message left out, as Go writes its zero value.
fn zero_value(schema: &Schema, kind: &Kind) -> Result<Option<Value>> {
    Ok(match kind {
        Kind::Scalar(Scalar::String | Scalar::Bytes) | Kind::Quantity => Some(json!("")),
        Kind::Scalar(Scalar::Bool) => Some(json!(false)),
        Kind::Scalar(_) | Kind::IntOrString => Some(json!(0)),
        Kind::Duration => Some(json!("0s")),
        Kind::Message(index) => Some(Value::Object(to_json(schema, *index, &[])?)),
        Kind::Time | Kind::MicroTime | Kind::Raw => None,
    })
}

fn length_delimited<'a>(wire: WireType, buf: &mut &'a [u8]) -> Result<&'a [u8]> {
    if wire != WireType::LengthDelimited {
        return Err(invalid(format!(
            "expected a length-delimited field, got {wire:?}"
        )));
    }
    let len = usize::try_from(decode_varint(buf)?).map_err(|_| invalid("length overflows"))?;
    if buf.len() < len {
        return Err(invalid("a field runs past the end of the message"));
    }
    let (head, rest) = buf.split_at(len);
    *buf = rest;
    Ok(head)
}

fn skip(wire: WireType, buf: &mut &[u8]) -> Result<()> {
    match wire {
        WireType::Varint => {
            decode_varint(buf)?;
        }
        WireType::SixtyFourBit => take(buf, 8).map(drop)?,
        WireType::ThirtyTwoBit => take(buf, 4).map(drop)?,
        WireType::LengthDelimited => {
            length_delimited(wire, buf)?;
        }
        WireType::StartGroup | WireType::EndGroup => return Err(invalid("groups are not used")),
    }
    Ok(())
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
    if buf.len() < n {
        return Err(invalid("a field runs past the end of the message"));
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Ok(head)
}

fn repeated(schema: &Schema, kind: &Kind, wire: WireType, buf: &mut &[u8]) -> Result<Vec<Value>> {
    let packable = matches!(
        kind,
        Kind::Scalar(
            Scalar::Bool
                | Scalar::Int32
                | Scalar::Int64
                | Scalar::Uint32
                | Scalar::Uint64
                | Scalar::Double
        )
    );
    if packable && wire == WireType::LengthDelimited {
        let mut packed = length_delimited(wire, buf)?;
        let element_wire = if *kind == Kind::Scalar(Scalar::Double) {
            WireType::SixtyFourBit
        } else {
            WireType::Varint
        };
        let mut values = Vec::new();
        while packed.has_remaining() {
            values.push(single(schema, kind, element_wire, &mut packed)?);
        }
        return Ok(values);
    }
    Ok(vec![single(schema, kind, wire, buf)?])
}

fn map_entry(
    schema: &Schema,
    key_kind: &Kind,
    value_kind: &Kind,
    mut entry: &[u8],
) -> Result<(String, Value)> {
    let mut key = None;
    let mut value = None;
    while entry.has_remaining() {
        let (number, wire) = decode_key(&mut entry)?;
        match number {
            1 => key = Some(single(schema, key_kind, wire, &mut entry)?),
            2 => value = Some(single(schema, value_kind, wire, &mut entry)?),
            _ => skip(wire, &mut entry)?,
        }
    }
    let key = match key {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let value = match value {
        Some(v) => v,
        None => zero_value(schema, value_kind)?.unwrap_or(Value::Null),
    };
    Ok((key, value))
}

fn varint(wire: WireType, buf: &mut &[u8]) -> Result<u64> {
    if wire != WireType::Varint {
        return Err(invalid(format!("expected a varint, got {wire:?}")));
    }
    Ok(decode_varint(buf)?)
}

fn utf8(bytes: &[u8]) -> Result<String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| invalid("a string is not UTF-8"))
}

/// One value of `kind` (the wire's own type checked).
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
fn single(schema: &Schema, kind: &Kind, wire: WireType, buf: &mut &[u8]) -> Result<Value> {
    Ok(match kind {
        Kind::Scalar(Scalar::String) => Value::String(utf8(length_delimited(wire, buf)?)?),
        Kind::Scalar(Scalar::Bytes) => Value::String(
            base64::engine::general_purpose::STANDARD.encode(length_delimited(wire, buf)?),
        ),
        Kind::Scalar(Scalar::Bool) => Value::Bool(varint(wire, buf)? != 0),
        Kind::Scalar(Scalar::Int32) => json!(varint(wire, buf)? as i64 as i32),
        Kind::Scalar(Scalar::Int64) => json!(varint(wire, buf)? as i64),
        Kind::Scalar(Scalar::Uint32) => json!(varint(wire, buf)? as u32),
        Kind::Scalar(Scalar::Uint64) => json!(varint(wire, buf)?),
        Kind::Scalar(Scalar::Double) => {
            if wire != WireType::SixtyFourBit {
                return Err(invalid("expected a 64-bit double"));
            }
            let bits = u64::from_le_bytes(take(buf, 8)?.try_into().unwrap_or_default());
            Number::from_f64(f64::from_bits(bits)).map_or(Value::Null, Value::Number)
        }
        Kind::Message(index) => {
            Value::Object(to_json(schema, *index, length_delimited(wire, buf)?)?)
        }
        Kind::Time | Kind::MicroTime => {
            let fields = numbered(length_delimited(wire, buf)?)?;
            let seconds = fields.varint(1) as i64;
            let nanos = fields.varint(2) as i64 as i32;
            let at = Timestamp::new(seconds, nanos).map_err(|e| invalid(e.to_string()))?;
            let format = if *kind == Kind::Time {
                "%Y-%m-%dT%H:%M:%SZ"
            } else {
                "%Y-%m-%dT%H:%M:%S%.6fZ"
            };
            Value::String(at.strftime(format).to_string())
        }
        Kind::Duration => {
            let fields = numbered(length_delimited(wire, buf)?)?;
            Value::String(go_duration(fields.varint(1) as i64))
        }
        Kind::Quantity => {
            let fields = numbered(length_delimited(wire, buf)?)?;
            Value::String(utf8(fields.bytes(1))?)
        }
        Kind::IntOrString => {
            let fields = numbered(length_delimited(wire, buf)?)?;
            if fields.varint(1) == 1 {
                Value::String(utf8(fields.bytes(3))?)
            } else {
                json!(fields.varint(2) as i64 as i32)
            }
        }
        Kind::Raw => {
            let fields = numbered(length_delimited(wire, buf)?)?;
            let raw = fields.bytes(1);
            if raw.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(raw)
                    .map_err(|e| invalid(format!("embedded JSON is not valid: {e}")))?
            }
        }
    })
}

/// The fields of a small message by number (varints and bytes), last one winning.
struct Numbered<'a> {
    varints: [(u32, u64); 4],
    bytes: [(u32, &'a [u8]); 4],
}

impl<'a> Numbered<'a> {
    fn varint(&self, number: u32) -> u64 {
        self.varints
            .iter()
            .find(|(n, _)| *n == number)
            .map_or(0, |(_, v)| *v)
    }

    fn bytes(&self, number: u32) -> &'a [u8] {
        self.bytes
            .iter()
            .find(|(n, _)| *n == number)
            .map_or(&[], |(_, v)| v)
    }
}

fn numbered(mut buf: &[u8]) -> Result<Numbered<'_>> {
    let mut out = Numbered {
        varints: [(0, 0); 4],
        bytes: [(0, &[]); 4],
    };
    while buf.has_remaining() {
        let (number, wire) = decode_key(&mut buf)?;
        let slot = usize::try_from(number).unwrap_or(usize::MAX);
        match wire {
            WireType::Varint if slot < 4 => out.varints[slot] = (number, decode_varint(&mut buf)?),
            WireType::LengthDelimited if slot < 4 => {
                out.bytes[slot] = (number, length_delimited(wire, &mut buf)?);
            }
            other => skip(other, &mut buf)?,
        }
    }
    Ok(out)
}

/// Go's `time.Duration.String()`: `1h2m3.5s`, `300ms`, `0s`.
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (value, unit) = if n < 1_000 {
            (n as f64, "ns")
        } else if n < 1_000_000 {
            (n as f64 / 1e3, "µs")
        } else {
            (n as f64 / 1e6, "ms")
        };
        return format!("{sign}{value}{unit}");
    }
    let hours = n / 3_600_000_000_000;
    let minutes = n / 60_000_000_000 % 60;
    let seconds = (n % 60_000_000_000) as f64 / 1e9;
    let mut out = sign.to_string();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&format!("{seconds}s"));
    out
}

/// Parses Go's duration text (`1h30m`, `1.5s`, `250ms`) into nanoseconds.
#[allow(clippy::cast_possible_truncation)]
fn parse_go_duration(text: &str) -> Result<i64> {
    let bad = || invalid(format!("invalid duration {text:?}"));
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..number_len].parse().map_err(|_| bad())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    let nanos = total.round() as i64;
    Ok(if negative { -nanos } else { nanos })
}

/// Encodes a JSON object as message `index`.
pub fn from_json(
    schema: &Schema,
    index: usize,
    value: &Map<String, Value>,
    out: &mut Vec<u8>,
) -> Result<()> {
    for field in &schema.messages[index].fields {
        if field.inline {
            let Kind::Message(inner) = field.kind else {
                continue;
            };
            let mut nested = Vec::new();
            from_json(schema, inner, value, &mut nested)?;
            write_bytes(field.number, &nested, out);
            continue;
        }
        let Some(v) = value.get(&field.json).filter(|v| !v.is_null()) else {
            continue;
        };
        encode_field(schema, field, v, out).map_err(|e| invalid(format!("{}: {e}", field.json)))?;
    }
    Ok(())
}

fn encode_field(schema: &Schema, field: &Field, value: &Value, out: &mut Vec<u8>) -> Result<()> {
    if let Some(key_kind) = &field.map_key {
        let Value::Object(map) = value else {
            return Err(invalid("expected an object"));
        };
        let mut keys: Vec<&String> = map.keys().collect();
        keys.sort();
        for key in keys {
            let mut entry = Vec::new();
            encode_value(schema, 1, key_kind, &Value::String(key.clone()), &mut entry)?;
            if !map[key].is_null() {
                encode_value(schema, 2, &field.kind, &map[key], &mut entry)?;
            }
            write_bytes(field.number, &entry, out);
        }
        return Ok(());
    }
    if field.repeated {
        let Value::Array(items) = value else {
            return Err(invalid("expected a list"));
        };
        for item in items.iter().filter(|i| !i.is_null()) {
            encode_value(schema, field.number, &field.kind, item, out)?;
        }
        return Ok(());
    }
    encode_value(schema, field.number, &field.kind, value, out)
}

fn write_bytes(number: u32, bytes: &[u8], out: &mut Vec<u8>) {
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn write_varint(number: u32, value: u64, out: &mut Vec<u8>) {
    encode_key(number, WireType::Varint, out);
    encode_varint(value, out);
}

fn integer(value: &Value) -> Result<i64> {
    match value {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .ok_or_else(|| invalid(format!("{n} is not an integer"))),
        Value::String(s) => s
            .parse()
            .map_err(|_| invalid(format!("{s:?} is not an integer"))),
        other => Err(invalid(format!("expected an integer, got {other}"))),
    }
}

#[allow(clippy::cast_sign_loss)]
fn encode_value(
    schema: &Schema,
    number: u32,
    kind: &Kind,
    value: &Value,
    out: &mut Vec<u8>,
) -> Result<()> {
    match kind {
        Kind::Scalar(Scalar::String) => match value {
            Value::String(s) => write_bytes(number, s.as_bytes(), out),
            other => write_bytes(number, other.to_string().as_bytes(), out),
        },
        Kind::Scalar(Scalar::Bytes) => {
            let text = value
                .as_str()
                .ok_or_else(|| invalid("expected base64 text"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| invalid(format!("not base64: {e}")))?;
            write_bytes(number, &bytes, out);
        }
        Kind::Scalar(Scalar::Bool) => {
            let b = value
                .as_bool()
                .ok_or_else(|| invalid("expected a boolean"))?;
            write_varint(number, u64::from(b), out);
        }
        Kind::Scalar(Scalar::Int32 | Scalar::Int64 | Scalar::Uint32 | Scalar::Uint64) => {
            write_varint(number, integer(value)? as u64, out);
        }
        Kind::Scalar(Scalar::Double) => {
            let f = value.as_f64().ok_or_else(|| invalid("expected a number"))?;
            encode_key(number, WireType::SixtyFourBit, out);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Kind::Message(index) => {
            let Value::Object(map) = value else {
                return Err(invalid("expected an object"));
            };
            let mut nested = Vec::new();
            from_json(schema, *index, map, &mut nested)?;
            write_bytes(number, &nested, out);
        }
        Kind::Time | Kind::MicroTime => {
            let text = value.as_str().ok_or_else(|| invalid("expected a time"))?;
            let at: Timestamp = text
                .parse()
                .map_err(|e| invalid(format!("invalid time {text:?}: {e}")))?;
            let mut nested = Vec::new();
            write_varint(1, at.as_second() as u64, &mut nested);
            if *kind == Kind::MicroTime {
                write_varint(
                    2,
                    u64::from(at.subsec_nanosecond().unsigned_abs()),
                    &mut nested,
                );
            }
            write_bytes(number, &nested, out);
        }
        Kind::Duration => {
            let text = value
                .as_str()
                .ok_or_else(|| invalid("expected a duration"))?;
            let mut nested = Vec::new();
            write_varint(1, parse_go_duration(text)? as u64, &mut nested);
            write_bytes(number, &nested, out);
        }
        Kind::Quantity => {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let mut nested = Vec::new();
            write_bytes(1, text.as_bytes(), &mut nested);
            write_bytes(number, &nested, out);
        }
        Kind::IntOrString => {
            let mut nested = Vec::new();
            match value {
                Value::String(s) => {
                    write_varint(1, 1, &mut nested);
                    write_varint(2, 0, &mut nested);
                    write_bytes(3, s.as_bytes(), &mut nested);
                }
                other => {
                    write_varint(1, 0, &mut nested);
                    write_varint(2, integer(other)? as u64, &mut nested);
                    write_bytes(3, b"", &mut nested);
                }
            }
            write_bytes(number, &nested, out);
        }
        Kind::Raw => {
            let raw = serde_json::to_vec(value).map_err(|e| invalid(e.to_string()))?;
            let mut nested = Vec::new();
            write_bytes(1, &raw, &mut nested);
            write_bytes(number, &nested, out);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_round_trip() {
        for (text, nanos) in [
            ("0s", 0),
            ("1.5s", 1_500_000_000),
            ("300ms", 300_000_000),
            ("1h2m3s", 3_723_000_000_000),
            ("2m0s", 120_000_000_000),
        ] {
            assert_eq!(parse_go_duration(text).unwrap(), nanos, "{text}");
            assert_eq!(go_duration(nanos), text);
        }
        assert!(parse_go_duration("soon").is_err());
    }
}
