-- The service's prepared `orbit_apply` (src/revision.rs) calls apply_change: run a
-- service built before this migration when reverting it.
DROP FUNCTION IF EXISTS quick_release_lease(bigint, bigint, bigint, text, text, text, int);
DROP FUNCTION IF EXISTS quick_checkpoint(bigint, bigint, bigint, text, text, text, text, text, text, int);
DROP FUNCTION IF EXISTS quick_acquire_lease(bigint, bigint, bigint, text, text, text, int);
DROP FUNCTION IF EXISTS quick_task(bigint, bigint, text, text, text, int);
DROP FUNCTION IF EXISTS quick_caller(bigint);
DROP FUNCTION IF EXISTS json_lease_response(leases, contributors);
DROP FUNCTION IF EXISTS json_actor(contributors);
DROP FUNCTION IF EXISTS json_ts(timestamptz);
DROP FUNCTION IF EXISTS claim_key(bigint, text, text, text, int);
DROP FUNCTION IF EXISTS apply_change(bigint, text, text, bigint, bigint, bigint, text, bigint, int2, bytea);
