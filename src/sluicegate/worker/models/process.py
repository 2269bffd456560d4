"""The process model: prefork children, one per slot, for CPU-bound work.

It runs plain functions, and no transactional tasks (a child has no broker). The parent does all broker I/O; a child only runs tasks. Messages are JSON over a pipe
(nothing is pickled). A child's death (exception exit, ``os._exit``, a segfault, the
OOM killer) fails that attempt with the exit code or signal and the child is
replaced. ``timeout`` is hard: the child is killed. Children are recycled after
``max_jobs_per_child`` jobs or when their memory passes ``max_memory_mb`` (which is
also their address-space limit, so a runaway allocation fails inside the child). A
cancel of a running job kills its child too, and the child is replaced.
Children die with the worker (PR_SET_PDEATHSIG, and EOF on their pipe).

A task's ``current_job().progress(...)`` in a child keeps only the latest value; a
sender thread forwards it to the parent at most every PROGRESS_EVERY seconds (one
message, no reply awaited), and the parent hands it to the lease keeper like a thread's.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from ...codec import DEFAULT_PAYLOAD_LIMIT, dumps, loads
from ...context import ProgressSink
from ...hooks import NO_HOOKS, Hooks, Stopped
from ...job import Claim, ClaimedJob, ErrorInfo, Event, Job, JobId, JobState
from ...outcomes import Buried, Outcome, Report, Retried, Succeeded
from ...retry import RetryPolicy, failure, plain_error
from ..executors import DoneCallback, StartCallback, WorkItem
from ..runner import ended_elsewhere
from .base import ConcurrencyModel, ModelOption, PoolContext, needs_async_pool, needs_thread_pool

if TYPE_CHECKING:
    from ...task import Task

log = logging.getLogger("sluicegate.worker")
_ctx = multiprocessing.get_context("spawn")


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: EOF on the pipe still ends the child
        pass
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os._exit(1)  # the worker died while this child was starting, before the signal was set


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


PROGRESS_EVERY = 0.1  # seconds between a child's progress messages, at most


class ChildProgress:
    """A child's progress reports on their way to the parent: latest value wins, sent by
    a thread of its own so a task calling ``progress`` in a tight loop never waits on the
    pipe, and a last value is sent even if the task reports nothing more for a while."""

    def __init__(self, conn: Connection, send_lock: threading.Lock) -> None:
        self._conn = conn
        self._send_lock = send_lock  # the job's reply is sent by the main thread
        self._latest: tuple[Claim, float, str | None] | None = None
        self._changed = threading.Condition()
        self._sender: threading.Thread | None = None

    def report(self, claim: Claim, fraction: float, message: str | None) -> None:
        with self._changed:
            self._latest = (claim, fraction, message)
            self._changed.notify()
            if self._sender is None:  # started on the first report: a child whose tasks
                # never report keeps its address space (max_memory_mb) to itself
                self._sender = threading.Thread(
                    target=self._send, name="sluicegate-progress", daemon=True
                )
                self._sender.start()

    def forget(self) -> None:
        """The job ended: a value not yet sent is dropped (its outcome goes next)."""
        with self._changed:
            self._latest = None

    def _send(self) -> None:
        while True:
            with self._changed:
                while self._latest is None:
                    self._changed.wait()
                (claim, fraction, message), self._latest = self._latest, None
            note = {"progress": [claim.job_id, claim.token, fraction, message]}
            try:
                with self._send_lock:
                    self._conn.send_bytes(dumps(note).encode())
            except OSError:
                return  # the parent is gone; the child ends on its next receive
            time.sleep(PROGRESS_EVERY)


def child_main(
    app_path: str,
    conn: Connection,
    max_memory_mb: float | None,
    result_limit: int,
    pool: str | None = None,
) -> None:
    """A child's life: import the app, then run one job per message until told to stop."""
    _die_with_parent()
    # The worker decides when children stop: a SIGTERM or SIGINT sent to the whole process
    # group (systemd, Ctrl-C) must not kill jobs the worker is still draining.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if max_memory_mb:
        import resource

        limit = int(max_memory_mb * 1024 * 1024)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from ...loading import load_app
    from ..runner import run_job

    app = load_app(app_path)
    send_lock = threading.Lock()
    progress = ChildProgress(conn, send_lock)
    conn.send_bytes(b'"ready"')  # only now does the parent hand it work (and start clocks)
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return
        request = loads(message.decode())
        if request is None:
            return
        job = Job.from_fields(
            id=JobId(request["id"]),
            task=request["task"],
            queue=request["queue"],
            state=JobState.RUNNING,
            args=request["args"],
            kwargs=request["kwargs"],
            attempts=request["attempts"],
            max_attempts=request["max_attempts"],
            headers=request.get("headers") or {},
        )
        claimed = ClaimedJob(Claim(job.id, request["token"]), job)
        task = app.tasks[job.task]
        outcome = run_job(
            task.fn,
            task.options.retry,
            claimed,
            result_limit,
            progress.report,
            hooks=app.hooks,
            pool=pool,
        )
        progress.forget()
        # The outcome crosses the pipe with its event named, as the parent must not infer it.
        reply: dict[str, Any] = {"event": outcome.event.value, "rss": _rss_bytes()}
        if isinstance(outcome, Succeeded):
            reply["result"] = outcome.result_json
        else:
            reply["error"] = outcome.error.to_dict()
            if isinstance(outcome, Retried):
                reply["retry_in"] = outcome.retry_in
        with send_lock:
            conn.send_bytes(dumps(reply).encode())


@dataclass(frozen=True, slots=True)
class ProcessItem(WorkItem):
    """A child looks the task up itself; the parent needs its timeout and, for a failure
    decided here (a dead or killed child), its retry policy."""

    policy: RetryPolicy
    timeout: float | None


def failure_of(item: ProcessItem, reason: str, kind: str, timed_out: bool = False) -> Report:
    """The outcome of an attempt the parent ended (the child died, was killed, or never
    got the job): retried or dead by the task's policy."""
    job = item.claimed.job
    error = plain_error(kind, reason)
    return failure(
        item.policy, item.claimed.claim, job.attempts, job.max_attempts, error, timed_out=timed_out
    )


@dataclass(slots=True)
class Child:
    process: Any  # multiprocessing.Process from the spawn context
    conn: Connection
    jobs_done: int = 0
    ready: bool = False  # has imported the app; work (and its timeout clock) waits for this
    item: ProcessItem | None = None
    deadline: float | None = None
    stopping: bool = False  # its job was cancelled (or its lease lost): kill it now


def death_reason(exitcode: int | None) -> str:
    if exitcode is None:
        return "child process vanished"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"child process killed by {name}"
    return f"child process exited with code {exitcode}"


class ProcessExecutor:
    def __init__(
        self,
        name: str,
        slots: int,
        app_path: str,
        max_jobs_per_child: int = 1000,
        max_memory_mb: float | None = None,
        result_limit: int = DEFAULT_PAYLOAD_LIMIT,
        progress: ProgressSink | None = None,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self.name = name
        self.progress = progress  # where the children's progress reports go
        # Children call before/after_job themselves (their app has its hooks); the parent
        # calls the end hooks of an attempt it ends (a killed, dead or timed-out child).
        self.hooks = hooks
        self.slots = slots
        self.app_path = app_path
        self.max_jobs_per_child = max_jobs_per_child
        self.max_memory_mb = max_memory_mb
        self.result_limit = result_limit
        self._children: list[Child] = []
        self._waiting: collections.deque[ProcessItem] = collections.deque()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = _ctx.Pipe(duplex=False)
        self._monitor = threading.Thread(
            target=self._watch, name=f"sluicegate-{name}-children", daemon=True
        )
        self._on_start: StartCallback | None = None
        self._on_done: DoneCallback | None = None

    # ---- lifecycle ---------------------------------------------------------------
    def start(self, on_start: StartCallback, on_done: DoneCallback) -> None:
        self._on_start, self._on_done = on_start, on_done
        self._children = [self._spawn() for _ in range(self.slots)]
        self._monitor.start()

    def _spawn(self) -> Child:
        parent_end, child_end = _ctx.Pipe()
        process = _ctx.Process(
            target=child_main,
            args=(self.app_path, child_end, self.max_memory_mb, self.result_limit, self.name),
            name=f"sluicegate-{self.name}",
            daemon=True,
        )
        process.start()
        child_end.close()
        return Child(process, parent_end)

    def stop(self) -> None:
        self._stop.set()
        self._wake_w.send_bytes(b"x")
        with self._lock:
            children = list(self._children)
        for child in children:
            self._end(child)

    def _end(self, child: Child) -> None:
        with contextlib.suppress(OSError):
            child.conn.send_bytes(b"null")
        child.process.join(timeout=0.5 if child.item is None else 0)
        if child.process.is_alive():
            child.process.kill()
            child.process.join(timeout=2)
        child.conn.close()

    def ready_children(self) -> int:
        """Children that have imported the app and take work. A child turns ready and is
        offered the waiting work under one lock: once it counts here, it was offered
        whatever waited then. For tests and operators; never called by the worker."""
        with self._lock:
            return sum(1 for c in self._children if c.ready)

    # ---- work ------------------------------------------------------------------------
    def submit(self, item: ProcessItem) -> None:
        with self._lock:
            self._waiting.append(item)
            self._assign()
        self._wake_w.send_bytes(b"x")  # the monitor recomputes its deadline

    def _assign(self) -> None:
        """Hand waiting items to idle children (call with the lock held). An item can wait
        only for the moment between a child's death being reported and its replacement."""
        while self._waiting:
            child = next((c for c in self._children if c.ready and c.item is None), None)
            if child is None:
                return
            item = self._waiting.popleft()
            job = item.claimed.job
            request = {
                "id": job.id,
                "task": job.task,
                "queue": job.queue,
                "args": job.args,
                "kwargs": job.kwargs,
                "attempts": job.attempts,
                "max_attempts": job.max_attempts,
                "token": item.claimed.claim.token,
            }
            if job.headers:  # the trace context (sluicegate.otel), for the child's hooks
                request["headers"] = job.headers
            child.item = item
            child.deadline = time.monotonic() + item.timeout if item.timeout else None
            assert self._on_start is not None
            self._on_start(item)
            # If the child just died, its sentinel reports the death with this item.
            with contextlib.suppress(OSError):
                child.conn.send_bytes(dumps(request).encode())

    def _watch(self) -> None:
        # Children started from this thread die with it (PR_SET_PDEATHSIG follows the thread):
        # it must never end early, so a surprise is logged and the watch goes on.
        while not self._stop.is_set():
            try:
                self._watch_once()
            except Exception:
                log.exception("pool %s: child monitor error (continuing)", self.name)
                time.sleep(0.1)

    def _watch_once(self) -> None:
        with self._lock:
            conns = {c.conn: c for c in self._children}
            sentinels = {c.process.sentinel: c for c in self._children}
            deadlines = [c.deadline for c in self._children if c.deadline is not None]
        timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
        ready = multiprocessing.connection.wait([*conns, *sentinels, self._wake_r], timeout)
        if self._stop.is_set():
            return
        for handle in ready:
            if handle is self._wake_r:
                self._wake_r.recv_bytes()
            elif handle in conns:
                self._reply(conns[handle])
            elif handle in sentinels:
                child = sentinels[handle]
                child.process.join(timeout=1)  # the pipe closes a moment before the exit status
                self._replace(child, death_reason(child.process.exitcode))
        self._enforce_deadlines()

    def _reply(self, child: Child) -> None:
        try:
            reply = loads(child.conn.recv_bytes().decode())
        except (EOFError, OSError):
            child.process.join(timeout=1)
            self._replace(child, death_reason(child.process.exitcode))
            return
        if reply == "ready":
            with self._lock:
                child.ready = True
                self._assign()
            return
        if "progress" in reply:
            self._progress(child, reply["progress"])
            return
        child.jobs_done += 1
        over_memory = self.max_memory_mb and reply.get("rss", 0) > self.max_memory_mb * 0.8 * 2**20
        recycle = child.jobs_done >= self.max_jobs_per_child or bool(over_memory)
        with self._lock:
            item, child.item, child.deadline = child.item, None, None
            child.stopping = False  # finished before the kill: nothing to stop any more
            if recycle:  # out of the list first, so no new job is handed to it
                self._children.remove(child)
        if item is not None:
            self._finish(item, self._outcome(item, reply))
        if recycle:
            self._end(child)
            self._add_child()
        else:
            with self._lock:
                self._assign()

    def _progress(self, child: Child, note: list[Any]) -> None:
        """A child's progress report, passed on only while it names the job the child
        runs now (one sent as its job ended arrives after the outcome, and is dropped)."""
        job_id, token, fraction, message = note
        item = child.item
        if item is None or self.progress is None:
            return
        claim = item.claimed.claim
        if claim.job_id == job_id and claim.token == token:
            self.progress(claim, fraction, message)

    def _outcome(self, item: ProcessItem, reply: dict[str, Any]) -> Outcome:
        claim = item.claimed.claim
        event = Event(reply["event"])
        if event is Event.ACK:
            return Succeeded(claim, reply["result"])
        error = ErrorInfo.from_dict(reply["error"])
        if event is Event.RETRY:
            return Retried(claim, error, reply["retry_in"])
        return Buried(claim, error)

    def interrupt(self, claim: Claim) -> None:
        """Kill the child running ``claim``'s job and start a fresh one: done by the
        monitor thread, as every kill is (children die with the thread that started them)."""
        with self._lock:
            child = next(
                (c for c in self._children if c.item and c.item.claimed.claim == claim), None
            )
            if child is None:
                # Not handed to a child yet: it never starts (its report frees the slot).
                item = next((i for i in self._waiting if i.claimed.claim == claim), None)
                if item is not None:
                    self._waiting.remove(item)
            else:
                child.stopping, child.deadline = True, 0.0
        if child is None and item is not None:
            self._finish(item, failure_of(item, "stopped before it started", "JobCancelled"))
            return
        self._wake_w.send_bytes(b"x")

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        with self._lock:
            late = [c for c in self._children if c.deadline is not None and now >= c.deadline]
        for child in late:
            child.process.kill()
            child.process.join(timeout=2)
            if child.stopping:
                self._replace(child, "stopped: cancelled or its lease lost", "JobCancelled")
                continue
            timeout = child.item.timeout if child.item else 0
            self._replace(child, f"timed out after {timeout:g} s", "TimeoutError", timed_out=True)

    def _replace(
        self, child: Child, reason: str, kind: str = "ChildProcessError", timed_out: bool = False
    ) -> None:
        """Fail the child's job (if any) with ``kind``: ``reason``, then start a fresh child."""
        with self._lock:
            if child not in self._children:
                return
            self._children.remove(child)
        item = child.item
        if item is not None:
            job = item.claimed.job
            report = failure_of(item, reason, kind, timed_out)
            if self.hooks.ending:  # the child began the attempt; it ends here
                told = Stopped(item.claimed.claim, report) if child.stopping else report
                ended_elsewhere(self.hooks, item.claimed, told, self.name)
            self._finish(item, report)
            if not child.stopping:
                log.warning("pool %s: job %s (%s) failed: %s", self.name, job.id, job.task, reason)
        if child.process.is_alive():
            self._end(child)
        else:
            child.conn.close()
        self._add_child()

    def _add_child(self) -> None:
        """Bring the pool back to its configured size and give the newcomer waiting work."""
        if self._stop.is_set():
            return
        fresh = self._spawn()
        with self._lock:
            self._children.append(fresh)
            self._assign()

    def _finish(self, item: ProcessItem, report: Report) -> None:
        assert self._on_done is not None
        self._on_done(item, report, True)


class ProcessModel(ConcurrencyModel):
    name = "process"
    child_processes = True
    options = (
        ModelOption("max_jobs_per_child", int, 1, 1000, "recycle a child after this many jobs"),
        ModelOption(
            "max_memory_mb",
            float,
            1,
            None,
            "recycle a child above 80% of this; also its address-space limit",
        ),
    )

    @classmethod
    def refuses(cls, task: Task[Any, Any]) -> str | None:
        return needs_async_pool(task, cls.name) or needs_thread_pool(task)

    @classmethod
    def executor(
        cls, name: str, slots: int, options: Mapping[str, Any], context: PoolContext
    ) -> ProcessExecutor:
        return ProcessExecutor(
            name,
            slots,
            context.app_path(),
            max_jobs_per_child=options["max_jobs_per_child"],
            max_memory_mb=options["max_memory_mb"],
            result_limit=context.result_limit,
            progress=context.progress,
            hooks=context.hooks,
        )

    @classmethod
    def work_item(cls, task: Task[Any, Any], claimed: ClaimedJob) -> ProcessItem:
        return ProcessItem(claimed, task.options.retry, task.options.timeout)
