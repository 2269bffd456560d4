-- Periodic schedules (docs/schedules.md): one row per schedule. A tick is enqueued only by
-- a compare-and-set of last_tick in the transaction that inserts its job, so each tick
-- is enqueued once across the cluster, even after its job has finished.
CREATE TABLE schedules (
    name         TEXT PRIMARY KEY,
    since        REAL NOT NULL,    -- unix seconds: first seen, ticks after it are due
    last_tick    REAL,             -- unix seconds of the last tick enqueued, NULL: none yet
    last_job_id  INTEGER           -- that tick's job (it may have been pruned since)
);
