-- venturi schema, version 21: drops two functions nothing calls any more.
--
-- venturi_gated_heads and venturi_gated_heads_upto listed the heads of a queue's gated
-- partitions for the gated claim. Since version 16 venturi_claim_gated walks
-- venturi_job_claim_vt_idx instead, and no function, query or Go code of any version calls
-- them: venturi's Go code never did (only the claim function's older bodies did, and the
-- database holds only the newest body).
--
-- Rolling deploy: older workers keep working. They never call these two functions, and
-- venturi_claim_gated, which they do call, is the version-20 body, untouched here. Nothing
-- to do beforehand. venturi_gate_lock stays (a chaos test takes a gate's lock with it).
DROP FUNCTION IF EXISTS venturi_gated_heads(p_queue text, p_after text, p_max integer);
DROP FUNCTION IF EXISTS venturi_gated_heads_upto(p_queue text, p_upto text, p_max integer);
