-- The worker registry (publish_worker, list_workers): one row per worker process,
-- upserted every few seconds; rows of workers gone over FORGET_WORKERS_AFTER are deleted
-- by the next publish. A handful of rows: no index beyond the key. Times are unix
-- seconds by the broker's clock.
CREATE TABLE workers (
    id         TEXT    PRIMARY KEY,
    host       TEXT    NOT NULL,
    pid        INTEGER NOT NULL,
    version    TEXT    NOT NULL,
    pools      TEXT    NOT NULL,  -- JSON array, one object per pool
    started_at REAL    NOT NULL,
    last_seen  REAL    NOT NULL,
    stopped_at REAL,              -- set by a graceful stop
    held       INTEGER NOT NULL,  -- jobs it held at its last publish
    snapshot   TEXT    NOT NULL   -- its last metrics snapshot (JSON)
);
