-- Operator listings by state, queue, task and unique key (Broker.list_jobs, the bulk
-- actions; docs/architecture.md, "Listings"), each answered by index ranges read newest
-- first.
--
-- Each index ends with (-id), and the listings order by -id: an order only these indexes
-- give. Ordered by id, the planner may walk the primary key from its end and filter,
-- which it prices as cheap whenever a filter looks common (a state of a third of the
-- table) and which reads every newer row first: a million finished jobs before the first
-- ready one of an old backlog. With -id it cannot; with these it need not.
--
-- Held jobs (claimed, running) stay out of them (read off jobs_leased: as many as the
-- workers' slots). A claim, a start or a heartbeat then adds no entry to them: a job gets
-- one when stored, when its outcome is written, and when it comes back (retry, release,
-- recovery).

-- Replaces 0004's index of finished jobs: the backlog (ready, scheduled) in order too.
DROP INDEX {schema}.jobs_listing;
CREATE INDEX jobs_listing ON {schema}.jobs (state, queue, (-id))
    WHERE state IN ('scheduled', 'ready', 'succeeded', 'dead', 'cancelled');

-- A task's jobs by state and queue.
CREATE INDEX jobs_task ON {schema}.jobs (task, state, queue, (-id))
    WHERE state IN ('scheduled', 'ready', 'succeeded', 'dead', 'cancelled');

-- Every job of a unique key, in any state (jobs_unique_unfinished holds the unfinished
-- one only). A job without a key is not in it.
CREATE INDEX jobs_unique_key ON {schema}.jobs (unique_key, (-id)) WHERE unique_key IS NOT NULL;
