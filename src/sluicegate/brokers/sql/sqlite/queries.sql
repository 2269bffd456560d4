-- Named SQL blocks for the SQLite broker. A block starts with "-- name: NAME".
-- {held} and {unfinished} expand to state lists taken from sluicegate.job's transition table.

-- name: insert_job
INSERT INTO jobs (queue, task, args, kwargs, state, priority, run_at, max_attempts,
                  unique_key, enqueued_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: insert_unique_job
-- The conflict target is the partial unique index over unfinished jobs.
INSERT INTO jobs (queue, task, args, kwargs, state, priority, run_at, max_attempts,
                  unique_key, enqueued_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'ready', 'claimed', 'running')
DO NOTHING;

-- name: unfinished_by_unique_key
SELECT * FROM jobs WHERE unique_key = :key AND state IN ({unfinished});

-- name: promote_due
-- Seeks the jobs_scheduled index; touches only scheduled jobs that are due.
UPDATE jobs SET state = 'ready' WHERE state = 'scheduled' AND run_at <= :now;

-- name: ready_of_queue
-- One queue's ready jobs in claim order, read straight off the jobs_ready index
-- (no sort, no finished rows). Used once per queue inside claim.
SELECT * FROM (
    SELECT id, priority, run_at FROM jobs
    WHERE state = 'ready' AND queue = {queue}
    ORDER BY priority, run_at, id
    LIMIT :n
)

-- name: claim
-- {candidates} is ready_of_queue once per queue, joined by UNION ALL: each part is an
-- index range of at most :n rows, so the cost does not grow with the backlog.
-- Fencing: every claimed row gets this claim's token and charges an attempt.
UPDATE jobs
SET state = 'claimed', attempts = attempts + 1, lease_token = :token,
    lease_expires_at = :now + :lease, worker_id = :worker
WHERE id IN (
    SELECT id FROM ({candidates}) ORDER BY priority, run_at, id LIMIT :n
)
RETURNING *;

-- name: probe_ready
SELECT 1 FROM jobs WHERE state = 'ready' AND queue IN ({queues}) LIMIT 1;

-- name: probe_due
SELECT 1 FROM jobs WHERE state = 'scheduled' AND run_at <= :now AND queue IN ({queues}) LIMIT 1;

-- name: next_scheduled
SELECT min(run_at) FROM jobs WHERE state = 'scheduled' AND queue IN ({queues});

-- name: start
-- Batched writes: :batch is a JSON array of [job id, fencing token, ...] per claim, one
-- statement per kind and turn; RETURNING names the claims whose own token matched.
UPDATE jobs SET state = 'running', started_at = :now
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token
      FROM json_each(:batch)) AS c
WHERE jobs.id = c.id AND jobs.lease_token = c.token AND +jobs.state IN ({start_from})
RETURNING jobs.id, jobs.lease_token;

-- name: ack
-- A claim finished without a separate start (record() folds the two) began its body now;
-- started_at of an earlier attempt must not stand in for this one. Same for fail_*.
UPDATE jobs
SET state = 'succeeded', result = c.result, finished_at = :now,
    started_at = CASE WHEN jobs.state = 'running' THEN jobs.started_at ELSE :now END,
    lease_expires_at = NULL
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token,
             json_extract(value, '$[2]') AS result
      FROM json_each(:batch)) AS c
WHERE jobs.id = c.id AND jobs.lease_token = c.token AND +jobs.state IN ({held})
RETURNING jobs.id, jobs.lease_token;

-- name: fail_retry
UPDATE jobs
SET state = 'scheduled', run_at = :now + c.retry_in, last_error = c.error,
    started_at = CASE WHEN jobs.state = 'running' THEN jobs.started_at ELSE :now END,
    lease_expires_at = NULL
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token,
             json_extract(value, '$[2]') AS error, json_extract(value, '$[3]') AS retry_in
      FROM json_each(:batch)) AS c
WHERE jobs.id = c.id AND jobs.lease_token = c.token AND +jobs.state IN ({held})
RETURNING jobs.id, jobs.lease_token;

-- name: fail_dead
UPDATE jobs
SET state = 'dead', last_error = c.error, finished_at = :now, lease_expires_at = NULL,
    started_at = CASE WHEN jobs.state = 'running' THEN jobs.started_at ELSE :now END
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token,
             json_extract(value, '$[2]') AS error
      FROM json_each(:batch)) AS c
WHERE jobs.id = c.id AND jobs.lease_token = c.token AND +jobs.state IN ({held})
RETURNING jobs.id, jobs.lease_token;

-- name: heartbeat
UPDATE jobs SET lease_expires_at = :now + :lease
WHERE id = :id AND lease_token = :token AND state IN ({held});

-- name: release
-- Shutdown hands the job back: the attempt charged at claim is refunded.
UPDATE jobs
SET state = 'ready', attempts = max(attempts - 1, 0), lease_expires_at = NULL, worker_id = NULL
WHERE id = :id AND lease_token = :token AND state IN ({held});

-- name: probe_expired
SELECT 1 FROM jobs WHERE state IN ({held}) AND lease_expires_at < :now LIMIT 1;

-- name: recover_dead
-- Expired leases with no attempts left; the attempt was charged when claimed.
UPDATE jobs
SET state = 'dead', finished_at = :now, lease_expires_at = NULL,
    last_error = json_object('type', 'WorkerLost', 'traceback', '',
        'message', 'worker lost: lease of worker ' || coalesce(worker_id, '?')
                   || ' expired without a heartbeat')
WHERE id IN (SELECT id FROM jobs WHERE state IN ({held}) AND lease_expires_at < :now
             AND attempts >= max_attempts LIMIT :limit)
RETURNING id;

-- name: recover_ready
UPDATE jobs
SET state = 'ready', lease_expires_at = NULL, worker_id = NULL,
    last_error = json_object('type', 'WorkerLost', 'traceback', '',
        'message', 'worker lost: lease of worker ' || coalesce(worker_id, '?')
                   || ' expired without a heartbeat')
WHERE id IN (SELECT id FROM jobs WHERE state IN ({held}) AND lease_expires_at < :now
             LIMIT :limit)
RETURNING id;

-- name: cancel
UPDATE jobs SET state = 'cancelled', finished_at = :now, lease_expires_at = NULL
WHERE id = :id AND state IN ({cancel_from})
RETURNING *;

-- name: revive
UPDATE jobs
SET state = 'ready', attempts = 0, run_at = :now, finished_at = NULL,
    lease_expires_at = NULL, worker_id = NULL
WHERE id = :id AND state IN ({revive_from})
RETURNING *;

-- name: get_job
SELECT * FROM jobs WHERE id = :id;

-- name: list_jobs
SELECT * FROM jobs
WHERE (:state IS NULL OR state = :state) AND (:queue IS NULL OR queue = :queue)
ORDER BY id DESC
LIMIT :limit;

-- name: count_by_queue_state
SELECT queue,
       CASE WHEN state = 'scheduled' AND run_at <= :now THEN 'ready' ELSE state END AS shown,
       count(*)
FROM jobs GROUP BY queue, shown;

-- name: oldest_ready
SELECT queue, min(run_at) FROM jobs
WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= :now)
GROUP BY queue;

-- name: prune
-- Small batches keep the write lock short; the caller repeats until nothing is left.
DELETE FROM jobs
WHERE id IN (
    SELECT id FROM jobs
    WHERE state = :state AND finished_at < :cutoff
    LIMIT :batch
);
