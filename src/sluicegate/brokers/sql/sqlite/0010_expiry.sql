-- Expiring jobs (docs/lifecycle.md, "Expiry"): a job not claimed by expires_at (unix
-- seconds, the broker's clock) ends cancelled, its history saying "reason": "expired".
-- NULL: it never expires. No default: adding the column rewrites nothing.
ALTER TABLE jobs ADD COLUMN expires_at REAL;

-- Every claim cancels the waiting jobs whose time is up, off this index: only jobs that
-- have an expiry and wait (scheduled or ready) are in it, so for jobs without one it is
-- empty, and a claim's look at it is one seek that finds nothing.
CREATE INDEX jobs_expiring ON jobs (expires_at)
    WHERE expires_at IS NOT NULL AND state IN ('scheduled', 'ready');
