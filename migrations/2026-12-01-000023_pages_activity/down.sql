DROP INDEX IF EXISTS changes_contributor_idx;
