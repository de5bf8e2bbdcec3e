-- Search's `Recent` access (`store::search`, docs/DECISIONS.md "Search"): a word of
-- middle frequency is looked for among the newest ids only, the word's GIN entries
-- intersected with a range of `id` that a BRIN index gives for a few summaries'
-- reads. Four pages a summary, not the default 128: PostgreSQL runs the cheaper
-- index scan of a BitmapAnd first, and only with the GIN scan first is the
-- intersection exact (each row of the range that holds the word, and no other, is
-- read); the BRIN index's own scan cost, higher with more summaries, keeps it
-- second for a word of up to about 15,000 matches in a million rows. The big
-- searched kinds only. `autosummarize` lets autovacuum summarize a range as its
-- pages fill; a range not summarized yet is always read, which costs only time.
CREATE INDEX contributions_id_brin ON contributions USING brin (id)
    WITH (pages_per_range = 4, autosummarize = on);
CREATE INDEX memory_records_id_brin ON memory_records USING brin (id)
    WITH (pages_per_range = 4, autosummarize = on);
