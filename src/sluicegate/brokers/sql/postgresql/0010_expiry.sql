-- Expiring jobs (docs/lifecycle.md, "Expiry"): a job not claimed by expires_at (the
-- database clock) ends cancelled, its history saying "reason": "expired". NULL: it never
-- expires. No default: adding the column rewrites nothing, whatever the table's size.
ALTER TABLE {schema}.jobs ADD COLUMN expires_at timestamptz;

-- Every claim cancels the waiting jobs whose time is up, off this index: only jobs that
-- have an expiry and wait (scheduled or ready) are in it, so for jobs without one it is
-- empty (and no update of theirs writes it), and a claim's look at it is one seek.
CREATE INDEX jobs_expiring ON {schema}.jobs (expires_at)
    WHERE expires_at IS NOT NULL AND state IN ('scheduled', 'ready');
