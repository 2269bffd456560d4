-- Named SQL blocks for the PostgreSQL broker. A block starts with "-- name: NAME"; one that
-- returns rows declares them on the next line ("-- columns: a, b" or "-- returns: job").
-- Batched writes take arrays of (job id, fencing token) and RETURN the pairs they matched:
-- a claim is done only if its own token matched, never because its job id did. Only a
-- claim's own start and outcomes leave its token on the row; release, recovery and cancel
-- clear it (see own_writes).
-- {schema} is the validated schema; {ready}, {held}, {cancel_from}, ... are states taken from
-- sluicegate.job's transition table; {job_columns:ALIAS} lists the columns a Job is built
-- from, times as unix seconds. {now} is the database clock,
-- coalesce(%(now)s, statement_timestamp()): tests may pass a time in, production passes NULL
-- so leases never depend on a worker's clock.

-- name: migration_lock
-- columns: locked
-- Serialises migrators of this schema until the transaction ends.
SELECT pg_advisory_xact_lock(hashtext('sluicegate:' || %(schema)s)) AS locked;

-- name: schema_exists
-- columns: found
SELECT to_regnamespace(%(schema)s) IS NOT NULL AS found;

-- name: create_version_table
CREATE TABLE IF NOT EXISTS {schema}.schema_version
    (version integer PRIMARY KEY, name text NOT NULL,
     applied_at timestamptz NOT NULL DEFAULT now());

-- name: version_table_exists
-- columns: found
SELECT to_regclass(%(version_table)s) IS NOT NULL AS found;

-- name: schema_version
-- columns: version
SELECT coalesce(max(version), 0) AS version FROM {schema}.schema_version;

-- name: record_migration
INSERT INTO {schema}.schema_version (version, name) VALUES (%(version)s, %(name)s);

-- name: insert_jobs
-- columns: id, state, run_at, enqueued_at, expires_at
-- Rows and their wake-up in one statement: an enqueue outside a caller's transaction is one
-- round trip, committed on its own (autocommit). %(queues)s are the queues to wake: none
-- when the caller notifies later itself. The one-time filter runs pg_notify first; the
-- notification goes out when the statement commits. It returns only what the server
-- decided; the Jobs are built from their specs (fresh.py), in id order, which is the
-- batch's (ORDER BY v.n: identities are drawn in that order).
WITH inserted AS (
    INSERT INTO {schema}.jobs (queue, task, args, kwargs, state, priority, run_at,
                               max_attempts, unique_key, enqueued_at, limits, headers,
                               expires_at)
    SELECT v.queue, v.task, v.args, v.kwargs,
           CASE WHEN v.run_at <= {now} THEN {ready} ELSE {scheduled} END,
           v.priority, v.run_at, v.max_attempts, NULL, {now}, v.limits, v.headers,
           coalesce(to_timestamp(v.exp_at), {now} + make_interval(secs => v.exp_in))
    FROM unnest(%(queue)s::text[], %(task)s::text[], %(args)s::text[], %(kwargs)s::text[],
                %(priority)s::int[], %(max_attempts)s::int[], %(delay)s::float8[],
                %(run_at)s::float8[], %(limits)s::text[], %(headers)s::text[],
                %(expires_at)s::float8[], %(expires_in)s::float8[])
         WITH ORDINALITY
         AS i(queue, task, args, kwargs, priority, max_attempts, delay, at, limits, headers,
              exp_at, exp_in, n)
         CROSS JOIN LATERAL (
            SELECT i.*,
                   coalesce(to_timestamp(i.at), {now} + make_interval(secs => i.delay)) AS run_at
         ) AS v
    ORDER BY v.n
    RETURNING id, state, run_at, enqueued_at, expires_at
), woke AS (
    SELECT pg_notify(%(channel)s, q) FROM unnest(%(queues)s::text[]) AS q
)
SELECT {fragment_stored} FROM inserted WHERE (SELECT count(*) FROM woke) >= 0;

-- name: reserve_ids
-- columns: now, ids
-- A COPY batch's first step (copyin.py): %(n)s ids from the jobs' identity sequence, in
-- order, and the clock the batch is stamped with, in unix microseconds (exact: extract
-- gives numeric). The sequence's name is resolved when the statement is parsed.
SELECT (extract(epoch FROM {now}) * 1000000)::int8 AS now,
       array(SELECT nextval('{schema}.jobs_id_seq') FROM generate_series(1, %(n)s::int)) AS ids;

-- name: copy_jobs
-- The batch's rows (copyin.CopyBatch.rows), ids included: COPY writes the identity
-- column as given. Columns left out take their defaults (attempts 0, unique_key NULL).
COPY {schema}.jobs (id, queue, task, args, kwargs, state, priority, run_at, max_attempts,
                    enqueued_at, limits, headers, expires_at)
FROM STDIN (FORMAT BINARY);

-- name: insert_one_notify
-- columns: id, state, run_at, enqueued_at, expires_at
-- The common enqueue, one job: plain parameters (no arrays to build and unnest) and its
-- wake-up, in one autocommit statement. Returns what the server decided, as insert_jobs.
WITH inserted AS (
    INSERT INTO {schema}.jobs (queue, task, args, kwargs, state, priority, run_at,
                               max_attempts, unique_key, enqueued_at, limits, headers,
                               expires_at)
    SELECT %(queue)s, %(task)s, %(args)s, %(kwargs)s,
           CASE WHEN r.run_at <= {now} THEN {ready} ELSE {scheduled} END,
           %(priority)s::int, r.run_at, %(max_attempts)s::int, NULL, {now}, %(limits)s::text,
           %(headers)s::text, {fragment_expiry}
    FROM (SELECT coalesce(to_timestamp(%(run_at)s::float8),
                          {now} + make_interval(secs => %(delay)s::float8)) AS run_at) AS r
    RETURNING id, state, run_at, enqueued_at, expires_at
), woke AS (
    SELECT pg_notify(%(channel)s, %(queue)s)
)
SELECT {fragment_stored} FROM inserted WHERE (SELECT count(*) FROM woke) >= 0;

-- name: fragment_stored
-- What a plain insert returns (fresh.StoredRows): the columns the server decided.
id, state, extract(epoch FROM run_at)::float8 AS run_at,
extract(epoch FROM enqueued_at)::float8 AS enqueued_at,
extract(epoch FROM expires_at)::float8 AS expires_at

-- name: insert_unique_job
-- returns: job
-- The conflict target is the partial unique index over unfinished jobs.
INSERT INTO {schema}.jobs (queue, task, args, kwargs, state, priority, run_at, max_attempts,
                           unique_key, enqueued_at, limits, headers, expires_at)
SELECT %(queue)s, %(task)s, %(args)s, %(kwargs)s,
       CASE WHEN r.run_at <= {now} THEN {ready} ELSE {scheduled} END,
       %(priority)s, r.run_at, %(max_attempts)s, %(unique_key)s, {now}, %(limits)s::text,
       %(headers)s::text, {fragment_expiry}
FROM (SELECT coalesce(to_timestamp(%(run_at)s::float8), {now} + make_interval(secs => %(delay)s))
      AS run_at) AS r
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state IN ({unfinished})
DO NOTHING
RETURNING {job_columns};

-- name: unfinished_by_unique_key
-- returns: job
SELECT {job_columns} FROM {schema}.jobs
WHERE unique_key = %(unique_key)s AND state IN ({unfinished});

-- name: fragment_expiry
-- A single-row insert's expires_at: %(expires_at)s (epoch seconds), else %(expires_in)s
-- seconds from now, else NULL (it never expires).
coalesce(to_timestamp(%(expires_at)s::float8),
         {now} + make_interval(secs => %(expires_in)s::float8))

-- name: fragment_expire(limit)
-- Every claim's first step (docs/lifecycle.md, "Expiry"), as a data-modifying CTE's body:
-- waiting jobs whose expires_at has come end cancelled, reason "expired", oldest expiry
-- first, at most {limit} a claim (the claim's reads skip any left over), SKIP LOCKED so
-- claimers at once take disjoint rows. Off jobs_expiring, which holds only waiting jobs
-- that have an expiry: for jobs without one, a seek that finds nothing. Returns their ids.
UPDATE {schema}.jobs AS x
SET state = {cancelled}, finished_at = {now}, lease_expires_at = NULL, lease_token = NULL,
    finish_xid = pg_current_xact_id(),
    history = {fragment_history(jsonb_build_object('event', {happened_cancelled}, 'from', state,
        'reason', {reason_expired}))}
WHERE x.id IN (SELECT id FROM {schema}.jobs
               WHERE expires_at IS NOT NULL AND state IN ({expire_from})
                 AND expires_at <= {now}
               ORDER BY expires_at
               LIMIT {limit}
               FOR UPDATE SKIP LOCKED)
RETURNING x.id

-- name: expire_due
-- columns: expired
-- The gated claim's first step (fragment_expire), in its transaction; NOTIFY the waiters
-- (job.wait) with the commit when it cancelled any.
WITH expired AS {fragment_expire(1000)},
woke AS (SELECT pg_notify(%(finished)s, '') FROM (SELECT 1 FROM expired LIMIT 1) AS e)
SELECT (SELECT count(*) FROM expired) + 0 * (SELECT count(*) FROM woke) AS expired;

-- name: notify
-- columns: notified
-- Wake-ups carry only a queue name, never job data.
SELECT pg_notify(%(channel)s, q) AS notified FROM unnest(%(queues)s::text[]) AS q;

-- name: claim
-- columns: promoted, relaxed, gated, expired, job.*
-- One statement, so an idle worker's claim is one round trip. For each wanted queue, an index
-- range of jobs_ready in claim order, at most %(n)s rows, skipping rows other claimers hold
-- (SKIP LOCKED): so no job is claimed twice, claimers never wait on each other, and the cost
-- does not depend on the backlog. Fencing: every claimed row gets this claim's token and
-- charges an attempt.
-- Only jobs that name no limit: those that do are the gated claim's (claim_gated_read and
-- claim_admitted). ``gated`` says whether a wanted queue has any (one index probe per queue
-- on jobs_gated); then this claims nothing, as when it promoted, and the broker claims
-- through the gated claim, which takes jobs of both kinds in one claim order.
-- With %(promote)s, due scheduled jobs (the earliest 1000) become ready first, SKIP LOCKED
-- again so concurrent claimers promote disjoint rows. This statement's snapshot cannot see
-- the rows it promoted, so when it promoted any of the wanted queues it claims nothing (a
-- due job may come first in claim order) and the broker claims again without promoting.
-- The claim is its own transaction and commits without waiting for the WAL flush
-- (synchronous_commit off, set by the statement itself unless told not to, see below): a claim
-- lost in a server crash only means the job is claimed again later, and its holder's ack is
-- refused.
-- Expiry (fragment_expire) comes first: ``expired`` says how many jobs it cancelled
-- (their waiters are notified with the commit); the reads below skip expired jobs, which
-- this statement's snapshot still sees waiting, and promotion leaves them scheduled.
-- The job's columns are NULL when nothing was claimed.
-- %(relax)s is false when the claim shares its transaction with acks (claim_and_record,
-- record_turn): the commit then waits for the WAL flush, as every ack's does.
WITH expired AS {fragment_expire(1000)},
woke AS (SELECT pg_notify(%(finished)s, '') FROM (SELECT 1 FROM expired LIMIT 1) AS e),
promoted AS (
    UPDATE {schema}.jobs SET state = {ready}
    WHERE %(promote)s::boolean AND id IN (
        SELECT id FROM {schema}.jobs
        WHERE state = {scheduled} AND run_at <= {now}
          AND (expires_at IS NULL OR expires_at > {now})
        ORDER BY run_at
        LIMIT 1000
        FOR UPDATE SKIP LOCKED
    )
    RETURNING queue
), gate AS (
    SELECT EXISTS (SELECT 1 FROM unnest(%(queues)s::text[]) AS q(name)
                   CROSS JOIN LATERAL (
                       SELECT 1 FROM {schema}.jobs
                       WHERE state = {ready} AND limits IS NOT NULL AND queue = q.name
                       LIMIT 1
                   ) AS first) AS gated
), candidates AS (
    SELECT c.id, c.priority, c.run_at
    FROM unnest(%(queues)s::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM {schema}.jobs
        WHERE state = {ready} AND limits IS NULL AND queue = q.name
          AND (expires_at IS NULL OR expires_at > {now})
        ORDER BY priority, run_at, id
        LIMIT %(n)s
        FOR UPDATE SKIP LOCKED
    ) AS c
    WHERE NOT EXISTS (SELECT 1 FROM promoted WHERE queue = ANY(%(queues)s::text[]))
      AND NOT (SELECT gated FROM gate)
    ORDER BY c.priority, c.run_at, c.id
    LIMIT %(n)s
), claimed AS (
    -- id = ANY(ARRAY(...)), not a join: the statement runs on a generic plan, which cannot
    -- know that %(n)s is small, and would otherwise merge-join against the whole primary key.
    UPDATE {schema}.jobs AS j
    SET state = {claimed}, attempts = j.attempts + 1, lease_token = %(token)s,
        lease_expires_at = {now} + make_interval(secs => %(lease)s), worker_id = %(worker)s
    WHERE j.id = ANY(ARRAY(SELECT id FROM candidates))
    RETURNING j.*
)
SELECT p.promoted, p.relaxed, (SELECT gated FROM gate) AS gated,
       (SELECT count(*) FROM expired) + 0 * (SELECT count(*) FROM woke) AS expired,
       {job_columns:c}
FROM (SELECT count(*) FILTER (WHERE queue = ANY(%(queues)s::text[])) AS promoted,
             CASE WHEN %(relax)s::boolean
                  THEN set_config('synchronous_commit', 'off', true) END AS relaxed
      FROM promoted) AS p
LEFT JOIN claimed AS c ON true;

-- name: record_turn
-- columns: id, token
-- A worker's turn record, sent with its claim in one pipeline and one transaction
-- (PostgresBroker.claim_and_record): one round trip and one commit for the turn. The
-- starts and acks, token-checked as the start and ack statements are. The waiters'
-- NOTIFY follows in a transaction of its own (PostgresBroker._notify_finished_after).
WITH started AS (
    UPDATE {schema}.jobs AS j SET state = {running}, started_at = {now}
    FROM unnest(%(start_ids)s::bigint[], %(start_tokens)s::bigint[]) AS c(id, token)
    WHERE j.id = c.id AND j.lease_token = c.token AND j.state IN ({start_from})
    RETURNING j.id, c.token
), acked AS (
    UPDATE {schema}.jobs AS j
    SET state = {succeeded}, result = c.result, finished_at = {now},
        finish_xid = pg_current_xact_id(),
        started_at = CASE WHEN j.state = {running} THEN j.started_at ELSE {now} END,
        lease_expires_at = NULL
    FROM unnest(%(ack_ids)s::bigint[], %(ack_tokens)s::bigint[], %(results)s::text[])
         AS c(id, token, result)
    WHERE j.id = c.id AND j.lease_token = c.token AND j.state IN ({ack_from})
    RETURNING j.id, c.token
)
SELECT id, token FROM started UNION ALL SELECT id, token FROM acked;

-- name: claim_settings
-- columns: relaxed, bounded
-- The gated claim's transaction, like the plain claim, commits without waiting for the WAL
-- flush. It holds the limit locks of every gated claimer of the same limits: should this
-- process stall inside it, the server ends the session rather than let it hold them.
SELECT set_config('synchronous_commit', 'off', true) AS relaxed,
       set_config('idle_in_transaction_session_timeout', '10s', true) AS bounded;

-- name: lock_limits
-- columns: locked
-- One transaction-scoped advisory lock per limit name, taken in the order of the keys (so
-- two claimers never wait for each other in a circle, even were two names' keys equal),
-- before the claim reads what is in use: claimers of the same limits admit one at a time,
-- each against the tokens its predecessors' committed claims hold. The lock is released
-- only after the commit is visible, and every statement after it reads a fresh snapshot.
SELECT count(*) AS locked
FROM (SELECT pg_advisory_xact_lock(keys.k)
      FROM (SELECT DISTINCT hashtextextended('sluicegate:' || %(schema)s || ':limit:' || name, 0)
                   AS k
            FROM unnest(%(names)s::text[]) AS name
            ORDER BY k) AS keys) AS l;

-- name: promote_due
-- The gated claim's promotion of due scheduled jobs (see claim); its later statements see
-- the rows it promoted.
UPDATE {schema}.jobs SET state = {ready}
WHERE id IN (
    SELECT id FROM {schema}.jobs
    WHERE state = {scheduled} AND run_at <= {now}
      AND (expires_at IS NULL OR expires_at > {now})
    ORDER BY run_at
    LIMIT 1000
    FOR UPDATE SKIP LOCKED
);

-- name: fragment_gated
-- The candidates of a gated claim and what they need, as CTEs, shared by claim_gated_read
-- and claim_gated_fast (see claim_gated_read for each part).
groups AS (
    SELECT q.name AS queue, g.limits, 1 AS depth
    FROM unnest(%(queues)s::text[], %(after)s::text[]) AS q(name, after)
    CROSS JOIN LATERAL (
        SELECT limits FROM {schema}.jobs
        WHERE state = {ready} AND limits IS NOT NULL AND queue = q.name AND limits > q.after
        ORDER BY limits
        LIMIT 1
    ) AS g
    UNION ALL
    SELECT g.queue,
           (SELECT limits FROM {schema}.jobs
            WHERE state = {ready} AND limits IS NOT NULL AND queue = g.queue
              AND limits > g.limits
            ORDER BY limits
            LIMIT 1),
           g.depth + 1
    FROM groups AS g
    WHERE g.limits IS NOT NULL AND g.depth < %(groups)s
), room AS (
    -- How many jobs of a group one claim needs to see: its jobs all take the same keys, so
    -- it admits at most the tightest need's concurrency (or burst) over its cost; one more
    -- is held back (the claim then says when to look again, retry_in); 1 to %(n)s.
    SELECT g.limits,
           greatest(1, least(%(n)s, 1 + min(
               least(l.concurrency,
                     CASE WHEN l.rate IS NOT NULL THEN coalesce(l.burst, %(burst)s) END)
               / greatest((e.need ->> 2)::int, 1)))) AS jobs
    FROM (SELECT DISTINCT limits FROM groups WHERE limits IS NOT NULL) AS g
    CROSS JOIN LATERAL json_array_elements(g.limits::json) AS e(need)
    LEFT JOIN {schema}.limits AS l ON l.name = e.need ->> 0
    GROUP BY g.limits
), heads AS (
    SELECT c.id, c.priority, c.run_at, NULL::text AS limits
    FROM unnest(%(queues)s::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM {schema}.jobs
        WHERE state = {ready} AND limits IS NULL AND queue = q.name
          AND (expires_at IS NULL OR expires_at > {now})
        ORDER BY priority, run_at, id
        LIMIT %(n)s
    ) AS c
    UNION ALL
    SELECT c.id, c.priority, c.run_at, g.limits
    FROM groups AS g
    JOIN room AS r ON r.limits = g.limits
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM {schema}.jobs
        WHERE state = {ready} AND limits IS NOT NULL AND queue = g.queue AND limits = g.limits
          AND (expires_at IS NULL OR expires_at > {now})
        ORDER BY priority, run_at, id
        LIMIT r.jobs
    ) AS c
), needs AS (
    SELECT DISTINCT e.need ->> 0 AS name, coalesce(e.need ->> 1, '') AS part
    FROM (SELECT DISTINCT limits FROM groups WHERE limits IS NOT NULL) AS g
    CROSS JOIN LATERAL json_array_elements(g.limits::json) AS e(need)
), held AS (
    SELECT e.need ->> 0 AS name, e.need ->> 1 AS part, j.host, sum((e.need ->> 2)::int) AS cost
    FROM {schema}.jobs AS j
    CROSS JOIN LATERAL json_array_elements(j.limits::json) AS e(need)
    WHERE j.state IN ({held}) AND j.limits IS NOT NULL
      AND (e.need ->> 0, coalesce(e.need ->> 1, '')) IN (SELECT name, part FROM needs)
      -- not the claimer's own jobs whose bodies ended (their outcomes are on the way)
      AND NOT EXISTS (
          SELECT 1 FROM unnest(%(done_ids)s::bigint[], %(done_tokens)s::bigint[]) AS d(id, token)
          WHERE d.id = j.id AND d.token = j.lease_token)
    GROUP BY 1, 2, 3
)

-- name: claim_gated_read
-- columns: candidates, held, buckets, limits, now, scanned
-- What the gated claim admits from, in one snapshot taken after lock_limits. ``candidates``:
-- [id, needs] in claim order: per wanted queue the first %(n)s jobs that name no limit
-- (jobs_ready) and, per group of equal needs, that group's first jobs (jobs_gated), as
-- many as one claim could admit (room). The groups are found by a loose index scan (one
-- seek per group: a long line of jobs waiting for one full limit costs one seek, not a
-- scan), at most 1000 per queue, from the text after %(after)s (per queue: where the last
-- claim's scan stopped, when it found 1000; ``scanned`` says how many this one found and
-- the last, so with more groups than that every claim goes on where the previous one
-- stopped and each group is visited in turn). Jobs of a group need the same keys, so once its head
-- waits the rest do too. %(burst)s is a rate's burst when the limit names none.
-- ``held``: [limit, partition, holder's host, cost] summed over held jobs (jobs_holding),
-- for the (limit, partition) pairs the candidates need; ``buckets``: their rate buckets,
-- global and of %(host)s; ``limits``: the registered limits they name; ``now``: the clock.
WITH RECURSIVE {fragment_gated}
SELECT (SELECT json_agg(json_build_array(h.id, h.limits) ORDER BY h.priority, h.run_at, h.id)
        FROM heads AS h) AS candidates,
       (SELECT json_agg(json_build_array(h.name, h.part, h.host, h.cost)) FROM held AS h)
           AS held,
       (SELECT json_agg(json_build_array(b.name, b.part, b.host, b.tokens, b.at))
        FROM {schema}.limit_buckets AS b JOIN needs AS n USING (name, part)
        WHERE b.host IN ('', %(host)s)) AS buckets,
       (SELECT json_agg(json_build_array(l.name, l.concurrency, l.rate, l.burst, l.scope,
                                         l.partition_by))
        FROM {schema}.limits AS l WHERE l.name IN (SELECT name FROM needs)) AS limits,
       extract(epoch FROM {now})::float8 AS now,
       (SELECT json_agg(json_build_array(s.queue, s.found, s.last))
        FROM (SELECT queue, count(*) AS found, max(limits) AS last FROM groups
              WHERE limits IS NOT NULL GROUP BY queue) AS s) AS scanned;

-- name: claim_gated_fast
-- columns: refused, names, rated, scanned, job.*
-- The gated claim in one statement, when the limits its queues' jobs name bound only
-- concurrency (no rate): sent with BEGIN, the locks of %(locked)s and COMMIT in one round
-- trip, so the locks are held for one statement's time. Same candidates and the same tokens
-- held as claim_gated_read; admission in SQL, in claim order: per (limit, partition), a
-- job is taken only if the tokens held plus the costs of every job before it (and its own)
-- that needs that key fit the concurrency. A job held back for a key thereby holds back
-- every later job of that key (the order kept), and may hold back jobs behind it that it
-- shares another key with (a claim may take a little less than sluicegate.limits.admit
-- would; never more). Jobs naming a limit that is not registered, has a rate, or is not
-- among %(locked)s are held back; ``names`` (every name the candidates need) and
-- ``rated`` tell the broker to lock more names, or to take the other path, next time.
WITH RECURSIVE {fragment_gated},
used AS (
    SELECT n.name, n.part,
           coalesce(sum(h.cost) FILTER (WHERE l.scope <> 'host' OR h.host = %(host)s), 0)
               AS tokens
    FROM needs AS n
    LEFT JOIN {schema}.limits AS l ON l.name = n.name
    LEFT JOIN held AS h ON h.name = n.name AND coalesce(h.part, '') = n.part
    GROUP BY n.name, n.part
), wanted AS (
    SELECT h.id, h.priority, h.run_at, e.need ->> 0 AS name,
           coalesce(e.need ->> 1, '') AS part, greatest((e.need ->> 2)::int, 1) AS cost
    FROM heads AS h
    CROSS JOIN LATERAL json_array_elements(h.limits::json) AS e(need)
    WHERE h.limits IS NOT NULL
), running AS (
    SELECT w.id, w.name, w.part,
           sum(w.cost) OVER (PARTITION BY w.name, w.part
                             ORDER BY w.priority, w.run_at, w.id) AS upto
    FROM wanted AS w
), refused AS (
    SELECT DISTINCT r.id
    FROM running AS r
    LEFT JOIN {schema}.limits AS l ON l.name = r.name
    LEFT JOIN used AS u ON u.name = r.name AND u.part = r.part
    WHERE l.name IS NULL OR l.rate IS NOT NULL OR r.name <> ALL(%(locked)s::text[])
       OR (l.concurrency IS NOT NULL AND coalesce(u.tokens, 0) + r.upto > l.concurrency)
), chosen AS (
    SELECT h.id FROM heads AS h
    WHERE NOT EXISTS (SELECT 1 FROM refused AS r WHERE r.id = h.id)
    ORDER BY h.priority, h.run_at, h.id
    LIMIT %(n)s
), picked AS (
    SELECT id FROM {schema}.jobs
    WHERE id = ANY(ARRAY(SELECT id FROM chosen)) AND state = {ready}
      AND (expires_at IS NULL OR expires_at > {now})
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE {schema}.jobs AS j
    SET state = {claimed}, attempts = j.attempts + 1, lease_token = %(token)s,
        lease_expires_at = {now} + make_interval(secs => %(lease)s), worker_id = %(worker)s,
        host = %(host)s
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING j.*
)
SELECT f.refused, f.names, f.rated, f.scanned, {job_columns:c}
FROM (SELECT (SELECT count(*) FROM refused) AS refused,
             ARRAY(SELECT DISTINCT name FROM wanted ORDER BY name) AS names,
             EXISTS (SELECT 1 FROM wanted AS w JOIN {schema}.limits AS l ON l.name = w.name
                     WHERE l.rate IS NOT NULL) AS rated,
             (SELECT json_agg(json_build_array(s.queue, s.found, s.last))
              FROM (SELECT queue, count(*) AS found, max(limits) AS last FROM groups
                    WHERE limits IS NOT NULL GROUP BY queue) AS s) AS scanned) AS f
LEFT JOIN claimed AS c ON true;

-- name: claim_admitted
-- returns: job
-- The jobs the gated claim admitted, in its transaction: those still ready (a plain claim
-- may have taken a job that names no limit meanwhile, an operator cancelled one), rows no
-- one else holds (SKIP LOCKED). Fencing and attempts as in claim; ``host`` is the claimer's,
-- which host-scoped limits count by.
WITH picked AS (
    SELECT id FROM {schema}.jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND state = {ready}
      AND (expires_at IS NULL OR expires_at > {now})
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs AS j
SET state = {claimed}, attempts = j.attempts + 1, lease_token = %(token)s,
    lease_expires_at = {now} + make_interval(secs => %(lease)s), worker_id = %(worker)s,
    host = %(host)s
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING {job_columns:j};

-- name: save_buckets
-- The rate buckets the gated claim drew from, as admit left them.
INSERT INTO {schema}.limit_buckets (name, part, host, tokens, at)
SELECT * FROM unnest(%(names)s::text[], %(parts)s::text[], %(hosts)s::text[],
                     %(tokens)s::float8[], %(ats)s::float8[])
ON CONFLICT (name, part, host) DO UPDATE SET tokens = excluded.tokens, at = excluded.at;

-- name: probe_work
-- columns: found
-- Per queue, the first entry of jobs_ready, then of jobs_gated (index-only looks, whatever
-- the table's size; a plain EXISTS over queue = ANY(...) lets the planner pick a sequential
-- scan). A job waiting for a limit is work too: only the claim can tell whether it has room.
SELECT EXISTS (
           SELECT 1 FROM unnest(%(queues)s::text[]) AS q(name)
           CROSS JOIN LATERAL (
               SELECT 1 FROM {schema}.jobs
               WHERE state = {ready} AND limits IS NULL AND queue = q.name
               ORDER BY priority, run_at, id
               LIMIT 1
           ) AS first
       )
    OR EXISTS (
           SELECT 1 FROM unnest(%(queues)s::text[]) AS q(name)
           CROSS JOIN LATERAL (
               SELECT 1 FROM {schema}.jobs
               WHERE state = {ready} AND limits IS NOT NULL AND queue = q.name
               LIMIT 1
           ) AS first
       )
    OR EXISTS (SELECT 1 FROM {schema}.jobs
               WHERE state = {scheduled} AND run_at <= {now} AND queue = ANY(%(queues)s))
    AS found;

-- name: next_scheduled
-- columns: due_in
SELECT extract(epoch FROM min(run_at) - {now})::float8 AS due_in FROM {schema}.jobs
WHERE state = {scheduled} AND queue = ANY(%(queues)s);

-- name: start
-- columns: id, token
UPDATE {schema}.jobs AS j SET state = {running}, started_at = {now}
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token)
WHERE j.id = c.id AND j.lease_token = c.token AND j.state IN ({start_from})
RETURNING j.id, c.token;

-- name: ack
-- columns: id, token
UPDATE {schema}.jobs AS j
SET state = {succeeded}, result = c.result, finished_at = {now},
    finish_xid = pg_current_xact_id(),
    started_at = CASE WHEN j.state = {running} THEN j.started_at ELSE {now} END,
    lease_expires_at = NULL
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(results)s::text[]) AS c(id, token, result)
WHERE j.id = c.id AND j.lease_token = c.token AND j.state IN ({ack_from})
RETURNING j.id, c.token;

-- name: fail_retry
-- columns: id, token, queue
-- Per claim, %(events)s: failed or timeout, and %(briefs)s: the error as the history keeps
-- it (sluicegate.job.history_error; last_error stores it whole).
UPDATE {schema}.jobs AS j
SET state = {scheduled}, run_at = {now} + make_interval(secs => c.retry_in),
    last_error = c.error, lease_expires_at = NULL,
    started_at = CASE WHEN j.state = {running} THEN j.started_at ELSE {now} END,
    history = {fragment_history(jsonb_build_object(
        'event', c.event, 'worker', worker_id,
        'retry_at', extract(epoch FROM {now} + make_interval(secs => c.retry_in))::float8,
        'error', c.brief::jsonb))}
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(errors)s::text[], %(retry_in)s::float8[],
            %(events)s::text[], %(briefs)s::text[])
     AS c(id, token, error, retry_in, event, brief)
WHERE j.id = c.id AND j.lease_token = c.token AND j.state IN ({retry_from})
RETURNING j.id, c.token, j.queue;

-- name: fail_dead
-- columns: id, token
UPDATE {schema}.jobs AS j
SET state = {dead}, last_error = c.error, finished_at = {now}, lease_expires_at = NULL,
    finish_xid = pg_current_xact_id(),
    started_at = CASE WHEN j.state = {running} THEN j.started_at ELSE {now} END,
    history = {fragment_history(jsonb_build_object(
        'event', c.event, 'worker', worker_id, {dead}, true, 'error', c.brief::jsonb))}
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(errors)s::text[], %(events)s::text[],
            %(briefs)s::text[])
     AS c(id, token, error, event, brief)
WHERE j.id = c.id AND j.lease_token = c.token AND j.state IN ({bury_from})
RETURNING j.id, c.token;

-- name: fragment_history(entry)
-- A job's history with one more entry, for every statement that takes a job off the
-- happy path (sluicegate.job.Happened). The caller gives the entry's own fields as a
-- jsonb object, {fragment_history(jsonb_build_object('event', ...))}; its time (the
-- statement's clock, {now}) and its attempt come from here, and fields that are NULL are
-- left out. Past {history_cap} entries the oldest goes. A job that ends dead says so
-- with {dead}: true (the key is the state's name). Columns are the statement's row
-- (unqualified: the statement's other tables must not name them).
(CASE WHEN jsonb_array_length(coalesce(history, '[]')::jsonb) >= {history_cap}
      THEN coalesce(history, '[]')::jsonb - 0 ELSE coalesce(history, '[]')::jsonb END
 || jsonb_build_array(jsonb_strip_nulls(
        jsonb_build_object('at', extract(epoch FROM {now})::float8, 'attempt', attempts)
        || {entry})))::text

-- name: own_writes
-- columns: id, token
-- Claims whose earlier write from this handle may have landed unseen: its COMMIT lost the
-- connection (fate unknown), or ack_on made it in the caller's transaction. A row that
-- still carries the claim's token, in a state only that claim's own start or outcome leads
-- to, holds that write: the claim is done, not lost. Nothing else leaves a token behind.
SELECT j.id, c.token FROM {schema}.jobs AS j
JOIN unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token)
  ON j.id = c.id AND j.lease_token = c.token
WHERE j.state IN ({running}, {succeeded}, {dead}, {scheduled});

-- name: heartbeat
-- columns: id, token
-- Job progress rides along: a NULL fraction keeps the stored value, else the attempt's
-- latest report is stored with the broker's clock (sluicegate.job.Progress).
UPDATE {schema}.jobs AS j SET lease_expires_at = {now} + make_interval(secs => %(lease)s),
    progress = CASE WHEN c.fraction IS NULL THEN j.progress
        ELSE jsonb_build_object('fraction', c.fraction, 'message', c.message,
                                'at', extract(epoch FROM {now})::float8)::text END
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(fractions)s::float8[],
            %(messages)s::text[]) AS c(id, token, fraction, message)
WHERE j.id = c.id AND j.lease_token = c.token AND j.state IN ({held})
RETURNING j.id, c.token;

-- name: release
-- columns: id, token, queue
-- Shutdown hands the job back: the attempt charged at claim is refunded.
UPDATE {schema}.jobs AS j
SET state = {ready}, attempts = greatest(j.attempts - 1, 0), lease_expires_at = NULL,
    worker_id = NULL, lease_token = NULL,
    history = {fragment_history(jsonb_build_object('event', {happened_released}, 'worker', worker_id))}
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token)
WHERE j.id = c.id AND j.lease_token = c.token AND j.state IN ({release_from})
RETURNING j.id, c.token, j.queue;

-- name: recover_expired
-- columns: id, state, queue
-- Expired leases: back to ready (the attempt stays charged) or dead when attempts are
-- exhausted. SKIP LOCKED lets many workers run this at once without double counting.
WITH expired AS (
    SELECT id FROM {schema}.jobs
    WHERE state IN ({held}) AND lease_expires_at < {now}
    ORDER BY lease_expires_at, id  -- the same batch on every broker: oldest expiry first
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs AS j
SET state = CASE WHEN j.attempts >= j.max_attempts THEN {dead} ELSE {ready} END,
    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN {now} ELSE NULL END,
    finish_xid = CASE WHEN j.attempts >= j.max_attempts THEN pg_current_xact_id() END,
    lease_expires_at = NULL, lease_token = NULL,
    worker_id = CASE WHEN j.attempts >= j.max_attempts THEN j.worker_id ELSE NULL END,
    last_error = json_build_object('type', 'WorkerLost', 'traceback', '',
        'message', 'worker lost: lease of worker ' || coalesce(j.worker_id, '?')
                   || ' expired without a heartbeat')::text,
    history = {fragment_history(jsonb_build_object('event', {happened_recovered}, 'worker', worker_id,
        {dead}, CASE WHEN attempts >= max_attempts THEN true END))}
FROM expired
WHERE j.id = expired.id
RETURNING j.id, j.state, j.queue;

-- name: recover_worker_settings
-- columns: bounded
-- recover_worker waits for row locks (see below), but never for long: past this the call
-- fails, and the worker that called it tries again on its next look.
SELECT set_config('lock_timeout', '5s', true) AS bounded;

-- name: recover_worker
-- columns: id, state, queue
-- The held jobs of a worker whose process is gone (seen by a worker on its host), leases
-- unexpired or not: back to ready (the attempt stays charged) or dead when attempts are
-- exhausted. Held jobs are few: found through a partial index of held rows, never the
-- finished ones. Locked in id order and waited for, not skipped: a row the dead worker's
-- open transaction still locks is freed once the server sees its connection close, and
-- skipping it would leave that job to its lease.
WITH held AS (
    SELECT id FROM {schema}.jobs
    WHERE state IN ({recover_from}) AND worker_id = %(worker)s
    ORDER BY id
    FOR UPDATE
)
UPDATE {schema}.jobs AS j
SET state = CASE WHEN j.attempts >= j.max_attempts THEN {dead} ELSE {ready} END,
    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN {now} ELSE NULL END,
    finish_xid = CASE WHEN j.attempts >= j.max_attempts THEN pg_current_xact_id() END,
    lease_expires_at = NULL, lease_token = NULL,
    worker_id = CASE WHEN j.attempts >= j.max_attempts THEN j.worker_id ELSE NULL END,
    last_error = %(error)s,
    history = {fragment_history(jsonb_build_object('event', {happened_worker_lost}, 'worker', worker_id,
        {dead}, CASE WHEN attempts >= max_attempts THEN true END))}
FROM held
WHERE j.id = held.id
RETURNING j.id, j.state, j.queue;

-- name: cancel
-- returns: job
UPDATE {schema}.jobs
SET state = {cancelled}, finished_at = {now}, lease_expires_at = NULL, lease_token = NULL,
    finish_xid = pg_current_xact_id(), history = {fragment_history({fragment_cancelled})}
WHERE id = %(id)s AND state IN ({cancel_from})
RETURNING {job_columns};

-- name: shed_pick
-- columns: id
-- The ready job of %(queue)s that would start last, if no more urgent than %(priority)s
-- (admission's shed policy), locked so that no claim takes it before the cancel.
SELECT id FROM {schema}.jobs
WHERE state = {ready} AND queue = %(queue)s AND priority >= %(priority)s
ORDER BY priority DESC, run_at DESC, id DESC
LIMIT 1
FOR UPDATE SKIP LOCKED;

-- name: revive
-- returns: job
UPDATE {schema}.jobs
SET state = {ready}, attempts = 0, run_at = {now}, finished_at = NULL, finish_xid = NULL,
    lease_expires_at = NULL, worker_id = NULL, lease_token = NULL, expires_at = NULL,
    history = {fragment_history({fragment_retried})}
WHERE id = %(id)s AND state IN ({revive_from})
RETURNING {job_columns};

-- name: fragment_cancelled
-- An operator's cancel, as history entries say it (cancel, cancel_matching): the state
-- it left, the worker that held it if any, and who asked (%(by)s, NULL: not said).
jsonb_build_object('event', {happened_cancelled}, 'from', state,
                   'worker', CASE WHEN state IN ({held}) THEN worker_id END,
                   'by', %(by)s::text)

-- name: fragment_retried
-- An operator's revival (revive, revive_matching): the state it left.
jsonb_build_object('event', {happened_retried}, 'from', state)

-- name: cancel_matching
-- columns: id, queue
-- cancel_matching: at most %(limit)s jobs in %(state)s of %(queue)s and %(task)s (NULL:
-- any), off the index the filter's values pick (custom plans) in its order (queue, -id:
-- jobs_listing's and jobs_task's; without an order a scan of the table that stops at
-- the batch can look cheap, and read the whole history first). Locked with SKIP LOCKED:
-- a job a worker is finishing right now (its row locked) is passed over, and once locked
-- a row is checked again as it then is, so a job finished meanwhile is not cancelled.
-- Callers at once take different jobs, and never wait on each other or on workers.
WITH picked AS (
    SELECT id FROM {schema}.jobs
    WHERE state = %(state)s AND state IN ({cancel_from})
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (%(task)s::text IS NULL OR task = %(task)s)
    ORDER BY queue, -id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs AS j
SET state = {cancelled}, finished_at = {now}, lease_expires_at = NULL, lease_token = NULL,
    finish_xid = pg_current_xact_id(), history = {fragment_history({fragment_cancelled})}
FROM picked
WHERE j.id = picked.id AND j.state IN ({cancel_from})
RETURNING j.id, j.queue;

-- name: revive_matching
-- columns: id, queue
-- retry_matching: at most %(limit)s dead jobs of %(queue)s and %(task)s (NULL: any),
-- read and locked as cancel_matching's, but those whose unique key an unfinished job holds (one
-- probe of jobs_unique_unfinished each: they do not fill the batch); of the picked jobs
-- sharing a key, the newest. Revived as revive does, and out of the settled counts in
-- the same statement (the caller holds the horizon row). A job of the same key stored or
-- revived by another transaction meanwhile makes the statement fail on
-- jobs_unique_unfinished; the caller runs it again, and it then passes that job over.
WITH picked AS (
    SELECT d.id, d.queue, d.state, d.unique_key, d.finish_xid FROM {schema}.jobs AS d
    WHERE d.state = {dead}
      AND (%(queue)s::text IS NULL OR d.queue = %(queue)s)
      AND (%(task)s::text IS NULL OR d.task = %(task)s)
      AND NOT EXISTS (SELECT 1 FROM {schema}.jobs AS u
                      WHERE u.unique_key = d.unique_key AND u.state IN ({unfinished}))
    ORDER BY d.queue, -d.id
    LIMIT %(limit)s
    FOR UPDATE OF d SKIP LOCKED
), chosen AS (
    SELECT p.id, p.queue, p.state, p.finish_xid FROM picked AS p
    WHERE p.unique_key IS NULL
       OR p.id = (SELECT max(o.id) FROM picked AS o WHERE o.unique_key = p.unique_key)
), settled AS (
    SELECT c.queue, c.state, count(*) AS jobs
    FROM chosen AS c, {schema}.stats_horizon AS h
    WHERE c.finish_xid IS NULL OR pg_visible_in_snapshot(c.finish_xid, h.horizon)
    GROUP BY c.queue, c.state
), unsettled AS (
    UPDATE {schema}.stats_settled AS s SET jobs = s.jobs - settled.jobs
    FROM settled
    WHERE s.queue = settled.queue AND s.state = settled.state
)
UPDATE {schema}.jobs AS j
SET state = {ready}, attempts = 0, run_at = {now}, finished_at = NULL, finish_xid = NULL,
    lease_expires_at = NULL, worker_id = NULL, lease_token = NULL, expires_at = NULL,
    history = {fragment_history({fragment_retried})}
FROM (SELECT id FROM chosen) AS c
WHERE j.id = c.id AND j.state = {dead}
RETURNING j.id, j.queue;

-- name: get_job
-- returns: job
SELECT {job_columns} FROM {schema}.jobs WHERE id = %(id)s;

-- name: list_jobs
-- returns: job
-- Operator listings (sluicegate/brokers/listing.py), newest first, at most %(limit)s rows
-- of ids up to %(upto)s (keyset paging), never a sort of the table; planned per call
-- (custom plans: the values given pick the index). No filter: the primary key from
-- %(upto)s down. A filter: the ranges below, each read the same way, merged by id; they
-- order by -id, which only the listing indexes give (see 0005_listings.sql).
SELECT {job_columns} FROM {schema}.jobs WHERE id <= %(upto)s ORDER BY id DESC LIMIT %(limit)s;

-- name: list_jobs_of_state_queue
-- returns: job
-- One range of jobs_listing (state, queue, -id) for a state it holds ({unheld}); a held
-- state: the queue's held jobs off jobs_leased.
SELECT {job_columns} FROM {schema}.jobs
WHERE state = %(state)s AND queue = %(queue)s AND -id >= -%(upto)s::bigint
ORDER BY -id
LIMIT %(limit)s;

-- name: list_jobs_of_state
-- returns: job
-- A held state, every queue: held jobs (jobs_leased), as many as the workers' slots.
SELECT {job_columns} FROM {schema}.jobs
WHERE state = %(state)s AND state IN ({held}) AND -id >= -%(upto)s::bigint
ORDER BY -id
LIMIT %(limit)s;

-- name: queues_of_state
-- columns: queue
-- The queues with jobs in a state jobs_listing holds, one seek each (a loose scan): the
-- cost follows the number of queues, not of jobs.
WITH RECURSIVE queues AS (
    SELECT min(queue) AS queue FROM {schema}.jobs WHERE state = %(state)s
    UNION ALL
    SELECT (SELECT min(queue) FROM {schema}.jobs
            WHERE state = %(state)s AND queue > queues.queue)
    FROM queues WHERE queues.queue IS NOT NULL
)
SELECT queue FROM queues WHERE queue IS NOT NULL;

-- name: list_jobs_of_task
-- returns: job
-- One (task, state, queue) range of jobs_task, for a state it holds ({unheld}).
SELECT {job_columns} FROM {schema}.jobs
WHERE task = %(task)s AND state = %(state)s AND queue = %(queue)s
  AND -id >= -%(upto)s::bigint
ORDER BY -id
LIMIT %(limit)s;

-- name: queues_of_task_state
-- columns: queue
-- The queues of a task's jobs in a state jobs_task holds: a loose scan, one seek per queue.
WITH RECURSIVE queues AS (
    SELECT min(queue) AS queue FROM {schema}.jobs WHERE task = %(task)s AND state = %(state)s
    UNION ALL
    SELECT (SELECT min(queue) FROM {schema}.jobs
            WHERE task = %(task)s AND state = %(state)s AND queue > queues.queue)
    FROM queues WHERE queues.queue IS NOT NULL
)
SELECT queue FROM queues WHERE queue IS NOT NULL;

-- name: list_held_of_task
-- returns: job
-- A task's claimed and running jobs (NULL state, queue: any), off jobs_leased: held jobs
-- are as many as the workers' slots, whatever the history.
SELECT {job_columns} FROM {schema}.jobs
WHERE state IN ({held}) AND task = %(task)s AND -id >= -%(upto)s::bigint
  AND (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY -id
LIMIT %(limit)s;

-- name: list_jobs_of_unique_key
-- returns: job
-- The jobs of one unique key, any state, off jobs_unique_key (a key's jobs are few); the
-- other filters (NULL: any; folded away by the custom plan) are checked on those rows.
SELECT {job_columns} FROM {schema}.jobs
WHERE unique_key = %(key)s AND -id >= -%(upto)s::bigint
  AND (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(task)s::text IS NULL OR task = %(task)s)
ORDER BY -id
LIMIT %(limit)s;

-- name: horizon
-- columns: xmax, xip
-- The horizon, as the parameters of fragment_unsettled: its xmax and its xip list.
SELECT pg_snapshot_xmax(horizon)::text AS xmax,
       ARRAY(SELECT pg_snapshot_xip(horizon))::text[] AS xip
FROM {schema}.stats_horizon;

-- name: fragment_unsettled
-- Finished jobs per queue and state that stats_settled does not count yet: stamped by a
-- transaction that was running when the horizon was taken (in its xip list) or began
-- after it (at or above its xmax). A range at the top of jobs_settling and one probe per
-- transaction then running. Planned for the values given (custom plans): a generic plan
-- cannot tell a range of the newest transactions from a third of the table.
SELECT queue, state, count(*) AS jobs FROM {schema}.jobs
WHERE finish_xid >= %(xmax)s::xid8 OR finish_xid = ANY (%(xip)s::text[]::xid8[])
GROUP BY queue, state

-- name: finished_counts
-- columns: queue, state, jobs, unsettled
-- Finished jobs per queue and state: the settled counts plus the jobs not settled yet
-- (read in the same snapshot as the horizon given); ``unsettled`` says how many of them
-- were not.
WITH unsettled AS ({fragment_unsettled})
SELECT queue, state, sum(jobs)::bigint AS jobs, sum(unsettled)::bigint AS unsettled
FROM (
    SELECT queue, state, jobs, 0 AS unsettled FROM {schema}.stats_settled
    UNION ALL
    SELECT queue, state, jobs, jobs FROM unsettled
) AS c
GROUP BY queue, state
HAVING sum(jobs) <> 0;

-- name: lock_horizon
-- columns: locked
-- Settling, pruning and reviving hold the horizon row until they commit: each sees the
-- horizon and counts the others left. The statement after this takes a fresh snapshot.
SELECT true AS locked FROM {schema}.stats_horizon FOR UPDATE;

-- name: try_lock_horizon
-- columns: locked
-- A stats call settles only if no one holds the horizon: it never waits.
SELECT true AS locked FROM {schema}.stats_horizon FOR UPDATE SKIP LOCKED;

-- name: settle
-- The unsettled jobs join the settled counts and this statement's own snapshot becomes
-- the horizon: every job counted was committed in it, every job left out was not (one
-- statement, one snapshot). The caller holds the horizon row and read it after the lock.
WITH unsettled AS ({fragment_unsettled}),
added AS (
    INSERT INTO {schema}.stats_settled AS s (queue, state, jobs)
    SELECT queue, state, jobs FROM unsettled
    ON CONFLICT (queue, state) DO UPDATE SET jobs = s.jobs + excluded.jobs
)
UPDATE {schema}.stats_horizon SET horizon = pg_current_snapshot(), settled_at = now();

-- name: unsettle_revived
-- A dead or cancelled job about to be revived (same transaction, before the revive, the
-- horizon row held): out of the settled counts if it is in them. Locks the job's row, so
-- the revive that follows finds it as read here.
UPDATE {schema}.stats_settled AS s SET jobs = s.jobs - 1
FROM (SELECT queue, state, finish_xid FROM {schema}.jobs
      WHERE id = %(id)s AND state IN ({revive_from})
      FOR UPDATE) AS j,
     {schema}.stats_horizon AS h
WHERE s.queue = j.queue AND s.state = j.state
  AND (j.finish_xid IS NULL OR pg_visible_in_snapshot(j.finish_xid, h.horizon));

-- name: prune
-- columns: deleted
-- Small batches keep locks short; the caller repeats until nothing is left. The settled
-- jobs deleted leave the settled counts in the same statement (the caller holds the
-- horizon row: pruners take turns).
WITH gone AS (
    DELETE FROM {schema}.jobs
    WHERE id IN (
        SELECT id FROM {schema}.jobs
        WHERE state = %(state)s AND finished_at < {now} - make_interval(secs => %(older_than)s)
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    )
    RETURNING queue, state, finish_xid
), settled AS (
    SELECT g.queue, g.state, count(*) AS jobs
    FROM gone AS g, {schema}.stats_horizon AS h
    WHERE g.finish_xid IS NULL OR pg_visible_in_snapshot(g.finish_xid, h.horizon)
    GROUP BY g.queue, g.state
), unsettled AS (
    UPDATE {schema}.stats_settled AS s SET jobs = s.jobs - settled.jobs
    FROM settled
    WHERE s.queue = settled.queue AND s.state = settled.state
)
SELECT count(*) AS deleted FROM gone;


-- name: register_limits
-- columns: name
-- A worker's declarations, upserted by name. A limit an operator set keeps its values
-- (concurrency, rate, burst); the declaration is stored either way, for reset_limit.
INSERT INTO {schema}.limits AS l (name, concurrency, rate, burst, scope, partition_by, declared)
SELECT * FROM unnest(%(names)s::text[], %(concurrency)s::int[], %(rate)s::float8[],
                     %(burst)s::int[], %(scope)s::text[], %(partition)s::text[],
                     %(declared)s::text[])
ON CONFLICT (name) DO UPDATE
SET concurrency = CASE WHEN l.overridden THEN l.concurrency ELSE excluded.concurrency END,
    rate = CASE WHEN l.overridden THEN l.rate ELSE excluded.rate END,
    burst = CASE WHEN l.overridden THEN l.burst ELSE excluded.burst END,
    scope = excluded.scope, partition_by = excluded.partition_by,
    declared = excluded.declared, updated_at = now()
RETURNING l.name;

-- name: set_limit
-- columns: name
UPDATE {schema}.limits
SET concurrency = %(concurrency)s, rate = %(rate)s, burst = %(burst)s, scope = %(scope)s,
    partition_by = %(partition)s, overridden = true, updated_at = now()
WHERE name = %(name)s
RETURNING name;

-- name: reset_limit
-- columns: declared
UPDATE {schema}.limits
SET concurrency = (declared::json ->> 'concurrency')::int,
    rate = (declared::json ->> 'rate')::float8,
    burst = (declared::json ->> 'burst')::int,
    scope = declared::json ->> 'scope',
    partition_by = declared::json ->> 'partition',
    overridden = false, updated_at = now()
WHERE name = %(name)s
RETURNING declared;

-- name: limit_names
-- columns: name
SELECT name FROM {schema}.limits ORDER BY name;

-- name: notify_gated
-- columns: notified
-- Wakes the queues that have jobs waiting for a limit (a loose index scan of jobs_gated, one
-- seek per queue), after a limit changed: its waiters may have room now.
WITH RECURSIVE queues AS (
    SELECT min(queue) AS queue FROM {schema}.jobs
    WHERE state = {ready} AND limits IS NOT NULL
    UNION ALL
    SELECT (SELECT min(queue) FROM {schema}.jobs
            WHERE state = {ready} AND limits IS NOT NULL AND queue > queues.queue)
    FROM queues WHERE queues.queue IS NOT NULL
)
SELECT pg_notify(%(channel)s, queue) AS notified FROM queues WHERE queue IS NOT NULL;

-- name: limit_rows
-- columns: name, concurrency, rate, burst, scope, partition_by, overridden
SELECT name, concurrency, rate, burst, scope, partition_by, overridden FROM {schema}.limits;

-- name: held_needs
-- columns: name, part, host, cost
-- Each need of each held job (jobs_holding).
SELECT e.need ->> 0 AS name, e.need ->> 1 AS part, j.host, (e.need ->> 2)::int AS cost
FROM {schema}.jobs AS j
CROSS JOIN LATERAL json_array_elements(j.limits::json) AS e(need)
WHERE j.state IN ({held}) AND j.limits IS NOT NULL;

-- name: waiting_groups
-- columns: limits, jobs, oldest
SELECT limits, count(*) AS jobs, extract(epoch FROM min(run_at))::float8 AS oldest
FROM {schema}.jobs
WHERE state = {ready} AND limits IS NOT NULL
GROUP BY limits;

-- name: bucket_rows
-- columns: name, part, host, tokens, at
SELECT name, part, host, tokens, at FROM {schema}.limit_buckets;

-- name: clock
-- columns: now
SELECT extract(epoch FROM {now})::float8 AS now;

-- name: forget_workers
-- Registry rows of workers gone (stopped, or unseen) over %(forget)s seconds. A handful of
-- rows: read whole.
DELETE FROM {schema}.workers
WHERE coalesce(stopped_at, last_seen) < {now} - make_interval(secs => %(forget)s::float8);

-- name: publish_worker
-- started_at only on the first publish; stopped_at once stopped, kept after.
INSERT INTO {schema}.workers AS w (id, host, pid, version, pools, started_at, last_seen,
                                   stopped_at, held, snapshot)
VALUES (%(id)s, %(host)s, %(pid)s::int, %(version)s, %(pools)s, {now}, {now},
        CASE WHEN %(stopped)s::boolean THEN {now} END, %(held)s::int, %(snapshot)s)
ON CONFLICT (id) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, version = excluded.version,
    pools = excluded.pools, last_seen = excluded.last_seen,
    stopped_at = coalesce(excluded.stopped_at, w.stopped_at),
    held = excluded.held, snapshot = excluded.snapshot;

-- name: list_workers
-- columns: now, id, host, pid, version, pools, started_at, last_seen, stopped_at, held, snapshot
-- The clock, and the rows (workers not stopped, or stopped or seen within %(gone_within)s
-- seconds): one row with NULL worker columns when there is none.
SELECT extract(epoch FROM c.now)::float8 AS now, w.id, w.host, w.pid, w.version, w.pools,
       extract(epoch FROM w.started_at)::float8 AS started_at,
       extract(epoch FROM w.last_seen)::float8 AS last_seen,
       extract(epoch FROM w.stopped_at)::float8 AS stopped_at, w.held, w.snapshot
FROM (SELECT {now} AS now) AS c
LEFT JOIN {schema}.workers AS w
  ON w.stopped_at IS NULL
  OR w.stopped_at >= c.now - make_interval(secs => %(gone_within)s::float8)
  OR w.last_seen >= c.now - make_interval(secs => %(gone_within)s::float8)
ORDER BY w.host, w.started_at, w.id;

-- name: fragment_depth_totals
-- The depths of queue_depths and queue_depths_of, from their parts: one row per queue.
SELECT queue, sum(ready)::bigint AS ready, sum(scheduled)::bigint AS scheduled,
       sum(claimed)::bigint AS claimed, sum(running)::bigint AS running,
       extract(epoch FROM {now} - min(oldest))::float8 AS age_s
FROM parts GROUP BY queue

-- name: queue_depths
-- columns: queue, ready, scheduled, claimed, running, age_s
-- Unfinished jobs per queue, each state off its partial index, never a finished row: ready
-- jobs off jobs_ready and jobs_gated (queue first, run_at for the oldest), scheduled ones
-- off jobs_scheduled (run_at, queue: due ones count as ready, as a claim would promote them
-- first), claimed and running ones off jobs_leased.
WITH parts(queue, ready, scheduled, claimed, running, oldest) AS (
    SELECT queue, count(*), 0, 0, 0, min(run_at) FROM {schema}.jobs
    WHERE state = {ready} AND limits IS NULL
    GROUP BY queue
    UNION ALL
    SELECT queue, count(*), 0, 0, 0, min(run_at) FROM {schema}.jobs
    WHERE state = {ready} AND limits IS NOT NULL
    GROUP BY queue
    UNION ALL
    SELECT queue, count(*) FILTER (WHERE run_at <= {now}), count(*) FILTER (WHERE run_at > {now}),
           0, 0, min(run_at) FILTER (WHERE run_at <= {now})
    FROM {schema}.jobs
    WHERE state = {scheduled}
    GROUP BY queue
    UNION ALL
    SELECT queue, 0, 0, count(*) FILTER (WHERE state = {claimed}),
           count(*) FILTER (WHERE state = {running}), NULL
    FROM {schema}.jobs
    WHERE state IN ({held})
    GROUP BY queue
)
{fragment_depth_totals};

-- name: queue_depths_of
-- columns: queue, ready, scheduled, claimed, running, age_s
-- queue_depths for the queues of %(queues)s only; every one of them appears, with zeros
-- when it has no unfinished job.
WITH parts(queue, ready, scheduled, claimed, running, oldest) AS (
    SELECT queue, count(*), 0, 0, 0, min(run_at) FROM {schema}.jobs
    WHERE state = {ready} AND limits IS NULL AND queue = ANY(%(queues)s::text[])
    GROUP BY queue
    UNION ALL
    SELECT queue, count(*), 0, 0, 0, min(run_at) FROM {schema}.jobs
    WHERE state = {ready} AND limits IS NOT NULL AND queue = ANY(%(queues)s::text[])
    GROUP BY queue
    UNION ALL
    SELECT queue, count(*) FILTER (WHERE run_at <= {now}), count(*) FILTER (WHERE run_at > {now}),
           0, 0, min(run_at) FILTER (WHERE run_at <= {now})
    FROM {schema}.jobs
    WHERE state = {scheduled} AND queue = ANY(%(queues)s::text[])
    GROUP BY queue
    UNION ALL
    SELECT queue, 0, 0, count(*) FILTER (WHERE state = {claimed}),
           count(*) FILTER (WHERE state = {running}), NULL
    FROM {schema}.jobs
    WHERE state IN ({held}) AND queue = ANY(%(queues)s::text[])
    GROUP BY queue
    UNION ALL
    SELECT q, 0, 0, 0, 0, NULL FROM unnest(%(queues)s::text[]) AS q
)
{fragment_depth_totals};

-- name: last_job_id
-- columns: id
SELECT coalesce(max(id), 0) AS id FROM {schema}.jobs;

-- name: arrivals
-- columns: queue, jobs, last
-- Jobs stored after %(after)s, per queue: at most %(scan)s of them, read in id order off
-- the primary key. Ids are taken at insert, so a transaction that commits after a higher
-- id was read is not counted: an estimate of the arrival rate, not a ledger.
SELECT queue, count(*) AS jobs, max(id) AS last
FROM (SELECT id, queue FROM {schema}.jobs WHERE id > %(after)s ORDER BY id LIMIT %(scan)s) AS a
GROUP BY queue;

-- ---- paused queues ----

-- name: pause_queue
-- columns: queue
-- Returns the row only when this call paused it (pausing twice keeps the first pause). The
-- queue's wake-up goes out at commit: workers look at the paused set again at once.
WITH paused AS (
    INSERT INTO {schema}.paused_queues (queue, paused_by, paused_at)
    VALUES (%(queue)s, %(by)s, {now})
    ON CONFLICT (queue) DO NOTHING
    RETURNING queue
), woke AS (
    SELECT pg_notify(%(channel)s, queue) FROM paused
)
SELECT queue FROM paused WHERE (SELECT count(*) FROM woke) >= 0;

-- name: resume_queue
-- columns: queue
WITH resumed AS (
    DELETE FROM {schema}.paused_queues WHERE queue = %(queue)s RETURNING queue
), woke AS (
    SELECT pg_notify(%(channel)s, queue) FROM resumed
)
SELECT queue FROM resumed WHERE (SELECT count(*) FROM woke) >= 0;

-- name: paused_queues
-- columns: queue, paused_by, paused_at
SELECT queue, paused_by, extract(epoch FROM paused_at)::float8 AS paused_at
FROM {schema}.paused_queues ORDER BY queue;

-- name: finished_among
-- columns: waited, job.*
-- Of the waited ids, the finished jobs, and a row with NULL job columns for each id no
-- job has: one primary-key probe per id, whatever the history.
SELECT w.id AS waited, {job_columns:j}
FROM unnest(%(ids)s::bigint[]) AS w(id) LEFT JOIN {schema}.jobs AS j ON j.id = w.id
WHERE j.id IS NULL OR j.state IN ({terminal});

-- name: notify_finished
-- columns: notified
-- Wakes the processes waiting for results (job.wait): once per transaction that ends
-- jobs, no payload (identical notifications of one transaction are sent once anyway).
-- Also on the cancel channel, to the workers, for a cancel of held jobs.
SELECT pg_notify(%(channel)s, '') AS notified;

-- ---- periodic schedules (0011) ----

-- name: schedule_rows
-- columns: name, since, last_tick, last_job_id, now
-- Every schedule with the broker's clock; one row of NULLs and the clock when none.
SELECT s.name, s.since, s.last_tick, s.last_job_id, extract(epoch FROM {now})::float8 AS now
FROM (SELECT 1) AS one LEFT JOIN {schema}.schedules AS s ON true ORDER BY s.name;

-- name: register_schedule
INSERT INTO {schema}.schedules (name, since)
VALUES (%(name)s, extract(epoch FROM {now})::float8) ON CONFLICT (name) DO NOTHING;

-- name: take_tick
-- columns: name
-- The compare-and-set: the row (made if missing) moves to the tick only if its last tick
-- is earlier. A concurrent taker waits for this row's lock, then sees the new last_tick
-- and gets no row back.
INSERT INTO {schema}.schedules AS s (name, since, last_tick)
VALUES (%(name)s, extract(epoch FROM {now})::float8, %(tick)s)
ON CONFLICT (name) DO UPDATE SET last_tick = excluded.last_tick
WHERE s.last_tick IS NULL OR s.last_tick < excluded.last_tick
RETURNING name;

-- name: tick_job
UPDATE {schema}.schedules SET last_job_id = %(job)s WHERE name = %(name)s;
