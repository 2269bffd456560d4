-- Jobs: one row per job, whatever its state. Times are unix seconds (REAL) by the broker's clock.
CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL,
    task             TEXT    NOT NULL,
    args             TEXT    NOT NULL DEFAULT '[]',
    kwargs           TEXT    NOT NULL DEFAULT '{}',
    state            TEXT    NOT NULL,
    priority         INTEGER NOT NULL DEFAULT 0,
    run_at           REAL    NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 3,
    unique_key       TEXT,
    lease_token      INTEGER,
    lease_expires_at REAL,
    worker_id        TEXT,
    enqueued_at      REAL    NOT NULL,
    started_at       REAL,
    finished_at      REAL,
    result           TEXT,
    last_error       TEXT
);

-- The claim reads only this index: ready jobs of one queue in claim order.
CREATE INDEX jobs_ready ON jobs (queue, priority, run_at, id) WHERE state = 'ready';

-- Promotion of due scheduled jobs and the next wake-up time.
CREATE INDEX jobs_scheduled ON jobs (run_at) WHERE state = 'scheduled';

-- Recovery finds expired leases without touching finished rows.
CREATE INDEX jobs_leased ON jobs (lease_expires_at) WHERE state IN ('claimed', 'running');

-- At most one unfinished job per unique key.
CREATE UNIQUE INDEX jobs_unique_unfinished ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'ready', 'claimed', 'running');

-- Read side: counts per queue and state, listings by state.
CREATE INDEX jobs_state_queue ON jobs (state, queue);
