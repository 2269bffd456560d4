"""Five real worker processes run one every-second schedule for 30 s, on SQLite and on
PostgreSQL: every tick is enqueued exactly once across them (docs/schedules.md).

Each tick's job carries the tick in its unique key (``schedule:NAME:UTC-time``); the
workers log each tick they enqueue. Counted both ways: one job per tick, one log line per
job, and no tick missing between the first and the last.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime

import pytest

from sluicegate import App, JobState
from support.brokers import over_brokers
from support.fleet import Fleet, stop_all, wait_for

RUN = 30.0  # s of real time with all five workers up
PREFIX = "schedule:every_second:"


def tick_of(key: str) -> float:
    return (
        datetime.strptime(key[len(PREFIX) :], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    )


@pytest.mark.slow
@over_brokers
def test_five_workers_enqueue_each_tick_once(fleet: Fleet, producer: App) -> None:
    # All five in the same instant: on SQLite they queue for the write lock at start
    # (a new file's migration, then every first write), and each comes up.
    workers = [fleet.start(["p=cron:2"], app="scheduleapp:app", lease=5) for _ in range(5)]
    for worker in workers:
        wait_for(lambda w=worker: " started: " in w.log() or not w.alive(), timeout=60)
        assert worker.alive(), worker.log()
        assert "schedule every_second: tick at '* * * * * *' (UTC), catch_up = 5" in worker.log()
    time.sleep(RUN)  # the subject: five workers ticking together for RUN s of real time
    stop_all(workers)

    jobs = producer.broker.list_jobs(task="tick", limit=10_000)
    keys = Counter(j.unique_key for j in jobs)
    assert all(k is not None and k.startswith(PREFIX) for k in keys), keys
    twice = {k: n for k, n in keys.items() if n > 1}
    assert not twice, f"ticks enqueued more than once: {twice}"
    ticks = sorted(tick_of(str(k)) for k in keys)
    assert len(ticks) >= RUN - 5, f"only {len(ticks)} ticks in {RUN:g} s"
    assert ticks == [ticks[0] + n for n in range(len(ticks))], "a tick is missing"

    logged = fleet.logs().count(f"schedule every_second: tick {PREFIX}")
    assert logged == len(jobs), f"{logged} enqueues logged for {len(jobs)} jobs"
    row = producer.broker.schedule_states().rows["every_second"]
    assert row.last_tick == ticks[-1]
    assert row.last_job_id == max(j.id for j in jobs)
    ran = [producer.get_job(j.id) for j in jobs]
    assert {j.state for j in ran} <= {JobState.SUCCEEDED, JobState.READY}  # none failed
