-- Dependency budgets (docs/limits.md): what each job needs, where its claimer runs, the
-- limits workers register, and the rate buckets.

-- The job's needs as canonical JSON text, [[limit, partition value or null, cost], ...];
-- NULL: it names no limit. Equal needs are equal text, so waiting jobs group by it.
ALTER TABLE {schema}.jobs ADD COLUMN limits text;
-- The host of the worker that claimed it: host-scoped limits count their own host's jobs.
ALTER TABLE {schema}.jobs ADD COLUMN host text;

-- The plain claim reads ready jobs that name no limit ...
DROP INDEX {schema}.jobs_ready;
CREATE INDEX jobs_ready ON {schema}.jobs (queue, priority, run_at, id)
    WHERE state = 'ready' AND limits IS NULL;
-- ... and a claim that admits limited jobs visits each group of equal needs by its head,
-- so a long line of jobs waiting for one full limit costs one index seek, not a scan.
CREATE INDEX jobs_gated ON {schema}.jobs (queue, limits, priority, run_at, id)
    WHERE state = 'ready' AND limits IS NOT NULL;
-- Tokens in use are the needs of held jobs: derived, never counted, so never leaked.
CREATE INDEX jobs_holding ON {schema}.jobs (id)
    WHERE state IN ('claimed', 'running') AND limits IS NOT NULL;

CREATE TABLE {schema}.limits (
    name         text        PRIMARY KEY,
    concurrency  integer,              -- NULL: no concurrency bound
    rate         float8,               -- starts per second, NULL: no rate bound
    burst        integer,
    scope        text        NOT NULL CHECK (scope IN ('global', 'host')),
    partition_by text,                 -- the keyword argument it is partitioned by
    declared     text        NOT NULL, -- the values a worker last declared (JSON)
    overridden   boolean     NOT NULL DEFAULT false, -- set by an operator
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Token buckets of rate limits: one per limit, partition value ('' for none) and host
-- ('' for global scope). Rate tokens are spent, never given back.
CREATE TABLE {schema}.limit_buckets (
    name      text   NOT NULL,
    part      text   NOT NULL,
    host      text   NOT NULL,
    tokens    float8 NOT NULL,
    at        float8 NOT NULL,  -- unix seconds by the database clock
    PRIMARY KEY (name, part, host)
);
