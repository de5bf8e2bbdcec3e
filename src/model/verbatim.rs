//! Checks for untrusted content fields. Content is evidence: it is stored and
//! returned exactly as sent (no trimming, no normalization, no rendering), so the
//! only checks are its length in characters and that PostgreSQL can store it
//! (`text` cannot hold U+0000).

use crate::error::FieldErrors;

/// The most ids a body may list (`artifact_ids`, `evidence_contribution_ids`).
pub const MAX_IDS: usize = 100;

/// Length `min..=max` in characters, and no U+0000.
pub fn text(e: &mut FieldErrors, field: &str, value: &str, min: usize, max: usize) {
    e.len(field, value, min, max);
    if value.contains('\0') {
        e.add(field, "must not contain the character U+0000");
    }
}

/// At most `MAX_IDS` positive ids.
pub fn ids(e: &mut FieldErrors, field: &str, ids: &[i64]) {
    if ids.len() > MAX_IDS {
        e.add(field, format!("at most {MAX_IDS} ids"));
    }
    if ids.iter().any(|id| *id < 1) {
        e.add(field, "every id must be a positive integer");
    }
}
