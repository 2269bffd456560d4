"""A worker that silently stops consuming is unhealthy, while an idle one with nothing
ready stays healthy: the health check looks at claims against ready work, not only at
whether the process and its connection are up."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable

from sluicegate import App
from sluicegate.metrics.cluster import fold
from sluicegate.worker import PoolSpec, Worker
from support.fleet import wait_for


def test_a_pool_that_stops_claiming_makes_the_worker_unhealthy(
    app: App, run_worker: Callable[..., Worker]
) -> None:
    @app.task(queue="q")
    def noop() -> None:
        pass

    worker = run_worker(
        [PoolSpec("p", ("q",), 2)], publish_interval=0.1, stall_after=0.5, metrics_port=0
    )
    wait_for(lambda: worker.registry.latest is not None, what="the first publish")
    noop.enqueue()
    wait_for(lambda: worker.counters.succeeded == 1, what="the first job")
    # Idle with nothing ready, for longer than stall_after: still healthy.
    wait_for(lambda: worker.health.check()["loop_age_s"] < 1.0)
    before = worker.claimers[0].attempted_at
    wait_for(lambda: worker.claimers[0].attempted_at - before >= 0 and worker.health.check())
    assert worker.health.check()["healthy"] is True
    assert healthz(worker) == 200

    worker.claimers[0].due_in = lambda now: None  # type: ignore[method-assign]  # stops claiming
    noop.enqueue()
    health = wait_for(lambda: (h := worker.health.check()) and not h["healthy"] and h, timeout=10)
    assert health["stalled"] == ["p"]
    assert "pool p has free slots and ready jobs" in health["reasons"][0]
    assert healthz(worker) == 503

    def unhealthy_in_registry() -> bool:
        rows = fold(app.broker.list_workers())["workers"]
        return bool(rows) and rows[0]["healthy"] is False

    wait_for(unhealthy_in_registry, timeout=10, what="the registry to show it unhealthy")


def healthz(worker: Worker) -> int:
    """The status of GET /healthz on the worker's metrics port."""
    assert worker.exporter is not None
    url = f"http://127.0.0.1:{worker.exporter.port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)
