"""Real worker processes for tests (``Fleet``, ``WorkerProcess``, ``stop_all``), with the
helpers that go with them: broker counts per state, enqueueing by task name, process trees.

Worker processes import their app from tests/apps (``APPS_DIR`` is put on their
PYTHONPATH). ``wait_for`` is support/waiting.py's, re-exported for these tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sluicegate import App, Job, JobState
from sluicegate.brokers import Broker
from sluicegate.task import Task
from sluicegate.testing import run_released as run_released  # children released at once
from support.waiting import wait_for as wait_for

APPS_DIR = Path(__file__).resolve().parents[1] / "apps"  # what worker processes import
T = TypeVar("T")

STATES = ("scheduled", "ready", "claimed", "running", "succeeded", "dead", "cancelled")


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def counts(broker: Broker, queue: str) -> dict[str, int]:
    """Jobs of ``queue`` per state (zeros for an unknown queue)."""
    data = broker.stats().to_dict()["queues"].get(queue, {})
    return {state: int(data.get(state, 0)) for state in STATES}


def states(app: App, jobs: Iterable[Job]) -> list[str]:
    return [app.get_job(job.id).state.value for job in jobs]


def all_in(app: App, jobs: Sequence[Job], state: str) -> bool:
    return all(s == state for s in states(app, jobs))


def enqueue(app: App, task: Task[Any, Any], *args: Any, **options: Any) -> Job:
    """Enqueue ``task`` by name through a producer ``app`` that need not register it,
    keeping the task's own queue and attempt budget."""
    options.setdefault("queue", task.options.queue)
    options.setdefault("max_attempts", task.options.max_attempts)
    return app.enqueue(task.name, args=list(args), **options)


def enqueue_batch(app: App, task: Task[Any, Any], calls: Iterable[Sequence[Any]]) -> list[Job]:
    """Enqueue one job of ``task`` per argument list, in one transaction."""
    specs = [
        app.build_spec(
            task.name, list(args), queue=task.options.queue, max_attempts=task.options.max_attempts
        )
        for args in calls
    ]
    return app.broker.enqueue(specs)


def enqueue_mixed(app: App, calls: Iterable[tuple[Task[Any, Any], Sequence[Any]]]) -> list[Job]:
    """Enqueue one job per ``(task, args)``, tasks mixed, in one transaction."""
    specs = [
        app.build_spec(
            task.name, list(args), queue=task.options.queue, max_attempts=task.options.max_attempts
        )
        for task, args in calls
    ]
    return app.broker.enqueue(specs)


def held_by(job: Job, pid: int) -> bool:
    """Worker ids are HOST-PID-RANDOM; does this job's worker id name process ``pid``?"""
    return job.worker_id is not None and f"-{pid}-" in job.worker_id


def _sluicegate_command() -> list[str]:
    script = Path(sys.executable).parent / "sluicegate"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sluicegate.cli"]


class WorkerProcess:
    """One real ``sluicegate worker chaosapp:app`` process (or another app of tests/apps),
    its output kept in a log file."""

    def __init__(
        self,
        url: str,
        pools: Sequence[str],
        log_path: Path,
        *,
        lease: float = 1.0,
        shutdown_timeout: float = 10.0,
        app: str = "chaosapp:app",
        extra: Sequence[str] = (),
    ) -> None:
        command = [*_sluicegate_command(), "worker", app, "--broker", url]
        for pool in pools:
            command += ["--pool", pool]
        command += ["--lease", str(lease), "--shutdown-timeout", str(shutdown_timeout), *extra]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(APPS_DIR), env.get("PYTHONPATH", "")) if p
        )
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=log_path.parent
            )
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.pid} still running after {timeout:g} s; log:\n{self.log()}"
            ) from None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        """SIGKILL (after SIGCONT, in case it is stopped) and reap; safe to call twice."""
        if self.proc.poll() is None:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    self.proc.send_signal(sig)
                except ProcessLookupError:
                    break
        self.proc.wait(30)


class Fleet:
    """Starts worker processes for one test and reaps every one of them at the end."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url = url  # what workers connect to; a test may point it elsewhere (a proxy)
        self.folder = folder
        self.started: list[WorkerProcess] = []

    def start(self, pools: Sequence[str], **options: Any) -> WorkerProcess:
        log_path = self.folder / f"worker-{len(self.started)}.log"
        worker = WorkerProcess(self.url, pools, log_path, **options)
        self.started.append(worker)
        return worker

    def logs(self) -> str:
        return "\n".join(f"--- worker {w.pid} ---\n{w.log()}" for w in self.started)

    def close(self) -> None:
        for worker in self.started:
            worker.kill()


# ---- process trees (process-pool tests) ------------------------------------------------


def holders(
    app: App, workers: Sequence[WorkerProcess], queues: Sequence[str]
) -> list[WorkerProcess]:
    """The workers that hold at least one job of ``queues`` right now (claimed or running)."""
    held = [
        job
        for queue in queues
        for state in (JobState.CLAIMED, JobState.RUNNING)
        for job in app.broker.list_jobs(state, queue, limit=1000)
    ]
    return [w for w in workers if any(held_by(job, w.pid) for job in held)]


def stop_all(workers: Sequence[WorkerProcess]) -> None:
    """SIGTERM each worker once it has started (a worker still importing, as a replacement
    started just before may be on a loaded machine, has no handler yet and would die of
    it), then expect a graceful exit."""
    for worker in workers:
        wait_for(lambda w=worker: " started: " in w.log() or not w.alive(), timeout=60)
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0, worker.log()


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a live process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces
    return fields[0], int(fields[1])


def process_gone(pid: int) -> bool:
    """Has process ``pid`` exited (gone, or a zombie nobody reaped yet)?"""
    stat = _proc_stat(pid)
    return stat is None or stat[0] in ("Z", "X")


def children_of(pid: int) -> list[int]:
    """Live (non-zombie) processes whose parent is ``pid``, read from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _proc_stat(int(entry.name))
        if stat is not None and stat[1] == pid and stat[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return sorted(found)


def pool_children(pid: int) -> list[int]:
    """The prefork pool children of worker ``pid`` (multiprocessing spawn children; not
    the resource tracker, which multiprocessing starts beside them)."""
    out = []
    for child in children_of(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if b"spawn_main" in cmdline:
            out.append(child)
    return out
