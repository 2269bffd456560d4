"""``sluicegate demo``: 09:00 at a video platform, one shared pool vs separate budgets.

A burst of transcode jobs (~0.5 s each) lands at once; password-reset emails
(~20 ms) and search-index updates (~50 ms) trickle in just after. The same seeded
arrivals run twice through an in-process Worker on a fresh, temporary SQLite file:
first with one shared pool of 10 slots over all three queues, then with separate
pools (transcode 4, email 3, index 2). Each task records when its body started
(keyed by ``current_job().id``); wait = start - enqueue. The work is simulated with
``time.sleep`` in the thread model.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .app import App
from .context import current_job
from .job import JobState
from .task import Task
from .worker import PoolSpec, Worker

CLASSES = ("transcode", "email", "index")
SHARED_POOLS = (PoolSpec("shared", CLASSES, 10),)
SEPARATE_POOLS = (
    PoolSpec("transcode", ("transcode",), 4),
    PoolSpec("email", ("email",), 3),
    PoolSpec("index", ("index",), 2),
)
DEFAULT_SEED = 900  # 09:00
RUN_TIMEOUT = 120.0  # seconds; a run that takes longer than this is broken, not slow


# ---- the arrivals ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Arrival:
    """One job to enqueue ``at`` seconds after the run starts, whose body takes ``seconds``."""

    at: float
    job_class: str
    seconds: float


def build_schedule(quick: bool = False, seed: int = DEFAULT_SEED) -> list[Arrival]:
    """The seeded arrivals: a transcode burst, then emails and index updates trickling in."""
    rng = random.Random(seed)
    transcodes, trickle_end = (12, 1.5) if quick else (40, 5.0)
    arrivals = [Arrival(i * 0.005, "transcode", rng.uniform(0.45, 0.55)) for i in range(transcodes)]
    trickle_start = 0.25
    for job_class, gap, work in (
        ("email", (0.05, 0.10), (0.015, 0.025)),
        ("index", (0.08, 0.12), (0.04, 0.06)),
    ):
        at = trickle_start + rng.uniform(0.0, gap[0])
        while at < trickle_end:
            arrivals.append(Arrival(round(at, 4), job_class, rng.uniform(*work)))
            at += rng.uniform(*gap)
    return sorted(arrivals, key=lambda a: a.at)


# ---- results ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClassStats:
    """One job class in one run. Waits in ms; completion in s from the run's first enqueue."""

    job_class: str
    jobs: int
    p50_wait_ms: float
    p95_wait_ms: float
    max_wait_ms: float
    completion_s: float


@dataclass(frozen=True, slots=True)
class RunResult:
    label: str
    pools: tuple[PoolSpec, ...]
    classes: dict[str, ClassStats]
    elapsed_s: float


@dataclass(frozen=True, slots=True)
class DemoResult:
    quick: bool
    shared: RunResult
    separate: RunResult
    conclusion: tuple[str, str]
    elapsed_s: float


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class Recorder:
    """Thread-safe record of each job's enqueue, start and finish times (epoch seconds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.enqueued: dict[int, tuple[str, float]] = {}
        self.started: dict[int, float] = {}
        self.finished: dict[int, float] = {}
        self.done = dict.fromkeys(CLASSES, 0)
        self.running = dict.fromkeys(CLASSES, 0)

    def on_enqueue(self, job_id: int, job_class: str, enqueued_at: float) -> None:
        with self._lock:
            self.enqueued[job_id] = (job_class, enqueued_at)

    def work(self, seconds: float) -> None:
        """A task body: note the start, 'work' for ``seconds``, note the finish."""
        started = time.time()
        job = current_job()
        with self._lock:
            self.started[job.id] = started
            self.running[job.queue] += 1
        time.sleep(seconds)
        with self._lock:
            self.finished[job.id] = time.time()
            self.running[job.queue] -= 1
            self.done[job.queue] += 1

    def snapshot(self) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """Per class: enqueued, running and done counts."""
        with self._lock:
            enqueued = dict.fromkeys(CLASSES, 0)
            for job_class, _ in self.enqueued.values():
                enqueued[job_class] += 1
            return enqueued, dict(self.running), dict(self.done)

    def stats(self) -> dict[str, ClassStats]:
        with self._lock:
            first = min(at for _, at in self.enqueued.values())
            out = {}
            for job_class in CLASSES:
                ids = [i for i, (c, _) in self.enqueued.items() if c == job_class]
                if not ids:
                    continue
                waits = [max(0.0, self.started[i] - self.enqueued[i][1]) * 1000 for i in ids]
                out[job_class] = ClassStats(
                    job_class, len(ids), percentile(waits, 50), percentile(waits, 95),
                    max(waits), max(self.finished[i] for i in ids) - first,
                )  # fmt: skip
            return out


# ---- one run ------------------------------------------------------------------------
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

    return {"transcode": transcode_video, "email": send_password_reset, "index": update_search_index}


def _background(target: Callable[[], None], name: str, errors: list[BaseException]) -> threading.Thread:
    def guarded() -> None:
        try:
            target()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=guarded, name=name, daemon=True)
    thread.start()
    return thread


def _all_acked(app: App, total: int) -> bool:
    queues = app.broker.stats().queues
    return sum(q.counts.get(JobState.SUCCEEDED, 0) for q in queues.values()) >= total


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


def _run(
    app: App, label: str, pools: tuple[PoolSpec, ...], schedule: Sequence[Arrival], console: Console
) -> RunResult:
    recorder = Recorder()
    tasks = _register(app, recorder)
    app.broker  # noqa: B018 - create the database before the clock starts
    totals = dict.fromkeys(CLASSES, 0)
    for arrival in schedule:
        totals[arrival.job_class] += 1
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
    progress = Progress(
        TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("done  [dim]running[/] {task.fields[running]:>2}  "
                   "[dim]waiting[/] {task.fields[waiting]:>2}"),
        TimeElapsedColumn(), console=console,
    )  # fmt: skip
    ids = {c: progress.add_task(c, total=totals[c], running=0, waiting=0) for c in CLASSES}
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
                time.sleep(0.05)
    finally:
        abort.set()
        worker.stop()
        producer.join(timeout=5)
        worker_thread.join(timeout=15)
    return RunResult(label, pools, recorder.stats(), time.monotonic() - began)


# ---- the report ---------------------------------------------------------------------
def _ms(value: float) -> str:
    return f"{value:,.0f} ms"


def conclude(shared: RunResult, separate: RunResult) -> tuple[str, str]:
    """Two plain-language lines computed from the numbers."""
    s_mail, p_mail = shared.classes["email"], separate.classes["email"]
    first = (
        f"email p95 wait: {_ms(s_mail.p95_wait_ms)} shared vs {_ms(p_mail.p95_wait_ms)} separate"
    )
    if "index" in shared.classes:
        s_idx, p_idx = shared.classes["index"], separate.classes["index"]
        first += f" (index: {_ms(s_idx.p95_wait_ms)} vs {_ms(p_idx.p95_wait_ms)})."
    s_tc, p_tc = shared.classes["transcode"].completion_s, separate.classes["transcode"].completion_s
    if p_mail.p95_wait_ms < s_mail.p95_wait_ms:
        second = (
            "With one shared pool, short jobs queue behind the transcode burst; "
            "separate budgets keep them flowing"
        )
        if p_tc > s_tc:
            second += f", at the cost of transcodes finishing later ({p_tc:.1f} s vs {s_tc:.1f} s)."
        else:
            second += f", and transcodes finished no later ({p_tc:.1f} s vs {s_tc:.1f} s)."
    else:
        second = (
            "This run did not show the effect: emails waited no longer in the shared pool "
            "(is the machine overloaded?)."
        )
    return first, second


def _pools_text(pools: Sequence[PoolSpec]) -> str:
    return ", ".join(f"{p.name}={','.join(p.queues)}:{p.slots}" for p in pools)


def report(shared: RunResult, separate: RunResult) -> Table:
    """ONE side-by-side table: a row per job class, shared vs separate for each figure."""
    table = Table(
        title="Same arrivals, two ways to budget the slots",
        caption=f"shared: {_pools_text(shared.pools)}  |  separate: {_pools_text(separate.pools)}"
        "\nwait = task body started - enqueued; done after = from the first enqueue to the "
        "class's last job finishing",
    )  # fmt: skip
    table.add_column("job class")
    table.add_column("jobs", justify="right")
    for figure in ("p50 wait", "p95 wait", "done after"):
        table.add_column(f"{figure}\nshared", justify="right")
        table.add_column(f"{figure}\nseparate", justify="right", style="bold")
    for job_class in CLASSES:
        s, p = shared.classes.get(job_class), separate.classes.get(job_class)
        if s is None or p is None:
            continue
        table.add_row(
            job_class, str(s.jobs), _ms(s.p50_wait_ms), _ms(p.p50_wait_ms),
            _ms(s.p95_wait_ms), _ms(p.p95_wait_ms), f"{s.completion_s:.1f} s",
            f"{p.completion_s:.1f} s",
        )  # fmt: skip
    return table


def run_demo(
    quick: bool = False, *, console: Console | None = None, seed: int = DEFAULT_SEED
) -> DemoResult:
    """Run the scenario with a shared pool, then with separate pools; print and return results."""
    console = console or Console()
    began = time.monotonic()
    schedule = build_schedule(quick, seed)
    counts = {c: sum(1 for a in schedule if a.job_class == c) for c in CLASSES}
    trickle = max(a.at for a in schedule)
    console.print(
        f"[bold]09:00 at a video platform.[/] {counts['transcode']} transcode jobs (~0.5 s each) "
        f"land at once; {counts['email']} password-reset emails (~20 ms) and {counts['index']} "
        f"search-index updates (~50 ms) trickle in over {trickle:.1f} s.\n"
        "The same seeded arrivals run twice, each on a fresh temporary SQLite broker "
        "(work simulated with sleep, thread model).\n"
    )
    runs = []
    for n, (label, pools) in enumerate(
        (("one shared pool", SHARED_POOLS), ("separate pools", SEPARATE_POOLS)), start=1
    ):
        console.rule(f"run {n} of 2: {label}  [dim]({_pools_text(pools)})[/]")
        runs.append(run_scenario(label, pools, schedule, console))
    shared, separate = runs
    console.print()
    console.print(report(shared, separate))
    conclusion = conclude(shared, separate)
    console.print()
    for line in conclusion:
        console.print(line, highlight=False)
    elapsed = time.monotonic() - began
    console.print(f"[dim]demo took {elapsed:.1f} s[/]")
    return DemoResult(quick, shared, separate, conclusion, elapsed)
