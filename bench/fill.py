"""Fill a jobs table with a realistic history in one statement, for the read-side benches.

``rows`` jobs spread over the last six days, oldest first: 97.5% succeeded, 2% dead, 0.5%
cancelled, and the newest ``tail`` ready (``ready_percent`` of them) or scheduled; queues
"email" (45%), "reports" (30%), "transcode" (20%), "webhooks" (5%), and "rare" (one job in
20,000, all of them finished). Not through the broker: that would take an hour. Where the
schema records when each job finished for the stats (migration 0004), the rows are
stamped as a finishing write would stamp them.
"""

from __future__ import annotations

import sqlite3
import time

from pgscratch import connect, schema_of

DAYS = 6 * 86_400.0
UNFINISHED_TAIL = 10_000  # the newest rows: ready and scheduled, half each (by default)

# One expression per dialect for each column of a generated row; i runs 1..rows.
QUEUE = (
    "CASE WHEN i % 20000 = 7 THEN 'rare' WHEN i % 100 < 45 THEN 'email' "
    "WHEN i % 100 < 75 THEN 'reports' WHEN i % 100 < 95 THEN 'transcode' ELSE 'webhooks' END"
)
STATE = (
    "CASE WHEN i > {rows} - {tail} AND i % 20000 <> 7 "
    "THEN (CASE WHEN i % 100 < {ready_percent} THEN 'ready' ELSE 'scheduled' END) "
    "WHEN i % 1000 < 20 THEN 'dead' WHEN i % 1000 < 25 THEN 'cancelled' ELSE 'succeeded' END"
)


def fill_sqlite(path: str, rows: int, tail: int = UNFINISHED_TAIL, ready_percent: int = 50) -> None:
    """``rows`` jobs in one INSERT ... SELECT into the SQLite file at ``path``."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        stamped = "finish_seq" in {r[1] for r in conn.execute("PRAGMA table_info(jobs)")}
        now = time.time()
        start, step = now - DAYS, DAYS / rows
        state = STATE.format(rows=rows, tail=tail, ready_percent=ready_percent)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            f"""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows}),
            g AS (SELECT i, {QUEUE} AS queue, {state} AS state, {start} + i * {step} AS t FROM n)
            INSERT INTO jobs (queue, task, args, kwargs, state, priority, run_at, attempts,
                              max_attempts, enqueued_at, started_at, finished_at, result,
                              last_error{", finish_seq" if stamped else ""})
            SELECT queue, 'noop', '[]', '{{}}', state, 0,
                   CASE WHEN state = 'scheduled' THEN {now} + 3600 ELSE t END,
                   CASE WHEN state IN ('ready', 'scheduled') THEN 0 ELSE 1 END, 3, t,
                   CASE WHEN state IN ('succeeded', 'dead') THEN t + 0.01 END,
                   CASE WHEN state IN ('succeeded', 'dead', 'cancelled') THEN t + 0.02 END,
                   CASE WHEN state = 'succeeded' THEN 'null' END,
                   CASE WHEN state = 'dead' THEN '{{"type": "ValueError", "message": "boom"}}' END
                   {
                ", CASE WHEN state IN ('succeeded', 'dead', 'cancelled') THEN "
                "(SELECT seq FROM stats_horizon) + 1 END"
                if stamped
                else ""
            }
            FROM g
            """
        )
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    finally:
        conn.close()


def fill_postgres(
    url: str, rows: int, tail: int = UNFINISHED_TAIL, ready_percent: int = 50
) -> None:
    """``rows`` jobs in one INSERT ... SELECT into the schema that ``url`` names."""
    schema = schema_of(url)
    with connect(url) as conn:
        stamped = conn.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'jobs' AND column_name = 'finish_xid'",
            (schema,),
        ).fetchone()[0]  # type: ignore[index]
        state = STATE.format(rows=rows, tail=tail, ready_percent=ready_percent)
        start = f"now() - make_interval(secs => {DAYS})"
        conn.execute(
            f"""
            INSERT INTO {schema}.jobs (queue, task, args, kwargs, state, priority, run_at,
                attempts, max_attempts, enqueued_at, started_at, finished_at, result,
                last_error{", finish_xid" if stamped else ""})
            SELECT queue, 'noop', '[]', '{{}}', state, 0,
                   CASE WHEN state = 'scheduled' THEN now() + interval '1 hour' ELSE t END,
                   CASE WHEN state IN ('ready', 'scheduled') THEN 0 ELSE 1 END, 3, t,
                   CASE WHEN state IN ('succeeded', 'dead') THEN t + interval '10 ms' END,
                   CASE WHEN state IN ('succeeded', 'dead', 'cancelled')
                        THEN t + interval '20 ms' END,
                   CASE WHEN state = 'succeeded' THEN 'null' END,
                   CASE WHEN state = 'dead' THEN '{{"type": "ValueError", "message": "boom"}}' END
                   {
                ", CASE WHEN state IN ('succeeded', 'dead', 'cancelled') "
                "THEN pg_current_xact_id() END"
                if stamped
                else ""
            }
            FROM (SELECT i, {QUEUE} AS queue, {state} AS state,
                         {start} + make_interval(secs => i * {DAYS / rows}) AS t
                  FROM generate_series(1, {rows}) AS i) AS g
            ORDER BY i
            """
        )
        conn.execute(f"VACUUM ANALYZE {schema}.jobs")
