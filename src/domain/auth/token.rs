//! Token format: `occ_<lookup>_<secret>` (contributor) or `oca_<lookup>_<secret>`
//! (legacy agent). `lookup` is 16 lowercase hex characters that find the row without
//! hashing; `secret` is 32 random bytes (256 bits) in unpadded base64url. Only an
//! argon2id hash of the secret is stored.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::rngs::OsRng;
use rand::RngCore;

pub const CONTRIBUTOR_PREFIX: &str = "occ_";
pub const AGENT_PREFIX: &str = "oca_";
const LOOKUP_LEN: usize = 16;
const SECRET_LEN: usize = 43;
pub const TOKEN_LEN: usize = 4 + LOOKUP_LEN + 1 + SECRET_LEN;

pub use crate::model::{NewToken, TokenKind};

/// The parts of a syntactically valid presented token.
pub struct ParsedToken<'a> {
    pub lookup: &'a str,
    pub secret: &'a str,
}

pub fn mint(kind: TokenKind) -> NewToken {
    let mut lookup_bytes = [0u8; LOOKUP_LEN / 2];
    OsRng.fill_bytes(&mut lookup_bytes);
    let mut secret_bytes = [0u8; 32];
    OsRng.fill_bytes(&mut secret_bytes);
    let lookup = hex::encode(lookup_bytes);
    let secret = URL_SAFE_NO_PAD.encode(secret_bytes);
    let prefix = match kind {
        TokenKind::Contributor => CONTRIBUTOR_PREFIX,
        TokenKind::Agent => AGENT_PREFIX,
    };
    let salt = SaltString::generate(&mut OsRng);
    let secret_hash = with_argon2_slot(|| {
        Argon2::default()
            .hash_password(secret.as_bytes(), &salt)
            .expect("argon2 with default parameters cannot fail")
            .to_string()
    });
    NewToken {
        token: format!("{prefix}{lookup}_{secret}"),
        lookup,
        secret_hash,
    }
}

/// Checks the format without any hashing. `None` means the token cannot be valid.
pub fn parse(token: &str) -> Option<ParsedToken<'_>> {
    if token.len() != TOKEN_LEN {
        return None;
    }
    let rest = token
        .strip_prefix(CONTRIBUTOR_PREFIX)
        .or_else(|| token.strip_prefix(AGENT_PREFIX))?;
    let (lookup, secret) = rest.split_at(LOOKUP_LEN);
    let secret = secret.strip_prefix('_')?;
    let lookup_ok = lookup
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let secret_ok = secret.len() == SECRET_LEN
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (lookup_ok && secret_ok).then_some(ParsedToken { lookup, secret })
}

/// Verifies a secret against its stored argon2id hash (constant-time comparison
/// inside the argon2 crate).
pub fn verify(secret: &str, stored_hash: &str) -> bool {
    match PasswordHash::new(stored_hash) {
        Ok(hash) => with_argon2_slot(|| {
            Argon2::default()
                .verify_password(secret.as_bytes(), &hash)
                .is_ok()
        }),
        Err(_) => false,
    }
}

/// Runs an argon2 computation when one of the process's argon2 slots is free (one
/// per core). Each run takes 19 MiB and a core for some milliseconds: unbounded, a
/// burst of registrations or cold tokens multiplies the service's memory by the
/// number of blocking threads and starves every other request of CPU. Callers are
/// on blocking threads, so waiting here is fine.
fn with_argon2_slot<T>(work: impl FnOnce() -> T) -> T {
    use std::sync::{Condvar, Mutex, OnceLock};
    static SLOTS: OnceLock<(Mutex<usize>, Condvar)> = OnceLock::new();
    let (free, freed) = SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        (Mutex::new(cores), Condvar::new())
    });
    {
        let mut n = free.lock().unwrap_or_else(|p| p.into_inner());
        while *n == 0 {
            n = freed.wait(n).unwrap_or_else(|p| p.into_inner());
        }
        *n -= 1;
    }
    // Give the slot back even if `work` panics.
    struct Release<'a>(&'a Mutex<usize>, &'a Condvar);
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            *self.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            self.1.notify_one();
        }
    }
    let _release = Release(free, freed);
    work()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_tokens_parse_and_verify() {
        let t = mint(TokenKind::Agent);
        assert!(t.token.starts_with(AGENT_PREFIX));
        let parsed = parse(&t.token).expect("well-formed");
        assert_eq!(parsed.lookup, t.lookup);
        assert!(verify(parsed.secret, &t.secret_hash));
        assert!(!verify("x", &t.secret_hash));
    }

    #[test]
    fn malformed_tokens_are_refused_without_hashing() {
        assert!(parse("").is_none());
        assert!(parse("Bearer abc").is_none());
        let t = mint(TokenKind::Contributor).token;
        let mut bad = t.clone();
        bad.replace_range(4..5, "Z");
        assert!(parse(&bad).is_none());
        assert!(parse(&t[..t.len() - 1]).is_none());
    }
}
