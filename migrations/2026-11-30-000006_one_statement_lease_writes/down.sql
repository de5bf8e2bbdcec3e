-- The service's prepared `orbit_apply` (src/revision.rs) calls apply_change: run a
-- service built before this migration when reverting it.
DROP FUNCTION quick_release_lease(bigint, bigint, bigint, text, text, text, int);
DROP FUNCTION quick_checkpoint(bigint, bigint, bigint, text, text, text, text, text, text, int);
DROP FUNCTION quick_acquire_lease(bigint, bigint, bigint, text, text, text, int);
DROP FUNCTION quick_task(bigint, bigint, text, text, text, int);
DROP FUNCTION quick_caller(bigint);
DROP FUNCTION json_lease_response(leases, contributors);
DROP FUNCTION json_actor(contributors);
DROP FUNCTION json_ts(timestamptz);
DROP FUNCTION claim_key(bigint, text, text, text, int);
DROP FUNCTION apply_change(bigint, text, text, bigint, bigint, bigint, text, bigint, int2, bytea);
