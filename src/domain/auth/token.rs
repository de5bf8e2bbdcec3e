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
    /// The kind its prefix names: a token is found only under the kind it was
    /// issued with, so `occ_…` presented as `oca_…` is unknown (issue 26, finding 4).
    pub kind: TokenKind,
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
    let (kind, rest) = match token.strip_prefix(CONTRIBUTOR_PREFIX) {
        Some(rest) => (TokenKind::Contributor, rest),
        None => (TokenKind::Agent, token.strip_prefix(AGENT_PREFIX)?),
    };
    let (lookup, secret) = rest.split_at(LOOKUP_LEN);
    let secret = secret.strip_prefix('_')?;
    let lookup_ok = lookup
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let secret_ok = secret.len() == SECRET_LEN
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (lookup_ok && secret_ok).then_some(ParsedToken {
        kind,
        lookup,
        secret,
    })
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

/// The same argon2 work as a real verification, for a token whose lookup names no
/// row: an unknown lookup then takes as long as a wrong secret, so timing does not
/// tell which lookups exist (issue 26, finding 5). Returns whether it ran.
///
/// At most one runs at a time per `running` flag (one per instance, in its token
/// cache); while one runs, another unknown lookup
/// is answered without it. A flood of made-up lookups (each new, so no per-lookup
/// limit applies) then costs at most one core and never waits, where every
/// verification would otherwise hold an argon2 slot, a blocking thread and a pooled
/// connection: under such a flood, timing can tell an unknown lookup again, which
/// is not a secret on its own (docs/SECURITY.md).
pub fn verify_dummy(secret: &str, running: &std::sync::atomic::AtomicBool) -> bool {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;
    static DUMMY: OnceLock<String> = OnceLock::new();
    if running
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    struct Done<'a>(&'a AtomicBool);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(false, Ordering::Release);
        }
    }
    let _done = Done(running);
    let hash = DUMMY.get_or_init(|| {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(b"no token has this secret", &salt)
            .expect("argon2 with default parameters cannot fail")
            .to_string()
    });
    let _ = verify(secret, hash);
    true
}

/// Runs an argon2 computation when one of the process's argon2 slots is free (one
/// per core). Each run takes 19 MiB and a core for some milliseconds: unbounded, a
/// burst of registrations or cold tokens multiplies the service's memory by the
/// number of blocking threads and starves every other request of CPU. Callers are
/// on blocking threads, so waiting here is fine.
fn with_argon2_slot<T>(work: impl FnOnce() -> T) -> T {
    use std::sync::{Condvar, Mutex, OnceLock};
    static SLOTS: OnceLock<(Mutex<usize>, Condvar)> = OnceLock::new();
    let (free, freed) = SLOTS.get_or_init(|| (Mutex::new(crate::config::cores()), Condvar::new()));
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
        assert_eq!(parsed.kind, TokenKind::Agent);
        assert!(verify(parsed.secret, &t.secret_hash));
        assert!(!verify("x", &t.secret_hash));
        assert!(verify_dummy(parsed.secret, &Default::default()));
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
