-- Expected declines of quick writes stay out of the server log (issue 26, finding 11).
--
-- A quick write that is not plainly the successful case raises `quick_declined`
-- (migration 2026-11-30-000006), and the service runs it through the ordinary path.
-- In a group (`quick_batch`) each write's block catches it; a write alone
-- (`quick_write`, the common case) let it end the statement, so every expected
-- decline (a retried key, a token whose use is due to be recorded, a pending
-- handoff...) wrote `ERROR:  quick_declined` and the statement to the server log,
-- about 1,750 lines per chaos run, burying real errors.
--
-- Now `quick_write` catches the decline in a block of its own, like each write of a
-- group: the block's subtransaction rolls back everything the write did (its key
-- claim included), the statement succeeds with no row, and the service reads "no
-- row" as declined, exactly as for a group. Any other error still ends the statement
-- and is logged as before. The cost is one subtransaction per write alone; it takes
-- a transaction id of its own only when the write gets as far as writing.
-- A service built before this migration also reads no row as declined.

DROP FUNCTION quick_write(int2, bigint, bigint, bigint, text, text, text, text, text, text, int);

CREATE FUNCTION quick_write(
    p_call int2, p_token bigint, p_target bigint, p_number bigint,
    p_summary text, p_state text, p_hash text,
    p_scope text, p_key text, p_fingerprint text, p_retention int)
RETURNS TABLE (out_index int, out_orbit bigint, out_revision bigint, out_body text)
LANGUAGE plpgsql AS $$
DECLARE
    v_effect quick_effect;
BEGIN
    BEGIN
        v_effect := quick_effect_of(p_call, p_token, p_target, p_number,
            p_summary, p_state, p_hash, p_scope, p_key, p_fingerprint, p_retention);
    EXCEPTION WHEN raise_exception THEN
        IF SQLERRM <> 'quick_declined' THEN
            RAISE;
        END IF;
        -- Declined: nothing of it remains; the ordinary path decides.
        RETURN;
    END;
    out_index := 1;
    out_orbit := v_effect.orbit;
    out_revision := quick_apply(v_effect);
    out_body := v_effect.body;
    RETURN NEXT;
END $$;
