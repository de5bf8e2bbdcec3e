-- Restores `quick_write` as migration 2026-11-30-000007 defined it (a decline ends
-- the statement with the error `quick_declined`).
DROP FUNCTION quick_write(int2, bigint, bigint, bigint, text, text, text, text, text, text, int);

CREATE FUNCTION quick_write(
    p_call int2, p_token bigint, p_target bigint, p_number bigint,
    p_summary text, p_state text, p_hash text,
    p_scope text, p_key text, p_fingerprint text, p_retention int,
    OUT out_index int, OUT out_orbit bigint, OUT out_revision bigint, OUT out_body text)
LANGUAGE plpgsql AS $$
DECLARE
    v_effect quick_effect := quick_effect_of(p_call, p_token, p_target, p_number,
        p_summary, p_state, p_hash, p_scope, p_key, p_fingerprint, p_retention);
BEGIN
    out_index := 1;
    out_orbit := v_effect.orbit;
    out_revision := quick_apply(v_effect);
    out_body := v_effect.body;
END $$;
