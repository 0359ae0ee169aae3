//! The name hash used in label values (`sandbox-name-hash`, `warm-pool-sandbox`,
//! `sandbox-template-ref-hash`): 32-bit FNV-1a of the UTF-8 bytes, as 8 lowercase hex digits.
//! Label values must be at most 63 characters, so names are hashed rather than copied.

const FNV32_OFFSET_BASIS: u32 = 0x811c_9dc5;
const FNV32_PRIME: u32 = 0x0100_0193;

/// 32-bit FNV-1a of `name`, rendered as exactly 8 lowercase hex digits.
pub fn name_hash(name: &str) -> String {
    let hash = name.bytes().fold(FNV32_OFFSET_BASIS, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(FNV32_PRIME)
    });
    format!("{hash:08x}")
}

#[cfg(test)]
mod tests {
    use super::name_hash;

    #[test]
    fn matches_published_fnv1a_32_vectors() {
        assert_eq!(name_hash(""), "811c9dc5");
        assert_eq!(name_hash("a"), "e40c292c");
        assert_eq!(name_hash("foobar"), "bf9cf968");
    }

    #[test]
    fn hashes_typical_sandbox_pool_and_template_names() {
        assert_eq!(name_hash("hello-world"), "428d118e");
        assert_eq!(name_hash("python-sandbox-template"), "d274c066");
        assert_eq!(name_hash("example-warmpool"), "6680271f");
        assert_eq!(name_hash("my-sandbox-7x2kq"), "d7335e6f");
    }

    #[test]
    fn hashes_utf8_bytes_not_chars() {
        assert_eq!(name_hash("sandbox-über"), "361777bd");
    }

    #[test]
    fn is_always_eight_lowercase_hex_digits() {
        for name in ["", "a", "x".repeat(300).as_str(), "ABC"] {
            let hash = name_hash(name);
            assert_eq!(hash.len(), 8, "{name:?} -> {hash}");
            assert!(
                hash.chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
                "{hash}"
            );
        }
    }
}
