//! [`JsonText`]: a JSON value kept as its text, written while it is parsed (no value tree).
//!
//! `serde_json::value::RawValue` does the same only when it is handed the JSON input itself: a
//! value serde buffered first (an internally or adjacently tagged enum such as a watch event
//! whose `object` arrives before its `type`, or a `serde_json::Value`) cannot be taken raw, and
//! the whole decode fails. `JsonText` re-writes whatever the deserializer visits, so it works
//! behind any of them.

use std::fmt;
use std::io::Write as _;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value as compact text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonText(pub Box<str>);

impl JsonText {
    /// The text.
    pub fn get(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut out = Vec::with_capacity(256);
        deserializer.deserialize_any(Writer(&mut out))?;
        // Only valid UTF-8 is written (strings come from `&str`, the rest is ASCII).
        String::from_utf8(out)
            .map(|s| JsonText(s.into_boxed_str()))
            .map_err(de::Error::custom)
    }
}

/// Writes what it visits to the buffer as JSON.
struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn string<E: de::Error>(self, v: &str) -> Result<(), E> {
        serde_json::to_writer(&mut *self.0, v).map_err(E::custom)
    }
}

impl<'de> DeserializeSeed<'de> for Writer<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Writer<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.0.extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        write!(self.0, "{v}").map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        write!(self.0, "{v}").map_err(E::custom)
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<(), E> {
        write!(self.0, "{v}").map_err(E::custom)
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<(), E> {
        write!(self.0, "{v}").map_err(E::custom)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        // As serde_json writes it (`null` for what JSON cannot hold).
        serde_json::to_writer(&mut *self.0, &v).map_err(E::custom)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.string(v)
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<(), E> {
        match std::str::from_utf8(v) {
            Ok(s) => self.string(s),
            Err(e) => Err(E::custom(e)),
        }
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.0.extend_from_slice(b"null");
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.visit_none()
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push(b'[');
        let mut first = true;
        loop {
            if !first {
                self.0.push(b',');
            }
            if seq.next_element_seed(Writer(&mut *self.0))?.is_none() {
                if !first {
                    // The comma written for an element that did not come.
                    self.0.pop();
                }
                break;
            }
            first = false;
        }
        self.0.push(b']');
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.push(b'{');
        let mut first = true;
        loop {
            if !first {
                self.0.push(b',');
            }
            if map.next_key_seed(Key(&mut *self.0))?.is_none() {
                if !first {
                    self.0.pop();
                }
                break;
            }
            self.0.push(b':');
            map.next_value_seed(Writer(&mut *self.0))?;
            first = false;
        }
        self.0.push(b'}');
        Ok(())
    }
}

/// An object key: always written as a JSON string.
struct Key<'a>(&'a mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        serde_json::to_writer(&mut *self.0, v).map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn samples() -> Vec<Value> {
        vec![
            json!(null),
            json!(true),
            json!(-3),
            json!(18446744073709551615u64),
            json!(1.5),
            json!("é \"q\" \\ \n \u{1F600}"),
            json!([]),
            json!({}),
            json!([1, [2, [3, {}]], {"a": null}]),
            json!({"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": null}],
                                   "ports": [{"containerPort": 80}]}],
                   "nodeSelector": {"k\"ey": "v"}, "terminationGracePeriodSeconds": 0,
                   "nested": {"deep": {"deeper": [true, false, 0.25]}}}),
        ]
    }

    #[test]
    fn the_text_is_the_value_from_json_input() {
        for v in samples() {
            let text: JsonText = serde_json::from_str(&v.to_string()).unwrap();
            assert_eq!(serde_json::from_str::<Value>(text.get()).unwrap(), v);
        }
    }

    #[test]
    fn the_text_is_the_value_behind_a_buffering_deserializer() {
        /// A watch event whose `object` comes before its `type`: serde buffers the object.
        #[derive(serde::Deserialize)]
        #[serde(tag = "type", content = "object")]
        enum Event {
            #[serde(rename = "ADDED")]
            Added(JsonText),
        }
        for v in samples() {
            let event = format!(r#"{{"object":{v},"type":"ADDED"}}"#);
            let Event::Added(text) = serde_json::from_str(&event).unwrap();
            assert_eq!(serde_json::from_str::<Value>(text.get()).unwrap(), v);
            let text: JsonText = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(serde_json::from_str::<Value>(text.get()).unwrap(), v);
        }
    }
}
