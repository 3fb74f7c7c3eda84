//! The shape of a session's bearer token, written and read in this one
//! place, so that the server that issues tokens and every client that
//! routes by them agree.
//!
//! A server issues `wsfs_<session id>_<secret>`: the session's id (a UUID
//! in lowercase hyphenated form) and 64 lowercase hex digits of 256 random
//! bits. The session id is there for routing: a client that holds nothing
//! but the token (and a proxy that sees nothing but its `authorization`
//! header) learns from it which session, hence which replica, a call is
//! about. It is not a secret: every call about a session names it in
//! [`crate::SESSION_HEADER`] anyway. The secret alone authenticates: a
//! server looks a token up by the SHA-256 of the whole string, so a token
//! whose session part was changed is simply unknown.
//!
//! Tokens issued before this shape (`wsfs_<64 hex>`), and admin tokens,
//! name no session: they authenticate as before but route as calls naming
//! no session do.
//!
//! ```
//! let token = wsfs::token::session_token("67e55044-10b1-426f-9247-bb680e5fe0c8", &[7; 32]);
//! assert_eq!(
//!     wsfs::token::session_of(&token),
//!     Some("67e55044-10b1-426f-9247-bb680e5fe0c8")
//! );
//! assert_eq!(wsfs::token::session_of(&format!("wsfs_{}", "ab".repeat(32))), None);
//! ```

/// What every token a server issues starts with.
pub const TOKEN_PREFIX: &str = "wsfs_";

/// The random part of a token, in bytes (written as twice as many hex
/// digits).
pub const SECRET_BYTES: usize = 32;

/// A session's token: [`TOKEN_PREFIX`], the session's id, `_`, and
/// `secret` in lowercase hex.
pub fn session_token(session_id: &str, secret: &[u8; SECRET_BYTES]) -> String {
    use std::fmt::Write;
    let mut token = format!("{TOKEN_PREFIX}{session_id}_");
    for byte in secret {
        let _ = write!(token, "{byte:02x}");
    }
    token
}

/// The session `token` names, for routing: the id inside a token of the
/// shape [`session_token`] makes; `None` for any other string (a token of
/// the older shape, an admin token). Says nothing about whether the token
/// is valid: only a server knows that.
pub fn session_of(token: &str) -> Option<&str> {
    let rest = token.strip_prefix(TOKEN_PREFIX)?;
    let (session_id, secret) = rest.split_once('_')?;
    let secret_ok = secret.len() == 2 * SECRET_BYTES
        && secret
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (is_session_id(session_id) && secret_ok).then_some(session_id)
}

/// Whether `id` is a session id as servers write them: a UUID in
/// lowercase hyphenated form (`67e55044-10b1-426f-9247-bb680e5fe0c8`), the
/// exact text a proxy hashes.
pub fn is_session_id(id: &str) -> bool {
    id.len() == 36
        && id.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "67e55044-10b1-426f-9247-bb680e5fe0c8";

    #[test]
    fn a_session_token_names_its_session_and_carries_256_bits() {
        let token = session_token(ID, &[0xab; SECRET_BYTES]);
        assert_eq!(token, format!("wsfs_{ID}_{}", "ab".repeat(32)));
        assert_eq!(token.len(), 5 + 36 + 1 + 64);
        assert_eq!(session_of(&token), Some(ID));
    }

    #[test]
    fn tokens_of_other_shapes_name_no_session() {
        let secret = "0123456789abcdef".repeat(4);
        for token in [
            format!("wsfs_{secret}"),
            "an-admin-token-of-any-shape".to_string(),
            format!("wsfs_{}_{secret}", ID.to_uppercase()),
            format!("wsfs_{}_{secret}", ID.replace('-', "")),
            format!("wsfs_{ID}_{}", &secret[1..]),
            format!("wsfs_{ID}_{secret}0"),
            format!("wsfs_{ID}_{}", secret.to_uppercase()),
            format!("wsfs_{ID}_{}g", &secret[1..]),
            format!("wsfs_{ID}_{secret}_x"),
            format!("WSFS_{ID}_{secret}"),
            String::new(),
        ] {
            assert_eq!(session_of(&token), None, "{token}");
        }
    }

    #[test]
    fn session_ids_are_lowercase_hyphenated_uuids() {
        assert!(is_session_id(ID));
        for bad in [
            "",
            "s",
            &ID.to_uppercase(),
            &ID.replace('-', ""),
            &format!("{ID}0"),
            &ID.replacen('-', "_", 1),
            "67e55044-10b1-426f-9247-bb680e5fe0cg",
        ] {
            assert!(!is_session_id(bad), "{bad}");
        }
    }
}
