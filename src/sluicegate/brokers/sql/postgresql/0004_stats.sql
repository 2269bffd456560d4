-- Fast stats (Broker.stats, docs/architecture.md "Stats"): finished jobs are counted once,
-- not on every call. A finishing write stamps its rows with its own transaction id
-- (finish_xid = pg_current_xact_id(): 64 bits, never wraps); stats_settled holds the
-- counts per (queue, state) of every finished job whose finishing transaction had
-- committed when the snapshot stats_horizon.horizon was taken (pg_visible_in_snapshot),
-- and of every job finished before this migration (finish_xid NULL). The others, whose
-- transaction was still running then (in the snapshot's xip list) or began after it (at
-- or above its xmax), are read off jobs_settling by each stats call. Transactions commit
-- in any order, so the horizon is a snapshot, not a time or a number: a job finished by a
-- transaction that commits late is never behind it. A stats call that finds many
-- unsettled jobs adds them to stats_settled and stores its own statement's snapshot as
-- the new horizon, in one statement; a revive or a prune of a settled job takes it out of
-- stats_settled in its own transaction. Settling, pruning and reviving lock the horizon
-- row first, so each sees the horizon the others left.
ALTER TABLE {schema}.jobs ADD COLUMN finish_xid xid8;

-- Unsettled jobs are the newest transactions': a short range at the top of this index.
CREATE INDEX jobs_settling ON {schema}.jobs (finish_xid) WHERE finish_xid IS NOT NULL;

CREATE TABLE {schema}.stats_settled (
    queue text   NOT NULL,
    state text   NOT NULL,  -- succeeded, dead or cancelled
    jobs  bigint NOT NULL,
    PRIMARY KEY (queue, state)
);

CREATE TABLE {schema}.stats_horizon (
    id         boolean     PRIMARY KEY DEFAULT true CHECK (id),  -- one row
    horizon    pg_snapshot NOT NULL,
    settled_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {schema}.stats_horizon (horizon) VALUES (pg_current_snapshot());

-- The jobs finished so far, counted once (finish_xid NULL: settled). ALTER TABLE above
-- holds the table's lock until this commits: no job finishes in between.
INSERT INTO {schema}.stats_settled (queue, state, jobs)
SELECT queue, state, count(*) FROM {schema}.jobs
WHERE state IN ('succeeded', 'dead', 'cancelled')
GROUP BY queue, state;

-- Operator listings, newest first: finished jobs by state and queue, in id order (the
-- unfinished ones are the backlog, read off their own partial indexes).
CREATE INDEX jobs_listing ON {schema}.jobs (state, queue, id)
    WHERE state IN ('succeeded', 'dead', 'cancelled');
