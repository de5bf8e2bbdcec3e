-- Drops what migration 2026-11-30-000007 and src/db/functions.sql made of the grouped
-- quick writes.
DROP FUNCTION IF EXISTS quick_batch(int2[], bigint[], bigint[], bigint[], text[], text[], text[],
                          text[], text[], text[], int[]);
DROP FUNCTION IF EXISTS quick_write(int2, bigint, bigint, bigint, text, text, text, text, text, text, int);
DROP FUNCTION IF EXISTS quick_apply(quick_effect);
DROP FUNCTION IF EXISTS quick_effect_of(int2, bigint, bigint, bigint, text, text, text, text, text, text, int);
DROP FUNCTION IF EXISTS quick_release_effect(bigint, bigint, bigint, text, text, text, int);
DROP FUNCTION IF EXISTS quick_checkpoint_effect(bigint, bigint, bigint, text, text, text, text, text, text, int);
DROP FUNCTION IF EXISTS quick_acquire_effect(bigint, bigint, bigint, text, text, text, int);
DROP TYPE quick_effect;

-- The one-write functions this migration replaced were created by migration 6
-- before src/db/functions.sql held every function; reverting below this migration
-- needs the release that matches it (its start re-creates its own functions).
