-- The worker registry (publish_worker, list_workers): one row per worker process,
-- upserted every few seconds; rows of workers gone over FORGET_WORKERS_AFTER are deleted
-- by the next publish. A handful of rows and no index beyond the key, so a publish
-- changes no indexed column and stays a HOT update. Times by the server's clock.
CREATE TABLE {schema}.workers (
    id         text        PRIMARY KEY,
    host       text        NOT NULL,
    pid        integer     NOT NULL,
    version    text        NOT NULL,
    pools      text        NOT NULL,  -- JSON array, one object per pool
    started_at timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL,
    stopped_at timestamptz,           -- set by a graceful stop
    held       integer     NOT NULL,  -- jobs it held at its last publish
    snapshot   text        NOT NULL   -- its last metrics snapshot (JSON)
);

-- Queue depths count scheduled jobs per queue, due or not: with the queue in it, this
-- index answers alone (an index-only scan; waiting rows are all-visible once vacuumed).
-- It still leads with run_at, for promotion and the next wake-up.
DROP INDEX {schema}.jobs_scheduled;
CREATE INDEX jobs_scheduled ON {schema}.jobs (run_at, queue) WHERE state = 'scheduled';
