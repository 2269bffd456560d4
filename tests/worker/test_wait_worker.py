"""job.wait() against a real ``sluicegate worker`` process, on SQLite and PostgreSQL: the
wake-up crosses processes (a doorbell, LISTEN/NOTIFY), as it does in production. And
1,000 waiting threads: what they cost the broker per completion batch, counted by the
waiting hub itself (each of its reads is one query for every waited id)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from sluicegate import App, JobCancelled, JobFailed, JobState
from sluicegate.outcomes import Succeeded
from support.brokers import over_brokers
from support.fleet import Fleet, wait_for

pytestmark = over_brokers
SLOW = 60.0


def test_wait_for_jobs_a_worker_process_runs(producer: App, fleet: Fleet) -> None:
    worker = fleet.start(["w=wait:4:thread"], app="waitapp:app", lease=10.0)
    ok = producer.enqueue("add", args=[1, 2], queue="wait")
    bad = producer.enqueue("explode", args=["no way"], queue="wait")
    slow = producer.enqueue("sleep", args=[30], queue="wait")

    assert ok.wait(SLOW) == {"sum": 3}
    with pytest.raises(JobFailed, match="ValueError: no way") as failed:
        bad.wait(SLOW)
    assert failed.value.type == "ValueError"
    assert "raise ValueError(message)" in failed.value.traceback
    wait_for(lambda: producer.get_job(slow.id).state is JobState.RUNNING, timeout=SLOW)

    async def cancelled_while_running() -> None:
        waiting = asyncio.ensure_future(slow.wait_async(SLOW))
        hub = producer._waiting()
        async with asyncio.timeout(SLOW):  # until the hub holds it and took it for a read
            while not (hub.waiting == 1 and not hub._unchecked):
                await asyncio.sleep(0.01)  # a polling wait
        producer.broker.cancel(slow.id)  # while the wait is under way
        with pytest.raises(JobCancelled):
            await waiting

    asyncio.run(cancelled_while_running())
    many = [producer.enqueue("add", args=[i, i], queue="wait") for i in range(50)]

    async def all_of_them() -> list[Any]:
        return await asyncio.gather(*(j.wait_async(SLOW) for j in many))

    assert asyncio.run(all_of_them()) == [{"sum": 2 * i} for i in range(50)]
    assert worker.alive(), worker.log()


def test_a_thousand_waiting_threads_cost_a_few_queries_per_batch(
    producer: App, db_url: str
) -> None:
    """Finished through another App (another broker handle), as a worker process would."""
    finisher = App(broker=db_url, config=False)
    try:
        jobs = producer.enqueue_many(("add", [i, 1], {}) for i in range(1000))
        hub = producer._waiting()
        results: dict[int, Any] = {}

        def wait(job_id: int) -> None:
            results[job_id] = producer.wait(job_id, SLOW)

        threads = [threading.Thread(target=wait, args=(j.id,)) for j in jobs]
        for thread in threads:
            thread.start()
        wait_for(lambda: hub.waiting == 1000 and not hub._unchecked, timeout=SLOW)
        registered = hub.queries
        claimed = finisher.broker.claim(["default"], 1000, 30.0, "w1")
        assert len(claimed) == 1000
        finisher.broker.record([], [Succeeded(c.claim, "1") for c in claimed])
        for thread in threads:
            thread.join(SLOW)
        per_batch = hub.queries - registered
        assert results == {j.id: 1 for j in jobs}
        assert registered <= 1000 + 2  # at most one read per new waiter (+ safety polls)
        assert 1 <= per_batch <= 3, per_batch  # not 1,000, nor one per waiter per poll
    finally:
        finisher.close()
