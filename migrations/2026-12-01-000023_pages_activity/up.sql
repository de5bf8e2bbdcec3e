-- The pages' contributor view (issue 23): a contributor's recent changes over every
-- orbit, newest first, without scanning the whole feed.
CREATE INDEX changes_contributor_idx ON changes (contributor_id, created_at DESC);
