"""Retention and the non-PostgreSQL refusals of transactional features (real SQLite files)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sluicegate import App, ConfigError
from sluicegate.brokers import Retention
from sluicegate.brokers.sqlite import SQLiteBroker
from sluicegate.worker import PoolSpec, Worker
from support.waiting import wait_for


def test_worker_prunes_finished_jobs_past_retention(tmp_path: Path) -> None:
    now = [time.time()]
    broker = SQLiteBroker(f"sqlite:///{tmp_path}/jobs.db", clock=lambda: now[0])
    app = App(broker=broker)

    @app.task(max_attempts=1)
    def ok() -> int:
        return 1

    @app.task(max_attempts=1)
    def bad() -> None:
        raise ValueError("x")

    ok.enqueue()
    bad.enqueue()
    Worker(app, burst=True).run()
    now[0] += 2 * 86_400
    kept = ok.enqueue()  # finished two days later: inside retention
    Worker(app, burst=True).run()
    assert len(broker.list_jobs()) == 3

    now[0] += 86_400  # succeeded kept 2 days, dead kept 5: only the first success goes
    worker = Worker(
        app, retention=Retention(succeeded=2 * 86_400 + 60, dead=5 * 86_400), prune_interval=0.05
    )
    worker.pruner.interval = 0.05  # type: ignore[union-attr]
    import threading

    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(lambda: worker.pruner is not None and worker.pruner.deleted >= 1, timeout=60)
    finally:
        worker.stop()
        thread.join()
    states = sorted(j.state.value for j in broker.list_jobs())
    assert states == ["dead", "succeeded"]
    assert broker.get_job(kept.id) is not None
    app.close()


def test_prune_in_batches_counts_each_job_once(tmp_path: Path) -> None:
    now = [1_000_000.0]
    broker = SQLiteBroker(f"sqlite:///{tmp_path}/jobs.db", clock=lambda: now[0])
    app = App(broker=broker)

    @app.task
    def t(i: int) -> int:
        return i

    t.enqueue_many([(i,)] for i in range(25))
    Worker(app, [PoolSpec("p", ("default",), 4)], burst=True).run()
    now[0] += 10
    assert broker.prune(Retention(succeeded=5), batch=7) == 25
    assert broker.prune(Retention(succeeded=5), batch=7) == 0
    assert broker.list_jobs() == []
    app.close()


def test_transactional_features_need_postgresql(tmp_path: Path) -> None:
    app = App(broker=f"sqlite:///{tmp_path}/jobs.db")

    @app.task(transactional=True)
    def tx(connection: object = None) -> None: ...

    with pytest.raises(ConfigError, match="task 'tx' is transactional, which needs the postgresql"):
        Worker(app)
    with pytest.raises(ConfigError, match=r"enqueue\(connection=...\) needs the postgresql"):
        app.enqueue("tx", connection=object())
    assert app.broker.list_jobs() == []
    app.close()
