-- Operator listings by task and by unique key (Broker.list_jobs, the bulk actions;
-- docs/architecture.md, "Listings"), each answered by index ranges read newest first.

-- A task's jobs by state and queue: each (task, state, queue) range is in id order (every
-- SQLite index ends with the rowid). Held jobs (claimed, running) are few and stay out
-- of it, read off jobs_leased instead: a claim takes a job out of this index, its start
-- and its heartbeats never touch it, its outcome puts it back. Said as NOT IN two states:
-- SQLite tests a list of two by comparisons, a longer one through a table it builds for
-- each row written (a third of this index's cost on the hot path).
CREATE INDEX jobs_task ON jobs (task, state, queue) WHERE state NOT IN ('claimed', 'running');

-- Every job of a unique key, in any state (jobs_unique_unfinished holds the unfinished
-- one only). A job without a key is not in it, and a key never changes: enqueueing a job
-- with a key adds one entry, nothing else ever writes it.
CREATE INDEX jobs_unique_key ON jobs (unique_key) WHERE unique_key IS NOT NULL;
