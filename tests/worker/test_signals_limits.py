"""Limits' figures join the signals: a worker publishes, per limit its app declares,
units in use, jobs waiting and the oldest wait, and `size --queue` says when the limit,
not the pool, is the ceiling."""

from __future__ import annotations

import time
from collections.abc import Callable

from sluicegate import App
from sluicegate.metrics import sizing
from sluicegate.metrics.cluster import fold
from sluicegate.worker import PoolSpec, Worker
from support.fleet import wait_for


def test_limit_figures_in_the_snapshot_and_the_sizing(
    app: App, run_worker: Callable[..., Worker]
) -> None:
    app.limit("storage", concurrency=1)

    @app.task(queue="io", limits=["storage"])
    def write() -> None:
        time.sleep(0.1)  # the job's body holds the one unit a while: the others wait for it

    worker = run_worker([PoolSpec("io", ("io",), 4)], publish_interval=0.1)
    for _ in range(30):  # 3 s of work through one unit of storage
        write.enqueue()

    def figures() -> dict[str, object] | None:
        snap = worker.registry.latest
        if snap is None or snap["tasks"].get("write", {}).get("succeeded", 0) < 3:
            return None
        storage = snap["limits"].get("storage")
        return dict(storage) if storage and storage["waiting"] >= 10 else None

    storage = wait_for(figures, what="the limit's figures")
    assert storage["concurrency"] == 1 and storage["in_use"] == 1
    assert isinstance(storage["oldest_wait_s"], float)
    view = fold(app.broker.list_workers())
    assert view["limits"]["storage"]["in_use"] == 1
    assert view["pools"]["io"]["busy"] == 1  # 4 slots, but the limit lets one run
    notes = " ".join(sizing.observed(view, app.broker.list_workers(), "io", "1m").notes)
    assert "storage" in notes and "ceiling" in notes
