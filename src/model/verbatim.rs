//! Checks for untrusted content fields. Content is evidence: it is stored and
//! returned exactly as sent (no trimming, no normalization, no rendering), so a
//! text's only checks are its length in characters and that PostgreSQL can store it
//! (`FieldErrors::text`, for every text field); lists of ids are bounded here.

use crate::error::FieldErrors;

/// The most ids a body may list (`artifact_ids`, `evidence_contribution_ids`).
pub const MAX_IDS: usize = 100;

/// At most `MAX_IDS` positive ids.
pub fn ids(e: &mut FieldErrors, field: &str, ids: &[i64]) {
    if e.bounded(field, ids, MAX_IDS, "ids")
        .iter()
        .any(|id| *id < 1)
    {
        e.add(field, "every id must be a positive integer");
    }
}
