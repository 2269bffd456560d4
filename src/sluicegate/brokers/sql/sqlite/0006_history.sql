-- A job's history off the happy path (docs/lifecycle.md, "History"): a JSON array of
-- entries, one per failed or timed-out attempt, recovery, release, cancel and revival,
-- at most sluicegate.job.HISTORY_CAP of them (the oldest go). NULL while it has none: an
-- enqueue, a claim, a start and an ack never write it. No index: read with its job.
ALTER TABLE jobs ADD COLUMN history TEXT;
