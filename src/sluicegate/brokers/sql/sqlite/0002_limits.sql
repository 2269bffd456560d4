-- Dependency budgets (docs/limits.md): what each job needs, where its claimer runs, the
-- limits workers register, and the rate buckets.

-- The job's needs as canonical JSON, [[limit, partition value or null, cost], ...];
-- NULL: it names no limit. Equal needs are equal text, so waiting jobs group by it.
ALTER TABLE jobs ADD COLUMN limits TEXT;
-- The host of the worker that claimed it: host-scoped limits count their own host's jobs.
ALTER TABLE jobs ADD COLUMN host TEXT;

-- The plain claim reads ready jobs that name no limit ...
DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (queue, priority, run_at, id)
    WHERE state = 'ready' AND limits IS NULL;
-- ... and a claim that admits limited jobs visits each group of equal needs by its head,
-- so a long line of jobs waiting for one full limit costs one index seek, not a scan.
CREATE INDEX jobs_gated ON jobs (queue, limits, priority, run_at, id)
    WHERE state = 'ready' AND limits IS NOT NULL;
-- Tokens in use are the needs of held jobs: derived, never counted, so never leaked.
CREATE INDEX jobs_holding ON jobs (id)
    WHERE state IN ('claimed', 'running') AND limits IS NOT NULL;

CREATE TABLE limits (
    name         TEXT    PRIMARY KEY,
    concurrency  INTEGER,             -- NULL: no concurrency bound
    rate         REAL,                -- starts per second, NULL: no rate bound
    burst        INTEGER,
    scope        TEXT    NOT NULL,    -- 'global' or 'host'
    partition_by TEXT,                -- the keyword argument it is partitioned by
    declared     TEXT    NOT NULL,    -- the values a worker last declared (JSON)
    overridden   INTEGER NOT NULL DEFAULT 0,  -- 1: set by an operator, declarations keep out
    updated_at   REAL    NOT NULL
);

-- Token buckets of rate limits: one per limit, partition value ('' for none) and host
-- ('' for global scope). Rate tokens are spent, never given back.
CREATE TABLE limit_buckets (
    name      TEXT NOT NULL,
    part      TEXT NOT NULL,
    host      TEXT NOT NULL,
    tokens    REAL NOT NULL,
    at        REAL NOT NULL,
    PRIMARY KEY (name, part, host)
);
