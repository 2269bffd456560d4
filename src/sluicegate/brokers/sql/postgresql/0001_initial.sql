-- Jobs: one row per job, whatever its state. Times are timestamptz by the server's clock.
-- {schema} is the broker's schema (default sluicegate), validated as an identifier.
CREATE TABLE {schema}.jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text        NOT NULL,
    task             text        NOT NULL,
    args             text        NOT NULL DEFAULT '[]',
    kwargs           text        NOT NULL DEFAULT '{}',
    state            text        NOT NULL CHECK (state IN ('scheduled', 'ready', 'claimed',
                                     'running', 'succeeded', 'dead', 'cancelled')),
    priority         integer     NOT NULL DEFAULT 0,
    run_at           timestamptz NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 3,
    unique_key       text,
    lease_token      bigint,
    lease_expires_at timestamptz,
    worker_id        text,
    enqueued_at      timestamptz NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz,
    result           text,
    last_error       text
);

-- The claim reads only this index: ready jobs of one queue in claim order. Finished rows
-- are not in it, so the claim's cost does not grow with history or with the backlog.
CREATE INDEX jobs_ready ON {schema}.jobs (queue, priority, run_at, id) WHERE state = 'ready';

-- Promotion of due scheduled jobs and the next wake-up time.
CREATE INDEX jobs_scheduled ON {schema}.jobs (run_at) WHERE state = 'scheduled';

-- Recovery finds expired leases without touching finished rows.
CREATE INDEX jobs_leased ON {schema}.jobs (lease_expires_at) WHERE state IN ('claimed', 'running');

-- At most one unfinished job per unique key.
CREATE UNIQUE INDEX jobs_unique_unfinished ON {schema}.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'ready', 'claimed', 'running');

-- Read side and retention: finished jobs by age.
CREATE INDEX jobs_finished ON {schema}.jobs (state, finished_at)
    WHERE state IN ('succeeded', 'dead', 'cancelled');
