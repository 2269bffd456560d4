"""The per-minute history end to end: a real ``sluicegate worker`` process runs jobs and
stops; its registry row (read by another process, as a dashboard would) carries the
minutes it covered, and ``metrics.history`` folds them into the cluster's hour."""

from __future__ import annotations

import chaosapp

from sluicegate import App
from sluicegate.metrics.history import history
from sluicegate.metrics.minutes import STEP_S
from support.fleet import Fleet, enqueue_batch

JOBS = 30


def test_a_workers_history_reaches_its_registry_row_and_the_clusters_hour(
    fleet: Fleet, producer: App
) -> None:
    enqueue_batch(producer, chaosapp.slow, [[0.01]] * JOBS)
    worker = fleet.start(["slow=slow:2"], extra=["--burst", "--publish-interval", "0.5"])
    assert worker.wait(60) == 0, fleet.logs()

    listed = producer.broker.list_workers()
    [row] = listed.workers
    assert row.stopped_at is not None
    mine = row.snapshot["history"]
    assert mine["step_s"] == STEP_S and mine["newest"] % STEP_S == 0
    assert mine["since"] <= mine["until"] and mine["until"] >= mine["newest"]
    queue = mine["queues"]["slow"]
    assert sum(queue["completed"]) == JOBS  # the last publish, at the stop, saw every job
    assert "failed" not in queue
    assert len(queue["completed"]) == mine["newest"] // STEP_S - int(mine["since"] // STEP_S) + 1
    assert max(mine["pools"]["slow"]["utilisation"]) > 0

    view = history(listed)
    assert view["workers"] == 1 and set(view["queues"]) == {"slow"}
    rates = view["queues"]["slow"]["completed_per_s"]
    utilisation = view["pools"]["slow"]["utilisation"]
    seen = [i for i, rate in enumerate(rates) if rate is not None]
    assert 1 <= len(seen) <= 2 and seen[0] >= 57  # a short run, a moment ago: 1 or 2 minutes
    assert max(rates[i] or 0.0 for i in seen) > 0
    assert [utilisation[i] is not None for i in range(60)] == [i in seen for i in range(60)]
