//! Image layers: a reproducible tar of a file tree, compressed with gzip.
//!
//! Reproducible means the same entries give the same bytes on any machine and at any time:
//! entries are sorted by path, every header carries the given modification time, numeric
//! owners (no user or group names), explicit modes, and the gzip header has no name and no
//! time. The tar is written by the `tar` crate, the gzip by `flate2`, digests by `sha2`.

use std::collections::BTreeMap;
use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};

use crate::image::ImageError;

/// What a path in a layer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    Directory,
    File(Vec<u8>),
    Symlink(String),
}

/// One path of a layer with its owner and permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: EntryKind,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
}

impl Entry {
    /// A directory owned by root.
    pub fn dir(mode: u32) -> Self {
        Entry {
            kind: EntryKind::Directory,
            mode,
            uid: 0,
            gid: 0,
        }
    }

    /// A regular file owned by root.
    pub fn file(contents: impl Into<Vec<u8>>, mode: u32) -> Self {
        Entry {
            kind: EntryKind::File(contents.into()),
            mode,
            uid: 0,
            gid: 0,
        }
    }

    /// A symbolic link owned by root.
    pub fn symlink(target: impl Into<String>) -> Self {
        Entry {
            kind: EntryKind::Symlink(target.into()),
            mode: 0o777,
            uid: 0,
            gid: 0,
        }
    }
}

/// A file tree: absolute paths without the leading `/` (`etc/passwd`), sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    entries: BTreeMap<String, Entry>,
}

impl Tree {
    /// Adds `path` and, where missing, its parent directories (root-owned, 0755).
    pub fn insert(&mut self, path: &str, entry: Entry) {
        let path = path.trim_start_matches('/').trim_end_matches('/');
        let mut parent = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(part);
            self.entries
                .entry(parent.clone())
                .or_insert_with(|| Entry::dir(0o755));
        }
        self.entries.insert(path.to_string(), entry);
    }

    /// The entries in path order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries
            .iter()
            .map(|(path, entry)| (path.as_str(), entry))
    }

    /// The entry at `path` (without the leading `/`).
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries.get(path.trim_start_matches('/'))
    }
}

/// A finished layer: its gzip bytes and the two digests an image needs.
#[derive(Debug, Clone)]
pub struct Layer {
    /// The compressed layer (the blob).
    pub gzip: Vec<u8>,
    /// `sha256:` of the compressed bytes: the blob digest in the manifest.
    pub digest: String,
    /// `sha256:` of the uncompressed tar: the `diff_id` in the image configuration.
    pub diff_id: String,
    /// Size of the uncompressed tar.
    pub tar_size: u64,
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

/// Lower-case hexadecimal.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

/// The tar of `tree`, every entry stamped with `mtime` (seconds since the epoch).
pub fn tar_bytes(tree: &Tree, mtime: u64) -> Result<Vec<u8>, ImageError> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, entry) in tree.entries() {
        let mut header = tar::Header::new_ustar();
        header.set_mtime(mtime);
        header.set_uid(entry.uid);
        header.set_gid(entry.gid);
        header.set_mode(entry.mode);
        let result = match &entry.kind {
            EntryKind::Directory => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                builder.append_data(&mut header, format!("{path}/"), std::io::empty())
            }
            EntryKind::File(contents) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(contents.len() as u64);
                builder.append_data(&mut header, path, contents.as_slice())
            }
            EntryKind::Symlink(target) => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                builder.append_link(&mut header, path, target)
            }
        };
        result.map_err(|e| ImageError::Archive(format!("cannot add {path} to a layer: {e}")))?;
    }
    builder
        .into_inner()
        .map_err(|e| ImageError::Archive(format!("cannot finish a layer: {e}")))
}

/// Gzip of `bytes` at the best compression, with an empty gzip header (no name, no time).
pub fn gzip(bytes: &[u8]) -> Result<Vec<u8>, ImageError> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
    encoder
        .write_all(bytes)
        .and_then(|()| encoder.finish())
        .map_err(|e| ImageError::Archive(format!("cannot compress a layer: {e}")))
}

/// Builds the layer of `tree`.
pub fn build_layer(tree: &Tree, mtime: u64) -> Result<Layer, ImageError> {
    let tar = tar_bytes(tree, mtime)?;
    let gzip = gzip(&tar)?;
    Ok(Layer {
        digest: sha256_digest(&gzip),
        diff_id: sha256_digest(&tar),
        tar_size: tar.len() as u64,
        gzip,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Tree {
        let mut tree = Tree::default();
        tree.insert(
            "etc/passwd",
            Entry::file("root:x:0:0::/root:/sbin/nologin\n", 0o644),
        );
        tree.insert("tmp", Entry::dir(0o1777));
        tree.insert("lib64/ld.so", Entry::symlink("/lib/ld.so"));
        tree
    }

    #[test]
    fn parents_are_added_and_entries_are_sorted() {
        let tree = sample();
        let paths: Vec<&str> = tree.entries().map(|(path, _)| path).collect();
        assert_eq!(paths, ["etc", "etc/passwd", "lib64", "lib64/ld.so", "tmp"]);
        assert_eq!(tree.get("/etc").unwrap(), &Entry::dir(0o755));
    }

    #[test]
    fn the_same_tree_gives_the_same_digests_and_the_time_is_in_them() {
        let first = build_layer(&sample(), 1_700_000_000).unwrap();
        let second = build_layer(&sample(), 1_700_000_000).unwrap();
        assert_eq!(first.digest, second.digest);
        assert_eq!(first.diff_id, second.diff_id);
        let later = build_layer(&sample(), 1_700_000_001).unwrap();
        assert_ne!(first.diff_id, later.diff_id);
    }

    #[test]
    fn the_tar_reads_back_with_owners_modes_and_times() {
        let mut tree = sample();
        let mut owned = Entry::file("x", 0o555);
        owned.uid = 65532;
        owned.gid = 65532;
        tree.insert("app", owned);
        let layer = build_layer(&tree, 42).unwrap();
        let decoder = flate2::read::GzDecoder::new(layer.gzip.as_slice());
        let mut archive = tar::Archive::new(decoder);
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            let header = entry.header();
            seen.push((
                entry.path().unwrap().to_string_lossy().into_owned(),
                header.mode().unwrap(),
                header.uid().unwrap(),
                header.mtime().unwrap(),
            ));
        }
        assert_eq!(
            seen,
            [
                ("app".to_string(), 0o555, 65532, 42),
                ("etc/".to_string(), 0o755, 0, 42),
                ("etc/passwd".to_string(), 0o644, 0, 42),
                ("lib64/".to_string(), 0o755, 0, 42),
                ("lib64/ld.so".to_string(), 0o777, 0, 42),
                ("tmp/".to_string(), 0o1777, 0, 42),
            ]
        );
    }
}
