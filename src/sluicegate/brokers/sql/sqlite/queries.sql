-- Named SQL blocks for the SQLite broker. A block starts with "-- name: NAME"; one that
-- returns rows declares them on the next line ("-- columns: a, b" or "-- returns: job").
-- {ready}, {held}, {cancel_from}, ... are states from sluicegate.job's transition table;
-- {job_columns} lists the columns a Job is built from (see sluicegate/brokers/sqlfiles.py).
-- A list of queues is one JSON array parameter, read with json_each.

-- name: create_version_table
CREATE TABLE IF NOT EXISTS schema_version
    (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL);

-- name: schema_version
-- columns: version
SELECT coalesce(max(version), 0) AS version FROM schema_version;

-- name: version_table_exists
-- columns: found
SELECT EXISTS (
    SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'
) AS found;

-- name: record_migration
INSERT INTO schema_version (version, name, applied_at) VALUES (:version, :name, :now);

-- name: insert_job
INSERT INTO jobs (queue, task, args, kwargs, state, priority, run_at, max_attempts,
                  unique_key, enqueued_at, limits, headers, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: insert_unique_job
-- The conflict target is the partial unique index over unfinished jobs: its WHERE must
-- match the index's, states in the same order.
INSERT INTO jobs (queue, task, args, kwargs, state, priority, run_at, max_attempts,
                  unique_key, enqueued_at, limits, headers, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ({unfinished})
DO NOTHING;

-- name: unfinished_by_unique_key
-- returns: job
SELECT {job_columns} FROM jobs WHERE unique_key = :key AND state IN ({unfinished});

-- name: expire_due
-- columns: id
-- Every claim's first step (docs/lifecycle.md, "Expiry"): waiting jobs whose expires_at
-- has come end cancelled, reason "expired", oldest expiry first, at most :limit a claim
-- (the claim's reads skip any left over). Off jobs_expiring, which holds only waiting jobs
-- that have an expiry: for jobs without one, a seek that finds nothing.
UPDATE jobs
SET state = {cancelled}, finished_at = :now, lease_expires_at = NULL,
    finish_seq = {fragment_finish_seq},
    history = {fragment_history(json_object('event', {happened_cancelled}, 'from', state,
        'reason', {reason_expired}))}
WHERE id IN (SELECT id FROM jobs INDEXED BY jobs_expiring
             WHERE expires_at IS NOT NULL AND state IN ({expire_from}) AND expires_at <= :now
             ORDER BY expires_at LIMIT :limit)
RETURNING id;

-- name: promote_due
-- Seeks the jobs_scheduled index (named: the planner would pick jobs_state_queue and read
-- every scheduled job, due or not); touches only scheduled jobs that are due. An expired
-- one (past expire_due's batch) stays scheduled, for a later claim to cancel.
UPDATE jobs INDEXED BY jobs_scheduled SET state = {ready}
WHERE state = {scheduled} AND run_at <= :now AND (expires_at IS NULL OR expires_at > :now);

-- name: claim_queue
-- returns: job
-- One queue's ready jobs in claim order, read straight off the jobs_ready index (no sort,
-- no finished rows): an index range of at most :n rows, so the cost does not grow with
-- the backlog. An expired job is passed over (expire_due cancels it). Fencing: every claimed row gets this claim's token and charges an attempt.
-- claim_ids below sets the same columns. Jobs that name limits are not in jobs_ready:
-- they are claimed by id, after admission (see claim_gated in broker.py).
UPDATE jobs
SET state = {claimed}, attempts = attempts + 1, lease_token = :token,
    lease_expires_at = :now + :lease, worker_id = :worker
WHERE id IN (
    SELECT id FROM jobs
    WHERE state = {ready} AND queue = :queue AND limits IS NULL
      AND (expires_at IS NULL OR expires_at > :now)
    ORDER BY priority, run_at, id
    LIMIT :n
)
RETURNING {job_columns};

-- name: ready_of_queue
-- columns: id, priority, run_at, limits
-- A claim over several queues reads this once per queue (the same index range as
-- claim_queue), takes the first :n of them all in claim order, and claims those by id.
SELECT id, priority, run_at, limits FROM jobs
WHERE state = {ready} AND queue = :queue AND limits IS NULL
  AND (expires_at IS NULL OR expires_at > :now)
ORDER BY priority, run_at, id
LIMIT :n;

-- name: claim_ids
-- returns: job
-- By primary key (the + keeps the planner off the state indexes, which would scan every
-- ready job).
UPDATE jobs
SET state = {claimed}, attempts = attempts + 1, lease_token = :token,
    lease_expires_at = :now + :lease, worker_id = :worker, host = :host
WHERE id IN (SELECT value FROM json_each(:ids)) AND +state = {ready}
  AND (expires_at IS NULL OR expires_at > :now)
RETURNING {job_columns};

-- name: probe_gated
-- columns: found
-- Is any ready job of these queues waiting on limits? Read off jobs_gated (empty when no
-- limit is used): the planner would otherwise pick jobs_state_queue and step over every
-- ready job without limits.
SELECT 1 AS found FROM jobs INDEXED BY jobs_gated
WHERE state = {ready} AND limits IS NOT NULL
  AND queue IN (SELECT value FROM json_each(:queues))
LIMIT 1;

-- name: gated_groups
-- columns: limits
-- The distinct needs of one queue's ready limited jobs after :after (in text order), one
-- index seek each (a loose scan of jobs_gated), however many jobs wait behind each: at
-- most :groups of them.
WITH RECURSIVE g(needs) AS (
    SELECT (SELECT limits FROM jobs
            WHERE state = {ready} AND queue = :queue AND limits > :after
            ORDER BY limits LIMIT 1)
    UNION ALL
    SELECT (SELECT limits FROM jobs
            WHERE state = {ready} AND queue = :queue AND limits > g.needs
            ORDER BY limits LIMIT 1)
    FROM g WHERE g.needs IS NOT NULL
)
SELECT needs AS limits FROM g WHERE needs IS NOT NULL LIMIT :groups;

-- name: gated_heads
-- columns: id, priority, run_at, limits
-- The first :n jobs of one group of equal needs, in claim order (a jobs_gated range).
SELECT id, priority, run_at, limits FROM jobs
WHERE state = {ready} AND queue = :queue AND limits = :limits
  AND (expires_at IS NULL OR expires_at > :now)
ORDER BY priority, run_at, id
LIMIT :n;

-- name: held_needs
-- columns: name, part, host, cost
-- Tokens in use, derived from the needs of every claimed and running job (jobs_holding:
-- only held jobs that name limits, however many others run), but the claimer's own jobs
-- in :done (a JSON array of [id, token]): their bodies ended, their outcomes are on the way.
SELECT json_extract(e.value, '$[0]') AS name, json_extract(e.value, '$[1]') AS part,
       j.host AS host, sum(json_extract(e.value, '$[2]')) AS cost
FROM jobs AS j INDEXED BY jobs_holding, json_each(j.limits) AS e
WHERE j.state IN ({held}) AND j.limits IS NOT NULL
  AND (j.id, j.lease_token) NOT IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
                                    FROM json_each(:done))
GROUP BY 1, 2, 3;

-- name: limit_rows
-- columns: name, concurrency, rate, burst, scope, partition_by, overridden
SELECT name, concurrency, rate, burst, scope, partition_by, overridden FROM limits;

-- name: bucket_rows
-- columns: name, part, host, tokens, at
SELECT name, part, host, tokens, at FROM limit_buckets;

-- name: save_bucket
INSERT INTO limit_buckets (name, part, host, tokens, at) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (name, part, host) DO UPDATE SET tokens = excluded.tokens, at = excluded.at;

-- name: register_limit
-- A limit an operator set keeps its values; the declaration is kept for reset_limit.
INSERT INTO limits (name, concurrency, rate, burst, scope, partition_by, declared, updated_at)
VALUES (:name, :concurrency, :rate, :burst, :scope, :partition_by, :declared, :now)
ON CONFLICT (name) DO UPDATE SET
    concurrency = CASE WHEN overridden THEN concurrency ELSE excluded.concurrency END,
    rate = CASE WHEN overridden THEN rate ELSE excluded.rate END,
    burst = CASE WHEN overridden THEN burst ELSE excluded.burst END,
    scope = excluded.scope, partition_by = excluded.partition_by,
    declared = excluded.declared, updated_at = excluded.updated_at;

-- name: set_limit
UPDATE limits
SET concurrency = :concurrency, rate = :rate, burst = :burst, overridden = 1, updated_at = :now
WHERE name = :name;

-- name: declared_limit
-- columns: declared
SELECT declared FROM limits WHERE name = :name;

-- name: reset_limit
UPDATE limits
SET concurrency = :concurrency, rate = :rate, burst = :burst, overridden = 0, updated_at = :now
WHERE name = :name;

-- name: waiting_groups
-- columns: limits, jobs, oldest
-- Ready jobs per group of equal needs (jobs_gated: only jobs that wait on limits).
SELECT limits, count(*) AS jobs, min(run_at) AS oldest FROM jobs INDEXED BY jobs_gated
WHERE state = {ready} AND limits IS NOT NULL
GROUP BY limits;

-- name: probe_ready
-- columns: found
SELECT 1 AS found FROM jobs
WHERE state = {ready} AND queue IN (SELECT value FROM json_each(:queues))
LIMIT 1;

-- name: probe_due
-- columns: found
SELECT 1 AS found FROM jobs
WHERE state = {scheduled} AND run_at <= :now
  AND queue IN (SELECT value FROM json_each(:queues))
LIMIT 1;

-- name: next_scheduled
-- columns: run_at
SELECT min(run_at) AS run_at FROM jobs
WHERE state = {scheduled} AND queue IN (SELECT value FROM json_each(:queues));

-- name: start
-- columns: id, token
-- Batched writes: :batch is a JSON array of [job id, fencing token, ...] per claim, one
-- statement per kind and turn; RETURNING names the claims whose own token matched.
UPDATE jobs SET state = {running}, started_at = :now
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token
      FROM json_each(:batch)) AS c
WHERE jobs.id = c.id AND jobs.lease_token = c.token AND +jobs.state IN ({start_from})
RETURNING jobs.id, jobs.lease_token AS token;

-- name: ack
-- columns: id, token
-- A claim finished without a separate start (record() folds the two) began its body now;
-- started_at of an earlier attempt must not stand in for this one. Same for fail_*.
UPDATE jobs
SET state = {succeeded}, result = c.result, finished_at = :now,
    finish_seq = {fragment_finish_seq},
    started_at = CASE WHEN jobs.state = {running} THEN jobs.started_at ELSE :now END,
    lease_expires_at = NULL
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token,
             json_extract(value, '$[2]') AS result
      FROM json_each(:batch)) AS c
WHERE jobs.id = c.id AND jobs.lease_token = c.token AND +jobs.state IN ({ack_from})
RETURNING jobs.id, jobs.lease_token AS token;

-- name: fail_retry
-- columns: id, token
-- :batch: [id, token, error, retry_in, event, brief] per claim: event, failed or timeout,
-- and brief, the error as the history keeps it (sluicegate.job.history_error).
UPDATE jobs
SET state = {scheduled}, run_at = :now + c.retry_in, last_error = c.error,
    started_at = CASE WHEN jobs.state = {running} THEN jobs.started_at ELSE :now END,
    lease_expires_at = NULL,
    history = {fragment_history(json_object(
        'event', c.event, 'worker', worker_id, 'retry_at', :now + c.retry_in,
        'error', json(c.brief)))}
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token,
             json_extract(value, '$[2]') AS error, json_extract(value, '$[3]') AS retry_in,
             json_extract(value, '$[4]') AS event, json_extract(value, '$[5]') AS brief
      FROM json_each(:batch)) AS c
WHERE jobs.id = c.id AND jobs.lease_token = c.token AND +jobs.state IN ({retry_from})
RETURNING jobs.id, jobs.lease_token AS token;

-- name: fail_dead
-- columns: id, token
-- :batch: [id, token, error, event, brief] per claim.
UPDATE jobs
SET state = {dead}, last_error = c.error, finished_at = :now, lease_expires_at = NULL,
    finish_seq = {fragment_finish_seq},
    started_at = CASE WHEN jobs.state = {running} THEN jobs.started_at ELSE :now END,
    history = {fragment_history(json_object(
        'event', c.event, 'worker', worker_id, {dead}, json('true'),
        'error', json(c.brief)))}
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS token,
             json_extract(value, '$[2]') AS error, json_extract(value, '$[3]') AS event,
             json_extract(value, '$[4]') AS brief
      FROM json_each(:batch)) AS c
WHERE jobs.id = c.id AND jobs.lease_token = c.token AND +jobs.state IN ({bury_from})
RETURNING jobs.id, jobs.lease_token AS token;

-- name: fragment_history(entry)
-- A job's history with one more entry, for every statement that takes a job off the
-- happy path (sluicegate.job.Happened). The caller gives the entry's own fields as a JSON
-- object, {fragment_history(json_object('event', ...))}; its time (:now, the broker's
-- clock) and its attempt come from here, and fields that are NULL are left out (as
-- json_patch drops them). Past {history_cap} entries the oldest goes. A job that ends
-- dead says so with {dead}: true (the key is the state's name). Columns are the
-- statement's row (unqualified: the statement's other tables must not name them).
json_insert(
    CASE WHEN json_array_length(coalesce(history, '[]')) >= {history_cap}
         THEN json_remove(history, '$[0]') ELSE coalesce(history, '[]') END,
    '$[#]', json_patch(json_object('at', :now, 'attempt', attempts), {entry}))

-- name: heartbeat
-- Job progress rides along: :fraction NULL keeps the stored value, else the attempt's
-- latest report is stored with the broker's clock (sluicegate.job.Progress).
UPDATE jobs SET lease_expires_at = :now + :lease,
    progress = CASE WHEN :fraction IS NULL THEN progress
        ELSE json_object('fraction', :fraction, 'message', :message, 'at', :now) END
WHERE id = :id AND lease_token = :token AND state IN ({held});

-- name: release
-- Shutdown hands the job back: the attempt charged at claim is refunded.
UPDATE jobs
SET state = {ready}, attempts = max(attempts - 1, 0), lease_expires_at = NULL,
    worker_id = NULL,
    history = {fragment_history(json_object('event', {happened_released}, 'worker', worker_id))}
WHERE id = :id AND lease_token = :token AND state IN ({release_from});

-- name: probe_expired
-- columns: found
SELECT 1 AS found FROM jobs WHERE state IN ({held}) AND lease_expires_at < :now LIMIT 1;

-- name: recover_expired
-- columns: id, state
-- Expired leases, oldest expiry first (every broker takes the same batch): back to ready
-- (the attempt charged at the claim stays charged) or dead when attempts are exhausted.
UPDATE jobs
SET state = CASE WHEN attempts >= max_attempts THEN {dead} ELSE {ready} END,
    finished_at = CASE WHEN attempts >= max_attempts THEN :now ELSE NULL END,
    finish_seq = CASE WHEN attempts >= max_attempts THEN {fragment_finish_seq} END,
    worker_id = CASE WHEN attempts >= max_attempts THEN worker_id ELSE NULL END,
    lease_expires_at = NULL,
    last_error = json_object('type', 'WorkerLost', 'traceback', '',
        'message', 'worker lost: lease of worker ' || coalesce(worker_id, '?')
                   || ' expired without a heartbeat'),
    history = {fragment_history(json_object('event', {happened_recovered}, 'worker', worker_id,
        {dead}, json(CASE WHEN attempts >= max_attempts THEN 'true' END)))}
WHERE id IN (SELECT id FROM jobs WHERE state IN ({recover_from}) AND lease_expires_at < :now
             ORDER BY lease_expires_at, id LIMIT :limit)
RETURNING id, state;

-- name: recover_worker
-- columns: id, state
-- The held jobs of a worker whose process is gone (seen by a worker on its host), leases
-- unexpired or not: back to ready (the attempt stays charged) or dead when attempts are
-- exhausted. Held jobs are few: found through a partial index of held rows, never the
-- finished ones.
UPDATE jobs
SET state = CASE WHEN attempts >= max_attempts THEN {dead} ELSE {ready} END,
    finished_at = CASE WHEN attempts >= max_attempts THEN :now ELSE NULL END,
    finish_seq = CASE WHEN attempts >= max_attempts THEN {fragment_finish_seq} END,
    worker_id = CASE WHEN attempts >= max_attempts THEN worker_id ELSE NULL END,
    lease_expires_at = NULL,
    last_error = :error,
    history = {fragment_history(json_object('event', {happened_worker_lost}, 'worker', worker_id,
        {dead}, json(CASE WHEN attempts >= max_attempts THEN 'true' END)))}
WHERE state IN ({recover_from}) AND worker_id = :worker
RETURNING id, state;

-- name: cancel
-- Operator actions on jobs by id (:ids, a JSON array: one for `jobs cancel ID`, a batch
-- for cancel_matching), each only from the states its event allows; by primary key (the
-- + keeps the planner off the state indexes). No RETURNING: a batch needs only its count
-- (a third of its time went to returning a thousand rows), one job is read after.
UPDATE jobs
SET state = {cancelled}, finished_at = :now, lease_expires_at = NULL,
    finish_seq = {fragment_finish_seq},
    history = {fragment_history(json_object('event', {happened_cancelled}, 'from', state,
        'worker', CASE WHEN state IN ({held}) THEN worker_id END, 'by', :by))}
WHERE id IN (SELECT value FROM json_each(:ids)) AND +state IN ({cancel_from});

-- name: shed_pick
-- columns: id
-- The ready job of :queue that would start last, if no more urgent than :priority
-- (admission's shed policy): off the queue's ready range of jobs_state_queue.
SELECT id FROM jobs INDEXED BY jobs_state_queue
WHERE state = {ready} AND queue = :queue AND priority >= :priority
ORDER BY priority DESC, run_at DESC, id DESC
LIMIT 1;

-- name: revive
-- An operator's retry runs the job: an expiry it had is dropped.
UPDATE jobs
SET state = {ready}, attempts = 0, run_at = :now, finished_at = NULL, finish_seq = NULL,
    lease_expires_at = NULL, worker_id = NULL, expires_at = NULL,
    history = {fragment_history(json_object('event', {happened_retried}, 'from', state))}
WHERE id IN (SELECT value FROM json_each(:ids)) AND +state IN ({revive_from});

-- name: matching_by_queue
-- columns: id, unique_key
-- A bulk action's jobs (cancel_matching, retry_matching): at most :limit of one (state,
-- queue) range of jobs_state_queue, NULL :task for any (a task's are in jobs_task, but
-- its held ones: those are few). With :free_key, only jobs whose unique key no other
-- unfinished job holds (one seek of jobs_unique_unfinished each), as a revival needs: the
-- others do not fill the batch.
SELECT id, unique_key FROM jobs INDEXED BY jobs_state_queue
WHERE state = :state AND queue = :queue AND (:task IS NULL OR task = :task)
  AND NOT (:free_key AND unique_key IS NOT NULL AND EXISTS (
      SELECT 1 FROM jobs AS u
      WHERE u.unique_key = jobs.unique_key AND u.state IN ({unfinished})))
LIMIT :limit;

-- name: matching_by_task
-- columns: id, unique_key
-- The same, from one (task, state, queue) range of jobs_task.
SELECT id, unique_key FROM jobs INDEXED BY jobs_task
WHERE task = :task AND state = :state AND queue = :queue AND state NOT IN ({held})
  AND NOT (:free_key AND unique_key IS NOT NULL AND EXISTS (
      SELECT 1 FROM jobs AS u
      WHERE u.unique_key = jobs.unique_key AND u.state IN ({unfinished})))
LIMIT :limit;

-- name: get_job
-- returns: job
SELECT {job_columns} FROM jobs WHERE id = :id;

-- name: list_jobs
-- returns: job
-- Operator listings (sluicegate/brokers/listing.py), newest first, at most :limit rows of
-- ids up to :upto (keyset paging), never a sort of the table. No filter: the primary key
-- from :upto down. A filter: the ranges below, each read the same way, merged by id.
SELECT {job_columns} FROM jobs WHERE id <= :upto ORDER BY id DESC LIMIT :limit;

-- name: list_jobs_of_state_queue
-- returns: job
-- One range of jobs_state_queue read backwards: (state, queue), like every SQLite index,
-- ends with the id.
SELECT {job_columns} FROM jobs INDEXED BY jobs_state_queue
WHERE state = :state AND queue = :queue AND id <= :upto
ORDER BY id DESC
LIMIT :limit;

-- name: queues_of_state
-- columns: queue
-- The queues with jobs in a state, one index seek each (a loose scan of jobs_state_queue):
-- the cost follows the number of queues, not of jobs.
WITH RECURSIVE queues(queue) AS (
    SELECT (SELECT min(queue) FROM jobs INDEXED BY jobs_state_queue WHERE state = :state)
    UNION ALL
    SELECT (SELECT min(queue) FROM jobs INDEXED BY jobs_state_queue
            WHERE state = :state AND queue > queues.queue)
    FROM queues WHERE queues.queue IS NOT NULL
)
SELECT queue FROM queues WHERE queue IS NOT NULL;

-- name: list_jobs_of_task
-- returns: job
-- One (task, state, queue) range of jobs_task read backwards. The index holds the states
-- NOT IN ({held}) only: a query names its WHERE term for SQLite to take it.
SELECT {job_columns} FROM jobs INDEXED BY jobs_task
WHERE task = :task AND state = :state AND queue = :queue AND id <= :upto
  AND state NOT IN ({held})
ORDER BY id DESC
LIMIT :limit;

-- name: queues_of_task_state
-- columns: queue
-- The queues of a task's jobs in a state: a loose scan of jobs_task, one seek per queue.
WITH RECURSIVE queues(queue) AS (
    SELECT (SELECT min(queue) FROM jobs INDEXED BY jobs_task
            WHERE task = :task AND state = :state AND state NOT IN ({held}))
    UNION ALL
    SELECT (SELECT min(queue) FROM jobs INDEXED BY jobs_task
            WHERE task = :task AND state = :state AND state NOT IN ({held})
              AND queue > queues.queue)
    FROM queues WHERE queues.queue IS NOT NULL
)
SELECT queue FROM queues WHERE queue IS NOT NULL;

-- name: list_held_of_task
-- returns: job
-- A task's claimed and running jobs (NULL :state, :queue: any), off jobs_leased: held
-- jobs are as many as the workers' slots, whatever the history.
SELECT {job_columns} FROM jobs INDEXED BY jobs_leased
WHERE state IN ({held}) AND task = :task AND id <= :upto
  AND (:state IS NULL OR state = :state) AND (:queue IS NULL OR queue = :queue)
ORDER BY id DESC
LIMIT :limit;

-- name: list_jobs_of_unique_key
-- returns: job
-- The jobs of one unique key, any state, off jobs_unique_key read backwards (a key's jobs
-- are few); the other filters (NULL: any) are checked on those rows.
SELECT {job_columns} FROM jobs INDEXED BY jobs_unique_key
WHERE unique_key = :key AND id <= :upto
  AND (:state IS NULL OR state = :state) AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
ORDER BY id DESC
LIMIT :limit;

-- name: fragment_finish_seq
-- A finishing write's stamp (see 0004_stats.sql): above every stamp settled and every one
-- given so far; rows finished in one statement share it. Two index seeks; the write lock
-- orders stamps as their commits.
(SELECT max(coalesce((SELECT max(finish_seq) FROM jobs INDEXED BY jobs_settling
                      WHERE finish_seq IS NOT NULL), 0),
            (SELECT seq FROM stats_horizon)) + 1)

-- name: finished_counts
-- columns: queue, state, jobs, unsettled
-- Finished jobs per queue and state: the settled counts plus the jobs stamped above the
-- horizon (a range at the end of jobs_settling, covering); ``unsettled`` says how many of
-- them were not settled yet.
SELECT queue, state, sum(jobs) AS jobs, sum(unsettled) AS unsettled
FROM (
    SELECT queue, state, jobs, 0 AS unsettled FROM stats_settled
    UNION ALL
    SELECT queue, state, count(*) AS jobs, count(*) AS unsettled
    FROM jobs INDEXED BY jobs_settling
    WHERE finish_seq IS NOT NULL AND finish_seq > (SELECT seq FROM stats_horizon)
    GROUP BY queue, state
)
GROUP BY queue, state
HAVING sum(jobs) <> 0;

-- name: settle_bound
-- columns: step_end, last
-- Where the next settling step stops: the stamp of the :chunk-th unsettled job (NULL when
-- fewer wait: the step then goes to ``last``, the highest stamp; NULL when none waits).
-- Steps keep the write lock short.
SELECT (SELECT finish_seq FROM jobs INDEXED BY jobs_settling
        WHERE finish_seq IS NOT NULL AND finish_seq > (SELECT seq FROM stats_horizon)
        ORDER BY finish_seq LIMIT 1 OFFSET :chunk) AS step_end,
       (SELECT max(finish_seq) FROM jobs INDEXED BY jobs_settling
        WHERE finish_seq IS NOT NULL AND finish_seq > (SELECT seq FROM stats_horizon)) AS last;

-- name: settle
-- Jobs stamped above the horizon up to :bound join the settled counts (write lock held).
INSERT INTO stats_settled (queue, state, jobs)
SELECT queue, state, count(*) FROM jobs INDEXED BY jobs_settling
WHERE finish_seq IS NOT NULL AND finish_seq > (SELECT seq FROM stats_horizon)
  AND finish_seq <= :bound
GROUP BY queue, state
ON CONFLICT (queue, state) DO UPDATE SET jobs = jobs + excluded.jobs;

-- name: move_horizon
UPDATE stats_horizon SET seq = :bound WHERE seq < :bound;

-- name: unsettle
-- Settled jobs that a prune deleted: out of the counts, in the delete's transaction.
UPDATE stats_settled SET jobs = jobs - :jobs WHERE queue = :queue AND state = :state;

-- name: unsettle_revived
-- Dead or cancelled jobs about to be revived (:ids; same transaction, before the revive):
-- out of the settled counts, those in them.
UPDATE stats_settled SET jobs = stats_settled.jobs - g.revived
FROM (SELECT queue, state, count(*) AS revived FROM jobs
      WHERE id IN (SELECT value FROM json_each(:ids)) AND +state IN ({revive_from})
        AND (finish_seq IS NULL OR finish_seq <= (SELECT seq FROM stats_horizon))
      GROUP BY queue, state) AS g
WHERE stats_settled.queue = g.queue AND stats_settled.state = g.state;

-- name: prune
-- columns: queue, state, settled
-- Small batches keep the write lock short; the caller repeats until nothing is left, and
-- takes the settled ones out of the counts in the same transaction.
DELETE FROM jobs
WHERE id IN (
    SELECT id FROM jobs
    WHERE state = :state AND finished_at < :cutoff
    LIMIT :batch
)
RETURNING queue, state,
          finish_seq IS NULL OR finish_seq <= (SELECT seq FROM stats_horizon) AS settled;

-- name: forget_workers
-- Registry rows of workers gone (stopped, or unseen) since before :cutoff. A handful of
-- rows: read whole.
DELETE FROM workers WHERE coalesce(stopped_at, last_seen) < :cutoff;

-- name: publish_worker
-- started_at only on the first publish; stopped_at once stopped, kept after.
INSERT INTO workers (id, host, pid, version, pools, started_at, last_seen, stopped_at, held,
                     snapshot)
VALUES (:id, :host, :pid, :version, :pools, :now, :now, CASE WHEN :stopped THEN :now END,
        :held, :snapshot)
ON CONFLICT (id) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, version = excluded.version,
    pools = excluded.pools, last_seen = excluded.last_seen,
    stopped_at = coalesce(excluded.stopped_at, workers.stopped_at),
    held = excluded.held, snapshot = excluded.snapshot;

-- name: list_workers
-- columns: id, host, pid, version, pools, started_at, last_seen, stopped_at, held, snapshot
SELECT id, host, pid, version, pools, started_at, last_seen, stopped_at, held, snapshot
FROM workers
WHERE stopped_at IS NULL OR stopped_at >= :since OR last_seen >= :since
ORDER BY host, started_at, id;

-- name: fragment_depth_totals
-- The depths of queue_depths and queue_depths_of, from their parts: one row per queue.
SELECT queue, sum(ready) AS ready, sum(scheduled) AS scheduled, sum(claimed) AS claimed,
       sum(running) AS running, :now - min(oldest) AS age_s
FROM parts GROUP BY queue

-- name: queue_depths
-- columns: queue, ready, scheduled, claimed, running, age_s
-- Unfinished jobs per queue, never a finished row: ready ones off jobs_ready and jobs_gated
-- (queue first, run_at for the oldest), scheduled ones (due ones count as ready: a claim
-- would promote them first) and held ones off one state's range of jobs_state_queue at a
-- time (held: the index alone). SQLite looks up each ready or scheduled job's row too (it
-- never takes a partial index for covering when the query names its WHERE's columns), but
-- only theirs: the cost follows the backlog, not the history.
WITH parts(queue, ready, scheduled, claimed, running, oldest) AS (
    SELECT queue, count(*), 0, 0, 0, min(run_at) FROM jobs INDEXED BY jobs_ready
    WHERE state = {ready} AND limits IS NULL
    GROUP BY queue
    UNION ALL
    SELECT queue, count(*), 0, 0, 0, min(run_at) FROM jobs INDEXED BY jobs_gated
    WHERE state = {ready} AND limits IS NOT NULL
    GROUP BY queue
    UNION ALL
    SELECT queue, count(*) FILTER (WHERE run_at <= :now), count(*) FILTER (WHERE run_at > :now),
           0, 0, min(run_at) FILTER (WHERE run_at <= :now)
    FROM jobs INDEXED BY jobs_state_queue
    WHERE state = {scheduled}
    GROUP BY queue
    UNION ALL
    SELECT queue, 0, 0, count(*) FILTER (WHERE state = {claimed}),
           count(*) FILTER (WHERE state = {running}), NULL
    FROM jobs INDEXED BY jobs_state_queue
    WHERE state IN ({held})
    GROUP BY queue
)
{fragment_depth_totals};

-- name: queue_depths_of
-- columns: queue, ready, scheduled, claimed, running, age_s
-- queue_depths for the queues of :queues only (a JSON array), each read off its own index
-- ranges; every one of them appears, with zeros when it has no unfinished job.
WITH wanted(queue) AS (SELECT DISTINCT value FROM json_each(:queues)),
parts(queue, ready, scheduled, claimed, running, oldest) AS (
    SELECT queue, count(*), 0, 0, 0, min(run_at) FROM jobs INDEXED BY jobs_ready
    WHERE state = {ready} AND limits IS NULL AND queue IN (SELECT queue FROM wanted)
    GROUP BY queue
    UNION ALL
    SELECT queue, count(*), 0, 0, 0, min(run_at) FROM jobs INDEXED BY jobs_gated
    WHERE state = {ready} AND limits IS NOT NULL AND queue IN (SELECT queue FROM wanted)
    GROUP BY queue
    UNION ALL
    SELECT queue, count(*) FILTER (WHERE run_at <= :now), count(*) FILTER (WHERE run_at > :now),
           0, 0, min(run_at) FILTER (WHERE run_at <= :now)
    FROM jobs INDEXED BY jobs_state_queue
    WHERE state = {scheduled} AND queue IN (SELECT queue FROM wanted)
    GROUP BY queue
    UNION ALL
    SELECT queue, 0, 0, count(*) FILTER (WHERE state = {claimed}),
           count(*) FILTER (WHERE state = {running}), NULL
    FROM jobs INDEXED BY jobs_state_queue
    WHERE state IN ({held}) AND queue IN (SELECT queue FROM wanted)
    GROUP BY queue
    UNION ALL
    SELECT queue, 0, 0, 0, 0, NULL FROM wanted
)
{fragment_depth_totals};

-- name: last_job_id
-- columns: id
SELECT coalesce(max(id), 0) AS id FROM jobs;

-- name: arrivals
-- columns: queue, jobs, last
-- Jobs stored after :after, per queue: at most :scan of them, read in id order off the
-- primary key (ids grow with each commit: one writer at a time).
SELECT queue, count(*) AS jobs, max(id) AS last
FROM (SELECT id, queue FROM jobs WHERE id > :after ORDER BY id LIMIT :scan)
GROUP BY queue;

-- ---- paused queues ----

-- name: pause_queue
-- columns: queue
-- Returns the row only when this call paused it (pausing twice keeps the first pause).
INSERT INTO paused_queues (queue, paused_by, paused_at) VALUES (:queue, :by, :now)
ON CONFLICT (queue) DO NOTHING
RETURNING queue;

-- name: resume_queue
-- columns: queue
DELETE FROM paused_queues WHERE queue = :queue RETURNING queue;

-- name: paused_queues
-- columns: queue, paused_by, paused_at
SELECT queue, paused_by, paused_at FROM paused_queues ORDER BY queue;

-- name: finished_among
-- columns: waited, job.*
-- Of the waited ids (:ids, a JSON array), the finished jobs, and a row with NULL job
-- columns for each id no job has: one primary-key probe per id, whatever the history.
SELECT w.value AS waited, {job_columns:j}
FROM json_each(:ids) AS w LEFT JOIN jobs AS j ON j.id = w.value
WHERE j.id IS NULL OR j.state IN ({terminal});

-- ---- periodic schedules (0011) ----

-- name: schedule_rows
-- columns: name, since, last_tick, last_job_id
SELECT name, since, last_tick, last_job_id FROM schedules ORDER BY name;

-- name: register_schedule
INSERT INTO schedules (name, since) VALUES (:name, :now) ON CONFLICT (name) DO NOTHING;

-- name: take_tick
-- columns: name
-- The compare-and-set: the row (made if missing) moves to :tick only if its last tick is
-- earlier; no row back means another process took this tick or a later one.
INSERT INTO schedules (name, since, last_tick) VALUES (:name, :now, :tick)
ON CONFLICT (name) DO UPDATE SET last_tick = excluded.last_tick
WHERE schedules.last_tick IS NULL OR schedules.last_tick < excluded.last_tick
RETURNING name;

-- name: tick_job
UPDATE schedules SET last_job_id = :job WHERE name = :name;
