"""One run: a producer thread follows the schedule, an in-process Worker serves the pools,
and a rich progress display shows each job class's done/total while it happens.

The progress and the figures come from the broker (counts by state) and from the jobs'
own results, because a transcode's body runs in a child process, not here.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
)
from rich.progress import Task as ProgressTask
from rich.text import Text

from ..app import App
from ..job import Job, JobState
from ..worker import Worker
from ..worker.models import get_model
from .measure import RunResult, class_stats
from .scenario import CLASSES, Arrival, Layout

RUN_TIMEOUT = 120.0  # seconds; a run that takes longer than this is broken, not slow
TICK = 0.05  # seconds between progress refreshes


def run_scenario(
    layout: Layout,
    schedule: Sequence[Arrival],
    per_round: float,
    console: Console,
    keep_in: str | None = None,
) -> RunResult:
    """Run ``schedule`` through a Worker with ``layout`` on a fresh SQLite file (temporary,
    or ``KEEP_IN/<layout name>.db``, kept so `sluicegate top` can watch it); a transcode
    of ``s`` seconds hashes ``s / per_round`` MiB."""
    with tempfile.TemporaryDirectory(prefix="sluicegate-demo-") as folder:
        path = os.path.join(keep_in or folder, f"{layout.name}.db")
        layout.app.use_broker(f"sqlite:///{path}")
        try:
            return _run(layout, schedule, per_round, console)
        finally:
            layout.app.close()


def clear_kept(keep_in: str, layouts: Sequence[Layout]) -> None:
    """Remove an earlier demo's files from KEEP_IN before any run starts (not per run:
    a `top` may already be watching a file of a run still to come)."""
    for layout in layouts:
        path = os.path.join(keep_in, f"{layout.name}.db")
        for leftover in (path, f"{path}-wal", f"{path}-shm"):
            if os.path.exists(leftover):
                os.remove(leftover)


def _background(
    target: Callable[[], None], name: str, errors: list[BaseException]
) -> threading.Thread:
    def guarded() -> None:
        try:
            target()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=guarded, name=name, daemon=True)
    thread.start()
    return thread


class _Seconds(ProgressColumn):
    """Elapsed seconds, frozen when the class is done: its completion time, live."""

    def render(self, task: ProgressTask) -> Text:
        seconds = task.finished_time if task.finished_time is not None else task.elapsed
        return Text(f"{seconds or 0.0:5.1f} s", style="progress.elapsed")


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description:>10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(
            "done  [dim]running[/] {task.fields[running]:>2}  "
            "[dim]waiting[/] {task.fields[waiting]:>2}"
        ),
        _Seconds(),
        console=console,
    )


def _counts(app: App) -> dict[str, dict[JobState, int]]:
    queues = app.broker.stats().queues
    return {c: dict(queues[c].counts) if c in queues else {} for c in CLASSES}


def _show(
    progress: Progress,
    ids: dict[str, TaskID],
    counts: dict[str, dict[JobState, int]],
    warm: dict[str, int],
) -> int:
    """Update each class's bar from the broker's counts; returns the jobs done in all."""
    total = 0
    for c in CLASSES:
        by_state = counts[c]
        done = by_state.get(JobState.SUCCEEDED, 0) - warm[c]
        running = by_state.get(JobState.CLAIMED, 0) + by_state.get(JobState.RUNNING, 0)
        waiting = by_state.get(JobState.READY, 0)
        progress.update(ids[c], completed=done, running=running, waiting=waiting)
        total += done
    return total


def _check_dead(app: App, counts: dict[str, dict[JobState, int]]) -> None:
    """A dead job means the demo itself is broken: say why instead of waiting forever."""
    for job_class, by_state in counts.items():
        if by_state.get(JobState.DEAD, 0):
            job = app.broker.list_jobs(JobState.DEAD, job_class, limit=1)[0]
            error = job.last_error.message if job.last_error else "unknown error"
            raise RuntimeError(f"demo job {job.id} ({job.task}) is dead: {error}")


def _enqueue_warm_ups(app: App, layout: Layout) -> list[Job]:
    """One no-op job per child of every process pool, enqueued before the worker starts so
    that its first claim takes them all and hands each to a distinct idle child."""
    jobs: list[Job] = []
    for pool in layout.pools:
        if get_model(pool.model).child_processes:
            jobs += [app.enqueue("warm_up", queue=pool.queues[0]) for _ in range(pool.slots)]
    return jobs


def _wait_warm(app: App, jobs: list[Job], errors: list[BaseException], console: Console) -> None:
    """Until every child has run its warm-up job: child start-up (a fresh interpreter
    importing the app) then happens before the clock starts, not in anyone's wait."""
    if not jobs:
        return
    began = time.monotonic()

    def warm(job: Job) -> bool:
        fresh = app.broker.get_job(job.id)
        return fresh is not None and fresh.state == JobState.SUCCEEDED

    with console.status(f"starting {len(jobs)} child processes (not counted in the figures)"):
        while not all(warm(j) for j in jobs):
            if errors:
                raise errors[0]
            _check_dead(app, _counts(app))
            if time.monotonic() - began > RUN_TIMEOUT:
                raise RuntimeError(f"child processes did not start in {RUN_TIMEOUT:g} s")
            time.sleep(TICK)
    console.print(
        f"[dim]{len(jobs)} child processes ready in {time.monotonic() - began:.1f} s "
        "(their start-up is not counted)[/]"
    )


def _run(
    layout: Layout, schedule: Sequence[Arrival], per_round: float, console: Console
) -> RunResult:
    app = layout.app
    app.broker  # noqa: B018 - create the database before the clock starts
    totals = {c: sum(1 for a in schedule if a.job_class == c) for c in CLASSES}
    # Signals every second: a run lasts seconds, and `top` may be watching it.
    worker = Worker(app, list(layout.pools), shutdown_timeout=10.0, publish_interval=1.0)
    abort = threading.Event()
    errors: list[BaseException] = []
    classes: dict[int, str] = {}  # job id -> job class

    def produce() -> None:
        start = time.monotonic()
        for n, arrival in enumerate(schedule):
            if abort.wait(max(0.0, start + arrival.at - time.monotonic())):
                return
            work: float = arrival.seconds
            if arrival.job_class == "transcode":
                work = max(1, round(arrival.seconds / per_round))
            job = app.enqueue(layout.tasks[arrival.job_class], args=[n, work])
            classes[job.id] = arrival.job_class

    warm_ups = _enqueue_warm_ups(app, layout)
    warm = {c: sum(1 for j in warm_ups if j.queue == c) for c in CLASSES}
    finished = False
    worker_thread = _background(worker.run, "sluicegate-demo-worker", errors)
    producer: threading.Thread | None = None
    try:
        _wait_warm(app, warm_ups, errors, console)
        began = time.monotonic()
        producer = _background(produce, "sluicegate-demo-producer", errors)
        progress = _progress(console)
        ids = {c: progress.add_task(c, total=totals[c], running=0, waiting=0) for c in CLASSES}
        with progress:
            while True:
                counts = _counts(app)
                done = _show(progress, ids, counts, warm)
                if errors:
                    raise errors[0]
                _check_dead(app, counts)
                if done == len(schedule):
                    break
                if time.monotonic() - began > RUN_TIMEOUT:
                    raise RuntimeError(f"run {layout.label!r} did not finish in {RUN_TIMEOUT:g} s")
                time.sleep(TICK)
        elapsed = time.monotonic() - began
        finished = True
    finally:
        abort.set()
        worker.stop(immediate=not finished)  # on error or Ctrl-C: release at once
        if producer is not None:
            producer.join(timeout=5)
        worker_thread.join(timeout=15)
    jobs = {i: app.get_job(i) for i in classes}
    return RunResult(layout.label, layout.pools, class_stats(classes, jobs), elapsed)
