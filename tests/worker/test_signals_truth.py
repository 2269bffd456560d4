"""Every published figure checked against ground truth the test records itself.

A known workload runs through a real in-process Worker on a SQLite file: sleeps of known
length in a 2-slot pool, attempts that fail (one retry, then dead), attempts that time
out, a parked queue with one ready and one scheduled job behind a blocked slot. The
tasks write down when their bodies began and ended; the test then reads the worker's
snapshot from the registry, as `stats` on another machine would, and compares: counts
exactly; durations, waits and ages within tolerance; utilisation within 5 points.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluicegate import App, Job
from sluicegate.context import current_job
from sluicegate.metrics.cluster import fold
from sluicegate.worker import PoolSpec, Worker
from support.brokers import over_brokers
from support.fleet import wait_for

pytestmark = over_brokers

SLEEP = 0.05  # s, each "sleepy" job
N_SLEEPY = 20
N_FLAKY = 3  # each: attempt 1 retried, attempt 2 dead
N_SLOW = 2  # each: times out at 0.1 s (one attempt: dead)
INTERVAL = 0.2  # s between registry publishes


class Truth:
    """What the tasks saw, on the wall clock (the broker's clock too: SQLite reads this
    machine's, and the PostgreSQL server runs on this machine)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: list[tuple[str, float, float, float]] = []  # task, run_at, start, end

    def body(self, task: str, run_at: float, start: float, end: float) -> None:
        with self.lock:
            self.bodies.append((task, run_at, start, end))

    def of(self, task: str) -> list[tuple[str, float, float, float]]:
        return [b for b in self.bodies if b[0] == task]


@pytest.fixture
def workload(app: App, gate: threading.Event) -> tuple[Truth, dict[str, Any]]:
    truth = Truth()

    @app.task(queue="work")
    def sleepy(seconds: float) -> None:
        start = time.time()
        time.sleep(seconds)
        truth.body("sleepy", current_job().run_at, start, time.time())

    @app.task(queue="work", max_attempts=2, backoff_base=0.01, backoff_max=0.01)
    def flaky() -> None:
        start = time.time()
        time.sleep(0.01)
        truth.body("flaky", current_job().run_at, start, time.time())
        raise RuntimeError("flaky by design")

    @app.task(queue="slow", max_attempts=1, timeout=0.1)
    def slow() -> None:
        start = time.time()
        time.sleep(0.3)  # past its timeout: the outcome goes at 0.1 s, the slot stays busy
        truth.body("slow", current_job().run_at, start, time.time())

    @app.task(queue="parked")
    def parked() -> None:
        gate.wait(30)

    return truth, {"sleepy": sleepy, "flaky": flaky, "slow": slow, "parked": parked}


def registry_snapshot(
    app: App,
    worker_id: str,
    after: float,
    showing: Callable[[dict[str, Any]], bool] = lambda snap: True,
) -> dict[str, Any]:
    """The worker's snapshot as published, once one taken after ``after`` (wall) that is
    ``showing`` what is awaited is in."""

    def fresh() -> dict[str, Any] | None:
        for record in app.broker.list_workers().workers:
            snap = record.snapshot
            if record.info.id == worker_id and snap.get("at", 0) > after and showing(snap):
                return snap
        return None

    return wait_for(fresh, timeout=10, what="a fresh snapshot in the registry")


def test_figures_match_ground_truth(
    app: App,
    workload: tuple[Truth, dict[str, Any]],
    run_worker: Callable[..., Worker],
    gate: threading.Event,
) -> None:
    truth, tasks = workload
    pools = [
        PoolSpec("work", ("work",), 2),
        PoolSpec("slow", ("slow",), 1),
        PoolSpec("parked", ("parked",), 1),
    ]
    worker = run_worker(pools, publish_interval=INTERVAL, lease=5.0, metrics_port=0)
    registry_snapshot(app, worker.worker_id, 0.0)  # registered: arrivals count from here

    blocker = tasks["parked"].enqueue()
    wait_for(lambda: app.get_job(blocker.id).state.value == "running", what="the blocker")
    waiting: Job = tasks["parked"].enqueue()
    scheduled: Job = tasks["parked"].with_options(delay=3600).enqueue()
    jobs = [tasks["sleepy"].enqueue(SLEEP) for _ in range(N_SLEEPY)]
    jobs += [tasks["flaky"].enqueue() for _ in range(N_FLAKY)]
    jobs += [tasks["slow"].enqueue() for _ in range(N_SLOW)]
    wait_for(lambda: all(app.get_job(j.id).finished for j in jobs), timeout=30, what="the workload")
    wait_for(lambda: len(truth.of("slow")) == N_SLOW, what="the timed-out bodies to return")
    done_at = time.time()

    def slots_free(snap: dict[str, Any]) -> bool:  # once the worker saw them return
        return bool(snap["pools"]["slow"]["busy"] == 0)

    snap = registry_snapshot(app, worker.worker_id, done_at, slots_free)

    # ---- counts, exactly ----
    t = snap["tasks"]
    assert (t["sleepy"]["succeeded"], t["sleepy"]["failed"]) == (N_SLEEPY, 0)
    assert t["flaky"]["retried"] == N_FLAKY and t["flaky"]["dead"] == N_FLAKY
    assert t["flaky"]["failed"] == 2 * N_FLAKY and t["flaky"]["succeeded"] == 0
    assert t["slow"]["timed_out"] == N_SLOW and t["slow"]["dead"] == N_SLOW
    assert t["sleepy"]["duration"]["count"] == N_SLEEPY
    attempts = N_SLEEPY + 2 * N_FLAKY + N_SLOW + 1  # + the running blocker
    assert snap["worker_figures"]["claimed"] == attempts
    assert snap["worker_figures"]["lease_lost"] == 0
    assert snap["worker_figures"]["recovered"] == 0
    q = snap["queues"]
    assert q["work"]["enqueued"] == N_SLEEPY + N_FLAKY
    assert q["work"]["completed"] == N_SLEEPY + N_FLAKY  # succeeded or dead
    assert q["slow"]["completed"] == N_SLOW
    assert (q["work"]["failed"], q["slow"]["failed"]) == (2 * N_FLAKY, N_SLOW)
    assert t["sleepy"]["queues"] == ["work"]
    assert (q["parked"]["ready"], q["parked"]["scheduled"]) == (1, 1)
    assert q["parked"]["claimed"] + q["parked"]["running"] == 1
    assert q["work"]["ready"] == 0 and q["work"]["running"] == 0
    work = snap["pools"]["work"]
    assert (work["slots"], work["busy"]) == (2, 0)
    assert snap["pools"]["parked"]["busy"] == 1
    assert sum(b["count"] for b in work["by_concurrency"].values()) == N_SLEEPY + 2 * N_FLAKY
    assert set(work["by_concurrency"]) <= {"1", "2"}

    # ---- durations and waits, within tolerance ----
    bodies = truth.of("sleepy")
    true_mean = sum(end - start for _, _, start, end in bodies) / len(bodies)
    hist = t["sleepy"]["duration"]
    assert hist["sum"] / hist["count"] == pytest.approx(true_mean, abs=0.01)
    true_wait = sum(start - run_at for _, run_at, start, _ in bodies) / len(bodies)
    wait = t["sleepy"]["wait"]
    assert wait["count"] == N_SLEEPY
    assert wait["sum"] / wait["count"] == pytest.approx(true_wait, abs=0.02)
    assert true_wait > SLEEP  # 20 jobs on 2 slots: most of them really waited

    # ---- the oldest ready job's age, as of the snapshot ----
    true_age = snap["at"] - app.get_job(waiting.id).run_at
    assert q["parked"]["oldest_ready_age_s"] == pytest.approx(true_age, abs=0.25)
    assert app.get_job(scheduled.id).state.value == "scheduled"

    # ---- utilisation within 5 points: busy slot-seconds over slots x time ----
    # (A slot is busy while a body runs in it: the work pool's bodies are these.)
    busy = sum(end - start for _, _, start, end in truth.of("sleepy") + truth.of("flaky"))
    covered = min(60.0, snap["uptime_s"])
    print(  # the figures, for the record (pytest -s shows them)
        f"\nutilisation of pool work: {work['utilisation']['1m']:.3f} published, "
        f"{busy / (2 * covered):.3f} from the bodies ({busy:.3f} s on 2 slots over "
        f"{covered:.2f} s); mean duration {hist['sum'] / hist['count'] * 1000:.2f} ms "
        f"published, {true_mean * 1000:.2f} ms from the bodies"
    )
    assert work["utilisation"]["1m"] == pytest.approx(busy / (2 * covered), abs=0.05)
    parked_util = snap["pools"]["parked"]["utilisation"]["1m"]
    assert parked_util > 0.5  # the blocker held its only slot most of the run

    # ---- the cluster view agrees ----
    view = fold(app.broker.list_workers(), app.broker.queue_depths())
    assert view["pools"]["work"]["slots"] == 2
    assert view["tasks"]["sleepy"]["succeeded"] == N_SLEEPY
    assert [w["status"] for w in view["workers"]] == ["live"]
    assert view["workers"][0]["healthy"] is True

    # ---- a Prometheus scrape of the same worker, parsed by prometheus_client ----
    assert worker.exporter is not None
    base = f"http://127.0.0.1:{worker.exporter.port}"
    text = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def sample(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert sample("sluicegate_jobs_total", task="sleepy", outcome="succeeded") == N_SLEEPY
    assert sample("sluicegate_job_duration_seconds_count", task="sleepy") == N_SLEEPY
    assert sample("sluicegate_queue_failed_total", queue="work") == 2 * N_FLAKY
    assert sample("sluicegate_pool_slots", pool="work", model="thread") == 2
    assert sample("sluicegate_queue_ready_jobs", queue="parked") == 1
    health = json.loads(urllib.request.urlopen(f"{base}/healthz", timeout=5).read())
    assert health["healthy"] is True
    gate.set()
