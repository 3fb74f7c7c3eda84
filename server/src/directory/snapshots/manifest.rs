//! Directory manifests: the bytes that name a directory's children in
//! the snapshot store. A manifest is stored under the SHA-256 of its bytes,
//! so the encoding is part of the store's format: the same tree must give
//! the same bytes in every run and every version, and bytes that are not a
//! manifest (corrupt, cut short, out of order) must be refused rather than
//! read as a smaller tree.

use super::{FileIdentity, Hash};
use wsfs::Permissions;

/// One child in a directory manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Node {
    File {
        /// The stored bytes.
        size: u64,
        hash: Hash,
        /// What the file was when it was hashed.
        identity: FileIdentity,
    },
    Dir {
        tree: Hash,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TreeItem {
    pub(super) name: String,
    pub(super) node: Node,
    pub(super) permissions: Permissions,
}

/// A directory manifest: its children, sorted by name bytewise.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Tree {
    pub(super) items: Vec<TreeItem>,
}

/// Manifests with each child's permission bits; [`TREE_MAGIC_V1`] ones,
/// written before bits were kept, still load, with the defaults.
const TREE_MAGIC: &[u8] = b"wsfs-tree 2\n";
const TREE_MAGIC_V1: &[u8] = b"wsfs-tree 1\n";
const FILE_TAG: u8 = 1;
const DIR_TAG: u8 = 2;

impl Tree {
    pub(super) fn get(&self, name: &str) -> Option<&Node> {
        self.items
            .binary_search_by(|i| i.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.items[i].node)
    }

    /// The manifest's bytes: a magic line, then per child a tag byte, the
    /// name (u16 length, bytes), and for a file its size, hash, inode,
    /// identity size, mtime and ctime (ns); for a directory its manifest's
    /// hash; then its permission bits (u32). Integers little-endian.
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(TREE_MAGIC.len() + self.items.len() * 100);
        out.extend_from_slice(TREE_MAGIC);
        for item in &self.items {
            let name = item.name.as_bytes();
            match &item.node {
                Node::File { .. } => out.push(FILE_TAG),
                Node::Dir { .. } => out.push(DIR_TAG),
            }
            // Names are path segments, far below u16::MAX bytes.
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(name);
            match &item.node {
                Node::File {
                    size,
                    hash,
                    identity,
                } => {
                    out.extend_from_slice(&size.to_le_bytes());
                    out.extend_from_slice(hash);
                    out.extend_from_slice(&identity.ino.to_le_bytes());
                    out.extend_from_slice(&identity.size.to_le_bytes());
                    out.extend_from_slice(&identity.mtime_ns.to_le_bytes());
                    out.extend_from_slice(&identity.ctime_ns.to_le_bytes());
                }
                Node::Dir { tree } => out.extend_from_slice(tree),
            }
            out.extend_from_slice(&item.permissions.bits().to_le_bytes());
        }
        out
    }

    pub(super) fn decode(raw: &[u8]) -> Option<Tree> {
        let (mut r, with_bits) = match raw.strip_prefix(TREE_MAGIC) {
            Some(r) => (r, true),
            None => (raw.strip_prefix(TREE_MAGIC_V1)?, false),
        };
        fn take<'a>(r: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            let (head, rest) = r.split_at_checked(n)?;
            *r = rest;
            Some(head)
        }
        fn u64_of(r: &mut &[u8]) -> Option<u64> {
            Some(u64::from_le_bytes(take(r, 8)?.try_into().ok()?))
        }
        fn hash_of(r: &mut &[u8]) -> Option<Hash> {
            take(r, 32)?.try_into().ok()
        }
        let mut items: Vec<TreeItem> = Vec::new();
        while !r.is_empty() {
            let tag = take(&mut r, 1)?[0];
            let len = u16::from_le_bytes(take(&mut r, 2)?.try_into().ok()?);
            let name = std::str::from_utf8(take(&mut r, usize::from(len))?).ok()?;
            let node = match tag {
                FILE_TAG => Node::File {
                    size: u64_of(&mut r)?,
                    hash: hash_of(&mut r)?,
                    identity: FileIdentity {
                        ino: u64_of(&mut r)?,
                        size: u64_of(&mut r)?,
                        mtime_ns: u64_of(&mut r)? as i64,
                        ctime_ns: u64_of(&mut r)? as i64,
                    },
                },
                DIR_TAG => Node::Dir {
                    tree: hash_of(&mut r)?,
                },
                _ => return None,
            };
            let permissions = if with_bits {
                Permissions::masked(u32::from_le_bytes(take(&mut r, 4)?.try_into().ok()?))
            } else if tag == DIR_TAG {
                Permissions::DIRECTORY_DEFAULT
            } else {
                Permissions::FILE_DEFAULT
            };
            if items.last().is_some_and(|last| last.name.as_str() >= name) {
                return None;
            }
            items.push(TreeItem {
                name: name.to_string(),
                node,
                permissions,
            });
        }
        Some(Tree { items })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, permissions: u32) -> TreeItem {
        TreeItem {
            name: name.to_string(),
            node: Node::File {
                size: 3,
                hash: [7; 32],
                identity: FileIdentity {
                    ino: 1,
                    size: 3,
                    mtime_ns: 1_600_000_000_000_000_000,
                    ctime_ns: 2,
                },
            },
            permissions: Permissions::masked(permissions),
        }
    }

    #[test]
    fn manifests_round_trip_each_entrys_bits() {
        let tree = Tree {
            items: vec![
                file("run.sh", 0o755),
                TreeItem {
                    name: "secret".into(),
                    node: Node::Dir { tree: [9; 32] },
                    permissions: Permissions::masked(0o700),
                },
            ],
        };
        assert_eq!(Tree::decode(&tree.encode()), Some(tree));
    }

    /// A manifest written before bits were kept: the same layout without
    /// the bits, under the first magic line. It loads with the defaults.
    #[test]
    fn manifests_without_bits_load_with_the_defaults() {
        let tree = Tree {
            items: vec![file("a", 0o600)],
        };
        let v2 = tree.encode();
        let body = &v2[TREE_MAGIC.len()..v2.len() - 4];
        let v1 = [TREE_MAGIC_V1, body].concat();
        let loaded = Tree::decode(&v1).expect("an old manifest loads");
        assert_eq!(loaded.items[0].permissions, Permissions::FILE_DEFAULT);
        assert_eq!(loaded.items[0].node, tree.items[0].node);
        assert_eq!(
            Tree::decode(&[TREE_MAGIC_V1, &v2[TREE_MAGIC.len()..]].concat()),
            None
        );
    }

    fn dir(name: &str, tree: u8) -> TreeItem {
        TreeItem {
            name: name.to_string(),
            node: Node::Dir { tree: [tree; 32] },
            permissions: Permissions::masked(0o750),
        }
    }

    /// Three children of both kinds, in name order.
    fn sample() -> Tree {
        Tree {
            items: vec![file("a.txt", 0o644), dir("b", 1), file("c", 0o600)],
        }
    }

    #[test]
    fn a_manifest_with_many_children_round_trips_and_finds_each_by_name() {
        let tree = sample();
        let loaded = Tree::decode(&tree.encode()).expect("a manifest loads");
        assert_eq!(loaded, tree);
        assert_eq!(loaded.get("b"), Some(&Node::Dir { tree: [1; 32] }));
        assert_eq!(loaded.get("c"), Some(&tree.items[2].node));
        assert_eq!(loaded.get("bb"), None);
        assert_eq!(Tree::decode(TREE_MAGIC), Some(Tree::default()));
    }

    /// A manifest's name is the SHA-256 of its bytes: a tree encodes to
    /// the same bytes in every run, so unchanged directories keep their
    /// stored manifests. These are the bytes of today's format.
    #[test]
    fn the_same_tree_always_encodes_to_the_same_bytes_and_hash() {
        use sha2::{Digest, Sha256};
        let bytes = sample().encode();
        assert_eq!(bytes, sample().encode());
        assert_eq!(super::super::hex(&Sha256::digest(&bytes)), GOLDEN_SHA256);
    }

    /// The SHA-256 of `sample()` laid out as [`Tree::encode`] documents it
    /// (worked out apart from this code).
    const GOLDEN_SHA256: &str = "8c1be0bf60cde2a0cd228c9d294f2b6749a7e3c15e9bccecbb562672fee99ae8";

    #[test]
    fn bytes_that_are_not_a_manifest_are_refused() {
        let good = sample().encode();
        let body = &good[TREE_MAGIC.len()..];
        assert_eq!(Tree::decode(b""), None);
        assert_eq!(Tree::decode(&[b"wsfs-tree 3\n", body].concat()), None);
        assert_eq!(Tree::decode(body), None);
        // An unknown tag in place of the first child's.
        let mut bad_tag = good.clone();
        bad_tag[TREE_MAGIC.len()] = 3;
        assert_eq!(Tree::decode(&bad_tag), None);
        // A name that is not UTF-8 (the first byte of "a.txt").
        let mut bad_name = good.clone();
        bad_name[TREE_MAGIC.len() + 3] = 0xff;
        assert_eq!(Tree::decode(&bad_name), None);
        // Bytes after the last child that do not make one.
        assert_eq!(Tree::decode(&[&good[..], &[FILE_TAG]].concat()), None);
    }

    /// Cut anywhere, a manifest is refused, except exactly between two
    /// children, where it is the children before the cut.
    #[test]
    fn a_manifest_cut_short_is_refused_or_is_its_first_children() {
        let tree = sample();
        let good = tree.encode();
        let mut boundaries = vec![TREE_MAGIC.len()];
        for n in 1..=tree.items.len() {
            let prefix = Tree {
                items: tree.items[..n].to_vec(),
            };
            boundaries.push(prefix.encode().len());
        }
        assert_eq!(boundaries.last(), Some(&good.len()));
        for cut in TREE_MAGIC.len()..good.len() {
            let decoded = Tree::decode(&good[..cut]);
            match boundaries.iter().position(|&b| b == cut) {
                Some(n) => assert_eq!(
                    decoded.map(|t| t.items),
                    Some(tree.items[..n].to_vec()),
                    "cut at {cut}"
                ),
                None => assert_eq!(decoded, None, "cut at {cut}"),
            }
        }
    }

    /// Children are sorted by name bytewise, each name once: lookups
    /// binary-search them, so a manifest out of order is refused.
    #[test]
    fn children_out_of_order_or_repeated_are_refused() {
        let [a, b, c] = [file("a.txt", 0o644), dir("b", 1), file("c", 0o600)];
        let encode = |items: Vec<TreeItem>| Tree { items }.encode();
        let sorted = encode(vec![a.clone(), b.clone(), c.clone()]);
        assert!(Tree::decode(&sorted).is_some());
        assert_eq!(Tree::decode(&encode(vec![b.clone(), a.clone()])), None);
        assert_eq!(Tree::decode(&encode(vec![a.clone(), c.clone(), b])), None);
        assert_eq!(Tree::decode(&encode(vec![a.clone(), a])), None);
        // Bytewise, not by character: "B" (0x42) sorts before "a" (0x61).
        let upper = file("B", 0o644);
        assert!(Tree::decode(&encode(vec![upper.clone(), c.clone()])).is_some());
        assert_eq!(Tree::decode(&encode(vec![c, upper])), None);
    }
}
