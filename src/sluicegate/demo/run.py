"""One run: a producer thread follows the schedule, an in-process Worker serves the pools,
and a rich progress display shows each job class's done/total while it happens."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn
from rich.progress import Task as ProgressTask
from rich.text import Text

from ..app import App
from ..job import JobState
from ..task import Task
from ..worker import PoolSpec, Worker
from .measure import Recorder, RunResult
from .scenario import CLASSES, Arrival

RUN_TIMEOUT = 120.0  # seconds; a run that takes longer than this is broken, not slow
TICK = 0.05  # seconds between progress refreshes


def run_scenario(
    label: str, pools: Sequence[PoolSpec], schedule: Sequence[Arrival], console: Console
) -> RunResult:
    """Run ``schedule`` through a Worker with ``pools`` on a fresh temporary SQLite file."""
    with tempfile.TemporaryDirectory(prefix="sluicegate-demo-") as folder:
        app = App(broker=f"sqlite:///{os.path.join(folder, 'demo.db')}")
        try:
            return _run(app, label, tuple(pools), schedule, console)
        finally:
            app.close()


def _register(app: App, recorder: Recorder) -> dict[str, Task[[int, float], None]]:
    @app.task(queue="transcode")
    def transcode_video(video_id: int, seconds: float) -> None:
        recorder.work(seconds)

    @app.task(queue="email")
    def send_password_reset(user_id: int, seconds: float) -> None:
        recorder.work(seconds)

    @app.task(queue="index")
    def update_search_index(doc_id: int, seconds: float) -> None:
        recorder.work(seconds)

    return {
        "transcode": transcode_video,
        "email": send_password_reset,
        "index": update_search_index,
    }


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
        TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("done  [dim]running[/] {task.fields[running]:>2}  "
                   "[dim]waiting[/] {task.fields[waiting]:>2}"),
        _Seconds(), console=console,
    )  # fmt: skip


def _all_acked(app: App, total: int) -> bool:
    queues = app.broker.stats().queues
    return sum(q.counts.get(JobState.SUCCEEDED, 0) for q in queues.values()) >= total


def _run(
    app: App, label: str, pools: tuple[PoolSpec, ...], schedule: Sequence[Arrival], console: Console
) -> RunResult:
    recorder = Recorder()
    tasks = _register(app, recorder)
    app.broker  # noqa: B018 - create the database before the clock starts
    totals = {c: sum(1 for a in schedule if a.job_class == c) for c in CLASSES}
    worker = Worker(app, list(pools), shutdown_timeout=10.0)
    abort = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        start = time.monotonic()
        for n, arrival in enumerate(schedule):
            if abort.wait(max(0.0, start + arrival.at - time.monotonic())):
                return
            job = tasks[arrival.job_class].enqueue(n, arrival.seconds)
            recorder.on_enqueue(job.id, arrival.job_class, job.enqueued_at)

    began = time.monotonic()
    worker_thread = _background(worker.run, "sluicegate-demo-worker", errors)
    producer = _background(produce, "sluicegate-demo-producer", errors)
    progress = _progress(console)
    ids = {c: progress.add_task(c, total=totals[c], running=0, waiting=0) for c in CLASSES}
    finished = False
    try:
        with progress:
            while True:
                enqueued, running, done = recorder.snapshot()
                for c in CLASSES:
                    waiting = enqueued[c] - running[c] - done[c]
                    progress.update(ids[c], completed=done[c], running=running[c], waiting=waiting)
                if errors:
                    raise errors[0]
                if sum(done.values()) == len(schedule) and _all_acked(app, len(schedule)):
                    break
                if time.monotonic() - began > RUN_TIMEOUT:
                    raise RuntimeError(f"demo run {label!r} did not finish in {RUN_TIMEOUT:g} s")
                time.sleep(TICK)
        finished = True
    finally:
        abort.set()
        worker.stop(immediate=not finished)  # on error or Ctrl-C: release at once
        producer.join(timeout=5)
        worker_thread.join(timeout=15)
    return RunResult(label, pools, recorder.stats(), time.monotonic() - began)
