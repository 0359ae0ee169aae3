//! The Sandboxes carrying one pool label, split so a pool pass does work proportional to what
//! needs a decision rather than to the pool's size.
//!
//! Most of a settled pool is "quiet": live, Ready, labelled `launch-type: warm` and controlled
//! by the pool. A pass only counts such members (they are active and Ready, nothing to do),
//! unless the pool must vet them against its template (a Recreate pool, and only members whose
//! template labels differ from the current ones) or it deleted one and must count it as
//! terminating. Quiet members are therefore kept in sets by [`QuietClass`] (controller UID and
//! the two template labels), so a pass counts a whole class with one `len()`; every other
//! labelled Sandbox (not Ready, being deleted, an orphan, relabel needed) is looked at.
//!
//! The group is kept by [`crate::stores::sandbox_index`] from the watch (filed on add and modify,
//! unfiled on delete, rebuilt from scratch on a relist).

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use api_types::Sandbox;
use api_types::conditions::{READY, is_true};
use api_types::keys::{
    SANDBOX_LAUNCH_TYPE_LABEL, SANDBOX_LAUNCH_TYPE_WARM, SANDBOX_TEMPLATE_HASH_LABEL,
    SANDBOX_TEMPLATE_REF_HASH_LABEL,
};

/// What a quiet member is counted under: its controller and its template labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QuietClass {
    /// UID of the controlling owner.
    pub controller: String,
    /// `agents.x-k8s.io/sandbox-template-ref-hash`.
    pub template_ref_hash: Option<String>,
    /// `agents.x-k8s.io/sandbox-template-hash`.
    pub blueprint_hash: Option<String>,
}

impl QuietClass {
    /// The class of a quiet Sandbox: not being deleted, Ready, labelled `launch-type: warm`,
    /// with a controlling owner. `None` for every other Sandbox (a pass looks at those).
    pub fn of(sb: &Sandbox) -> Option<QuietClass> {
        let meta = &sb.metadata;
        if meta.deletion_timestamp.is_some() {
            return None;
        }
        let labels = meta.labels.as_ref()?;
        if labels.get(SANDBOX_LAUNCH_TYPE_LABEL).map(String::as_str)
            != Some(SANDBOX_LAUNCH_TYPE_WARM)
        {
            return None;
        }
        if !sb
            .status
            .as_ref()
            .is_some_and(|s| is_true(&s.conditions, READY))
        {
            return None;
        }
        let controller = crate::ownership::controller_of(meta)?;
        Some(QuietClass {
            controller: controller.uid.clone(),
            template_ref_hash: labels.get(SANDBOX_TEMPLATE_REF_HASH_LABEL).cloned(),
            blueprint_hash: labels.get(SANDBOX_TEMPLATE_HASH_LABEL).cloned(),
        })
    }
}

/// The Sandboxes with one pool label in one namespace, quiet ones by class.
#[derive(Debug)]
pub struct LabelGroup<K> {
    quiet: HashMap<QuietClass, HashSet<K>>,
    rest: HashSet<K>,
}

impl<K> Default for LabelGroup<K> {
    fn default() -> Self {
        LabelGroup {
            quiet: HashMap::new(),
            rest: HashSet::new(),
        }
    }
}

/// What a pass reads from a group: how many members it may count without a look, and the
/// keys of those it must look at.
#[derive(Debug)]
pub struct Census<'a, K> {
    pub quiet: usize,
    pub look: Vec<&'a K>,
}

impl<K: Eq + Hash> LabelGroup<K> {
    pub fn insert(&mut self, key: K, class: Option<&QuietClass>) {
        match class {
            Some(class) => {
                if let Some(set) = self.quiet.get_mut(class) {
                    set.insert(key);
                } else {
                    self.quiet.insert(class.clone(), HashSet::from([key]));
                }
            }
            None => {
                self.rest.insert(key);
            }
        }
    }

    pub fn remove<Q>(&mut self, key: &Q, class: Option<&QuietClass>)
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        match class {
            Some(class) => {
                if let Some(set) = self.quiet.get_mut(class) {
                    set.remove(key);
                    if set.is_empty() {
                        self.quiet.remove(class);
                    }
                }
            }
            None => {
                self.rest.remove(key);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.quiet.is_empty() && self.rest.is_empty()
    }

    /// Every Sandbox in the group.
    pub fn all(&self) -> impl Iterator<Item = &K> {
        self.quiet.values().flatten().chain(&self.rest)
    }

    /// Counts the quiet members of the classes `countable` accepts, except those `must_look`
    /// names; lists everything else.
    pub fn census<'a>(
        &'a self,
        countable: impl Fn(&QuietClass) -> bool,
        must_look: &[&'a K],
    ) -> Census<'a, K> {
        let mut census = Census {
            quiet: 0,
            look: self.rest.iter().collect(),
        };
        for (class, members) in &self.quiet {
            if !countable(class) {
                census.look.extend(members);
                continue;
            }
            census.quiet += members.len();
            let mut taken: Vec<&K> = Vec::new();
            for key in must_look {
                if let Some(member) = members.get(*key)
                    && !taken.contains(&member)
                {
                    taken.push(member);
                    census.quiet -= 1;
                    census.look.push(member);
                }
            }
        }
        census
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(controller: &str, blueprint: &str) -> QuietClass {
        QuietClass {
            controller: controller.into(),
            template_ref_hash: Some("ref".into()),
            blueprint_hash: Some(blueprint.into()),
        }
    }

    fn sorted<'a>(mut look: Vec<&&'a str>) -> Vec<&'a str> {
        look.sort();
        look.into_iter().copied().collect()
    }

    #[test]
    fn counts_accepted_classes_and_lists_the_rest() {
        let mut group = LabelGroup::default();
        group.insert("a", Some(&class("pool", "v1")));
        group.insert("b", Some(&class("pool", "v1")));
        group.insert("c", Some(&class("pool", "v0")));
        group.insert("d", Some(&class("other", "v1")));
        group.insert("e", None);
        let census = group.census(|c| c.controller == "pool" && c == &class("pool", "v1"), &[]);
        assert_eq!(census.quiet, 2);
        assert_eq!(sorted(census.look), ["c", "d", "e"]);

        // A member the pass must look at (it deleted it) is listed instead of counted.
        let census = group.census(|c| c.controller == "pool", &[&"a", &"e", &"zz", &"a"]);
        assert_eq!(census.quiet, 2, "b and c");
        assert_eq!(sorted(census.look), ["a", "d", "e"]);
    }

    #[test]
    fn follows_moves_between_classes_and_empties() {
        let mut group = LabelGroup::default();
        group.insert("a", None);
        group.remove(&"a", None);
        group.insert("a", Some(&class("pool", "v1")));
        assert_eq!(group.census(|_| true, &[]).quiet, 1);
        group.remove(&"a", Some(&class("pool", "v1")));
        group.insert("a", Some(&class("pool", "v2")));
        assert_eq!(group.census(|c| c == &class("pool", "v1"), &[]).quiet, 0);
        assert_eq!(group.all().count(), 1);
        group.remove(&"a", Some(&class("pool", "v2")));
        assert!(group.is_empty());
    }
}
