-- Fast stats (Broker.stats, docs/architecture.md "Stats"): finished jobs are counted once,
-- not on every call. A finishing write stamps its rows with a finish sequence number
-- (finish_seq, higher than every number settled so far); stats_settled holds the counts
-- per (queue, state) of every finished job stamped at or below stats_horizon.seq (and of
-- every job finished before this migration: finish_seq NULL). A stats call adds the jobs
-- stamped above the horizon, read off jobs_settling; once there are many, it moves them
-- into stats_settled and the horizon up, under the write lock. A revive or a prune of a
-- settled job takes it out of stats_settled in its own transaction. SQLite has one writer
-- at a time, so numbers are stamped and committed in the same order: nothing can appear
-- at or below the horizon after it moved.
ALTER TABLE jobs ADD COLUMN finish_seq INTEGER;

-- Unsettled jobs in stamp order, with what a count needs (covering); NULL when not finished.
CREATE INDEX jobs_settling ON jobs (finish_seq, queue, state) WHERE finish_seq IS NOT NULL;

CREATE TABLE stats_settled (
    queue TEXT    NOT NULL,
    state TEXT    NOT NULL,  -- succeeded, dead or cancelled
    jobs  INTEGER NOT NULL,
    PRIMARY KEY (queue, state)
) WITHOUT ROWID;

CREATE TABLE stats_horizon (
    id  INTEGER PRIMARY KEY CHECK (id = 1),  -- one row
    seq INTEGER NOT NULL                      -- the highest finish_seq settled
);
INSERT INTO stats_horizon (id, seq) VALUES (1, 0);

-- The jobs finished so far, counted once (finish_seq NULL: settled).
INSERT INTO stats_settled (queue, state, jobs)
SELECT queue, state, count(*) FROM jobs
WHERE state IN ('succeeded', 'dead', 'cancelled')
GROUP BY queue, state;
