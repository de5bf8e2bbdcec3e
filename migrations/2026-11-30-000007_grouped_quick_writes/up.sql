-- Quick writes in groups (src/perf/quick.rs, docs/MECHANISMS.md "Quick writes").
--
-- Migration 2026-11-30-000006 made the successful case of a lease acquire, a
-- checkpoint and a release one statement each. Writers of one busy orbit still
-- queued on its row: each held the lock from its revision update to the end of its
-- commit's WAL flush, then handed it to the next, about 0.7 ms a write on a small
-- machine. Here the same writes run in groups: one statement, one transaction, one
-- commit for all the writes that queued in one instance while the previous group
-- ran (`quick_batch`). Each write runs in its own subtransaction (a PL/pgSQL block
-- with an exception handler), with exactly the statements of the one-write
-- functions it replaces; a write that is not plainly the successful case raises
-- `quick_declined` as before, and only its subtransaction rolls back: nothing of it
-- remains, and the service runs it through the ordinary path after the group
-- commits. The changes of the writes that succeeded are applied last, orbit by
-- orbit in ascending id order (so groups never wait on each other's orbit rows in a
-- cycle), each orbit's in the order its writes ran: one lock per orbit, held from
-- its first revision to the group's commit.
--
-- The effect functions below are the one-write functions of migration 6 with the
-- last step (`apply_change`) left to the caller: they return the change to apply.
-- What they restate from src/fence.rs, src/store/tasks.rs and the response types is
-- named in migration 6's header, and tests/api/quick.rs holds it byte for byte.
--
-- The functions themselves now live in src/db/functions.sql (applied at every
-- start, after the migrations); this migration keeps what holds a definition the
-- functions need: the quick_effect type.

DROP FUNCTION IF EXISTS quick_release_lease(bigint, bigint, bigint, text, text, text, int);
DROP FUNCTION IF EXISTS quick_checkpoint(bigint, bigint, bigint, text, text, text, text, text, text, int);
DROP FUNCTION IF EXISTS quick_acquire_lease(bigint, bigint, bigint, text, text, text, int);

-- A write's change, as `apply_change` takes it, and its place in the group.
CREATE TYPE quick_effect AS (
    idx int, orbit bigint, kind text, entity_type text, entity_id bigint, task bigint,
    contributor bigint, summary text, key_id bigint, status int2, body text);
