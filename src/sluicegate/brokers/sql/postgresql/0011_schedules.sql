-- Periodic schedules (docs/schedules.md): one row per schedule. A tick is enqueued only by
-- a compare-and-set of last_tick in the transaction that inserts its job, so each tick
-- is enqueued once across the cluster, even after its job has finished.
CREATE TABLE {schema}.schedules (
    name         text             PRIMARY KEY,
    since        double precision NOT NULL,  -- unix seconds: first seen, ticks after it are due
    last_tick    double precision,           -- unix seconds of the last tick enqueued
    last_job_id  bigint                      -- that tick's job (it may have been pruned since)
);
