//! Interim label/field selectors (equality, `!=`, exists and `!key` only), used until
//! `selector.rs` from the devcluster-patch branch is merged. Same API as the agreed one.

use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(String);

#[derive(Debug, Clone)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    Exists(String),
    Absent(String),
}

fn parse_reqs(s: &str) -> Result<Vec<Req>, SelectorError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((k, v)) = part.split_once("!=") {
            out.push(Req::Ne(k.trim().into(), v.trim().into()));
        } else if let Some((k, v)) = part.split_once("==") {
            out.push(Req::Eq(k.trim().into(), v.trim().into()));
        } else if let Some((k, v)) = part.split_once('=') {
            out.push(Req::Eq(k.trim().into(), v.trim().into()));
        } else if let Some(k) = part.strip_prefix('!') {
            out.push(Req::Absent(k.trim().into()));
        } else if part.contains(' ') || part.contains('(') {
            return Err(SelectorError(format!(
                "set-based requirement {part:?} is not supported yet"
            )));
        } else {
            out.push(Req::Exists(part.into()));
        }
    }
    Ok(out)
}

#[derive(Debug, Clone)]
pub struct LabelSelector(Vec<Req>);

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        parse_reqs(s).map(LabelSelector)
    }
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => labels.get(k) == Some(v),
            Req::Ne(k, v) => labels.get(k) != Some(v),
            Req::Exists(k) => labels.contains_key(k),
            Req::Absent(k) => !labels.contains_key(k),
        })
    }
}

#[derive(Debug, Clone)]
pub struct FieldSelector(Vec<Req>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let reqs = parse_reqs(s)?;
        if reqs
            .iter()
            .any(|r| matches!(r, Req::Exists(_) | Req::Absent(_)))
        {
            return Err(SelectorError(format!("invalid selector: '{s}'")));
        }
        Ok(FieldSelector(reqs))
    }
    pub fn field_names(&self) -> Vec<&str> {
        self.0
            .iter()
            .map(|r| match r {
                Req::Eq(k, _) | Req::Ne(k, _) | Req::Exists(k) | Req::Absent(k) => k.as_str(),
            })
            .collect()
    }
    pub fn matches(&self, value_of: impl Fn(&str) -> Option<String>) -> bool {
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => value_of(k).as_deref() == Some(v.as_str()),
            Req::Ne(k, v) => value_of(k).as_deref() != Some(v.as_str()),
            _ => false,
        })
    }
}
