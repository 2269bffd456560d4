"""The broker interface: the only seam between sluicegate and storage.

Split by who calls it, so the hot path (claim, heartbeat, ack) stays apart from
the read side (stats, listings) and from operator actions. Every storage verb is
abstract: a broker that lacks one fails when it is instantiated, not later in a
background thread. Every broker passes one conformance suite
(``sluicegate.testing.conformance``); nothing above this seam knows which broker
it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import hashlib
import os
import socket
import stat
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..codec import loads
from ..errors import ConfigError, InvalidTransition, JobNotFound, LeaseLost
from ..job import (
    HELD,
    TERMINAL,
    Claim,
    ClaimedJob,
    ErrorInfo,
    Event,
    Happened,
    Job,
    JobId,
    JobSpec,
    JobState,
    Progress,
)
from ..limits import Bucket, Key, Limit
from ..names import check_name
from ..outcomes import Buried, Outcome, Retried, Succeeded


class ClaimBatch(list[ClaimedJob]):
    """What ``claim`` returns: the claimed jobs, and ``retry_in``: when jobs held back by
    a limit may start (seconds; None when no limit held one back), so the claimer looks
    again then rather than on its next poll. ``expired``: how many waiting jobs the claim
    cancelled because their expires_at had come (docs/lifecycle.md, "Expiry")."""

    retry_in: float | None = None
    expired: int = 0

    def __init__(
        self, jobs: Sequence[ClaimedJob] = (), retry_in: float | None = None, expired: int = 0
    ) -> None:
        super().__init__(jobs)
        self.retry_in = retry_in
        self.expired = expired


@dataclass(frozen=True, slots=True)
class LimitFigures:
    """The read side of limits, raw, in one snapshot: what ``limits list`` and
    ``jobs show`` are computed from (``sluicegate.limit_report``)."""

    limits: dict[str, Limit]
    overridden: frozenset[str]  # set by an operator: a worker's declaration does not change it
    held: list[tuple[str, str | None, str | None, int]]  # (name, partition, host, cost)
    waiting: list[tuple[str, int, float]]  # (needs as stored, ready jobs, oldest run_at)
    buckets: dict[Key, Bucket]
    now: float


@dataclass(frozen=True, slots=True)
class QueueStats:
    counts: dict[JobState, int]
    oldest_ready_age_s: float

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {state.value: self.counts.get(state, 0) for state in JobState}
        out["oldest_ready_age_s"] = round(self.oldest_ready_age_s, 3)
        return out


@dataclass(frozen=True, slots=True)
class Stats:
    queues: dict[str, QueueStats] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"queues": {name: q.to_dict() for name, q in sorted(self.queues.items())}}


@dataclass(frozen=True, slots=True)
class PausedQueue:
    """A queue no worker claims from until it is resumed; enqueue still works."""

    queue: str
    paused_by: str  # free text: user@host by default
    paused_at: float  # unix seconds, by the broker's clock

    def to_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "paused_by": self.paused_by, "paused_at": self.paused_at}


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """One periodic schedule's row in the broker: when it was first seen, and the last
    tick enqueued (epoch s, by the broker's clock) with that tick's job id."""

    name: str
    since: float
    last_tick: float | None
    last_job_id: JobId | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "since": self.since,
            "last_tick": self.last_tick,
            "last_job_id": self.last_job_id,
        }


@dataclass(frozen=True, slots=True)
class ScheduleStates:
    """``schedule_states``: every schedule's row, and the broker's clock when read (the one
    clock every worker's scheduler decides by)."""

    rows: dict[str, ScheduleState]
    now: float


BY_MAX = 200  # characters of ``by``: it is shown in tables, not a document


def who_asked(by: str | None, action: str = "pause") -> str:
    """Who asks for an operator action (a pause, a cancel), as the broker records it:
    ``by`` checked, or this process's user@host."""
    if by is None:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no name for this uid (a container)
            user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
        return f"{user}@{socket.gethostname()}"[:BY_MAX]
    if not isinstance(by, str) or not by.strip() or len(by) > BY_MAX:
        raise ConfigError(f"invalid {action} 'by' {by!r}: must be text of 1-{BY_MAX} characters")
    return by


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """Unfinished jobs of one queue, read through the partial indexes only (never the
    finished rows): what a worker samples every few seconds for its queues."""

    ready: int = 0  # due scheduled jobs count as ready: a claim would promote them first
    scheduled: int = 0
    claimed: int = 0
    running: int = 0
    oldest_ready_age_s: float = 0.0


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """What a worker process registers once: who it is and the pools it runs."""

    id: str  # unique per process start
    host: str
    pid: int
    version: str
    pools: tuple[dict[str, Any], ...]  # {"name", "queues": [...], "slots", "model"} per pool


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """One registry row as last published; times are the broker's clock (epoch s)."""

    info: WorkerInfo
    started_at: float
    last_seen: float
    stopped_at: float | None  # set by a graceful stop; None: running, or gone without saying
    held: int  # jobs it held at its last publish
    snapshot: dict[str, Any]  # its last metrics snapshot (sluicegate.metrics.schema); {} if none


@dataclass(frozen=True, slots=True)
class WorkerList:
    """``list_workers``: the rows and the broker's clock when they were read, so ages
    are computed on one clock, never by comparing two machines'."""

    now: float
    workers: list[WorkerRecord]


@dataclass(frozen=True, slots=True)
class Finished:
    """What ``finished_jobs`` found of the ids asked about: the finished jobs, and the ids
    no job has (never stored, or pruned). The others are unfinished."""

    jobs: dict[JobId, Job] = field(default_factory=dict)
    missing: frozenset[JobId] = frozenset()


@dataclass(frozen=True, slots=True)
class Recovery:
    """What one ``recover_expired`` pass did."""

    requeued: list[JobId] = field(default_factory=list)
    dead: list[JobId] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """One ``record`` call grouped by what it does to rows, by each outcome's ``event``:
    every broker writes one group at a time (SQL brokers: one statement per group)."""

    starts: list[Claim]  # started claims that no outcome of the same call finishes
    acks: list[Succeeded]
    burials: list[Buried]
    retries: list[Retried]
    claims: list[Claim]  # every claim written: starts, then outcomes in the order given

    @classmethod
    def of(cls, started: Sequence[Claim], outcomes: Sequence[Outcome]) -> RecordBatch:
        finishing = {o.claim for o in outcomes}
        starts = [c for c in started if c not in finishing]  # the outcome sets started_at
        acks: list[Succeeded] = []
        burials: list[Buried] = []
        retries: list[Retried] = []
        by_event: dict[Event, list[Any]] = {
            Event.ACK: acks,
            Event.BURY: burials,
            Event.RETRY: retries,
        }
        for outcome in outcomes:
            by_event[outcome.event].append(outcome)
        return cls(starts, acks, burials, retries, [*starts, *(o.claim for o in outcomes)])

    @property
    def only_starts(self) -> bool:
        return not (self.acks or self.burials or self.retries)

    def lost(self, matched: set[Claim]) -> list[Claim]:
        """The claims written that no write matched: their token no longer held the job."""
        return [c for c in self.claims if c not in matched]


VERBS = {Event.CANCEL: "cancel", Event.REVIVE: "retry"}  # operator actions, as users say them


def refusal(event: Event, job_id: int, state: str | None) -> JobNotFound | InvalidTransition:
    """The error for an operator action (cancel, retry) that changed nothing."""
    if state is None:
        return JobNotFound(f"job {job_id} not found")
    return InvalidTransition(f"cannot {VERBS[event]} job {job_id}: it is {state}")


def was_held(job: Job) -> bool:
    """A job just cancelled was claimed or running: some worker has work to stop."""
    last = job.history[-1] if job.history else {}
    return last.get("event") == Happened.CANCELLED.value and last.get("from") in {
        s.value for s in HELD
    }


def cancellable(state: JobState | str) -> JobState:
    """``cancel_matching``'s state, refused when finished jobs are in it."""
    state = JobState(state)
    if state in TERMINAL:
        raise InvalidTransition(f"cannot cancel jobs that are {state.value}: they have finished")
    return state


def one_per_key(picked: Iterable[tuple[JobId, str | None]]) -> list[JobId]:
    """Of dead jobs picked for a revival (id, unique key), the newest of each key and
    every one without: two jobs of one key may not both be unfinished."""
    newest: dict[str, JobId] = {}
    ids: list[JobId] = []
    for job_id, key in picked:
        if key is None:
            ids.append(job_id)
        elif newest.get(key, job_id) <= job_id:
            newest[key] = job_id
    return sorted([*ids, *newest.values()])


def unique_key_taken(job_id: int) -> InvalidTransition:
    return InvalidTransition(
        f"cannot retry job {job_id}: another unfinished job holds its unique key"
    )


def unknown_limit(name: str, known: Iterable[str]) -> ConfigError:
    names = ", ".join(sorted(known)) or "none"
    return ConfigError(
        f"no limit named {name!r} is registered (limits: {names}); "
        "workers register the limits their app declares when they start"
    )


def worker_record(
    info: WorkerInfo,
    started_at: float,
    last_seen: float,
    stopped_at: float | None,
    held: int,
    snapshot: str,
) -> WorkerRecord:
    """A registry row as read back, its snapshot decoded: JSON text that is not an object
    reads as {}, so one worker's bad row never breaks a listing."""
    try:
        decoded = loads(snapshot) if snapshot else {}
    except ValueError:
        decoded = {}
    return WorkerRecord(
        info=info,
        started_at=float(started_at),
        last_seen=float(last_seen),
        stopped_at=None if stopped_at is None else float(stopped_at),
        held=int(held),
        snapshot=decoded if isinstance(decoded, dict) else {},
    )


def stored_pools(pools: str) -> tuple[dict[str, Any], ...]:
    """A registry row's pools (JSON text) as WorkerInfo holds them; () if unreadable."""
    try:
        decoded = loads(pools)
    except ValueError:
        return ()
    if not isinstance(decoded, list):
        return ()
    return tuple(p for p in decoded if isinstance(p, dict))


DAY = 86_400.0
ARRIVALS_SCAN = 100_000  # rows one arrivals() call reads at most
# stats(): finished jobs not settled yet (counted by every call, see SQLBroker.stats) past
# which the call settles them, and how many one settling step of SQLite takes at most
# (each step holds the write lock). Read when called, so a test may lower them.
SETTLE_AT = 1000
SETTLE_STEP = 20_000
FORGET_WORKERS_AFTER = 3600.0  # s: registry rows of gone workers are deleted after this


@dataclass(frozen=True, slots=True)
class Retention:
    """How long finished jobs are kept, in seconds, before ``prune`` deletes them."""

    succeeded: float = 7 * DAY
    cancelled: float = 7 * DAY
    dead: float = 30 * DAY

    def by_state(self) -> dict[JobState, float]:
        return {
            JobState.SUCCEEDED: self.succeeded,
            JobState.CANCELLED: self.cancelled,
            JobState.DEAD: self.dead,
        }


WORKER_LOST = "WorkerLost"


def worker_lost_error(worker_id: str | None) -> ErrorInfo:
    return ErrorInfo(
        type=WORKER_LOST,
        message=f"worker lost: lease of worker {worker_id or '?'} expired without a heartbeat",
    )


def worker_died_error(worker_id: str) -> ErrorInfo:
    """The error ``recover_worker`` records: a worker on the same host saw the process go."""
    return ErrorInfo(
        type=WORKER_LOST, message=f"worker lost: worker {worker_id} died (its process is gone)"
    )


RUNTIME_DIR_ENV = "SLUICEGATE_RUNTIME_DIR"


def private_folder(storage: str) -> str:
    """``<$SLUICEGATE_RUNTIME_DIR or the temporary folder>/sluicegate-<uid>/<hash>``, one
    per ``storage`` (hashed: never a password in a path). The per-user folder is created
    here, readable by its owner only, and refused (PermissionError) if it is anyone
    else's or others may write in it: nobody else can put a lock file there."""
    root = os.environ.get(RUNTIME_DIR_ENV) or tempfile.gettempdir()
    mine = os.path.join(root, f"sluicegate-{os.getuid()}")
    os.makedirs(mine, 0o700, exist_ok=True)
    found = os.lstat(mine)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o022:
        raise PermissionError(f"{mine} is not a folder of this user's that only it may write in")
    return os.path.join(mine, hashlib.sha256(storage.encode()).hexdigest()[:16])


class Broker(ABC):
    """Durable job storage. Implementations: memory, sqlite and postgresql, registered by
    URL scheme in ``sluicegate.brokers.BROKERS``."""

    url: str
    migrations_applied: Sequence[int] = ()  # versions this handle applied (open or migrate())
    supports_transactions = False  # enqueue(connection=...) and transactional tasks
    cheap_empty_claim = False  # False: probe (read-only) before a claim that takes a write lock
    fresh_jobs = False  # enqueue's Jobs are the caller's alone (App binds them in place)

    # ---- producer side -------------------------------------------------
    @abstractmethod
    def enqueue(self, specs: Sequence[JobSpec], connection: Any = None) -> list[Job]:
        """Store jobs durably before returning, in one transaction.

        A spec whose ``unique_key`` matches an unfinished job returns that job instead.
        With ``connection`` (brokers that support transactions), the jobs are written in
        the caller's open transaction: visible and claimable only once it commits.
        """

    # ---- hot path ------------------------------------------------------
    @abstractmethod
    def claim(
        self,
        queues: Sequence[str],
        n: int,
        lease: float,
        worker_id: str,
        host: str = "",
        done: Sequence[Claim] = (),
    ) -> ClaimBatch:
        """Take up to ``n`` ready jobs of ``queues`` in (priority, run_at, id) order.

        Promotes due scheduled jobs first. Each claim charges an attempt and carries
        a fresh fencing token. A job that names limits is taken only when each has room
        (``sluicegate.limits.admit``), its tokens in the same transaction; one that cannot
        stays ready and blocks nothing behind it. ``host`` is the claimer's, for
        host-scoped limits ("" means this machine's). ``done``: the caller's own claims
        whose bodies have ended but whose outcomes are not written yet; their tokens
        count as free (the dependency is no longer used), so a worker reuses a unit the
        moment its job ends instead of after the outcome's commit.
        """

    # Whether ``claim_and_record`` can write a turn's record with its claim.
    records_with_claims = False

    def claim_and_record(
        self,
        queues: Sequence[str],
        n: int,
        lease: float,
        worker_id: str,
        started: Sequence[Claim],
        outcomes: Sequence[Outcome],
    ) -> tuple[ClaimBatch, list[Claim]] | None:
        """``claim`` and ``record`` in one transaction, where a broker can do both in one
        round trip: returns the claimed jobs and the lost claims of the record. None (the
        default, and wherever it does not apply): nothing was done; the caller claims,
        then records, as two calls. Raising: neither was done (or, for a lost connection,
        the record's fate is unknown, as ``record``'s is).

        The claimed jobs' ``retry_in`` of 0 asks the caller to claim again at once."""
        return None

    @abstractmethod
    def has_work(self, queues: Sequence[str]) -> bool:
        """Cheap read-only probe: is any job of ``queues`` ready or due? Takes no write lock."""

    @abstractmethod
    def next_due(self, queues: Sequence[str]) -> float | None:
        """Seconds until the earliest scheduled job of ``queues`` is due (0 if due), or None."""

    @abstractmethod
    def record(self, started: Sequence[Claim], outcomes: Sequence[Outcome]) -> list[Claim]:
        """Mark ``started`` claims running and apply ``outcomes`` in one transaction.

        Returns the claims whose token no longer matched; nothing changed for those.
        """

    @abstractmethod
    def heartbeat(
        self,
        claims: Sequence[Claim],
        lease: float,
        progress: Mapping[Claim, Progress] | None = None,
    ) -> list[Claim]:
        """Extend the leases of ``claims`` to now + lease; returns the claims that were lost.

        ``progress`` (job progress, part of the heartbeat): the latest value a running
        attempt reported for some of ``claims``, stored in the same transaction with the
        broker's clock as its ``at``, and only where the claim still holds the job (a
        fenced heartbeat writes no progress either). A claim not in it keeps its value."""

    @abstractmethod
    def release(self, claims: Sequence[Claim]) -> list[Claim]:
        """Hand held jobs back to ready without charging an attempt; returns lost claims."""

    @abstractmethod
    def recover_expired(self, limit: int = 1000) -> Recovery:
        """Return jobs whose lease expired to ready (attempt already charged) or to dead."""

    @abstractmethod
    def recover_worker(self, worker_id: str) -> Recovery:
        """Every job held (claimed or running) by ``worker_id``, whose process is known to be
        gone, back to ready (the attempt stays charged) or to dead when attempts are
        exhausted, with ``worker_died_error``, leases unexpired or not; one transaction.
        The dead worker's later calls on those claims are refused (fencing). Idempotent:
        safe from many workers at once. Wakes claimers when jobs became ready."""

    # ---- limits ----------------------------------------------------------
    @abstractmethod
    def register_limits(self, limits: Sequence[Limit]) -> None:
        """Store the limits a worker declares. A limit an operator set (``set_limit``)
        keeps its values; the declaration is remembered for ``reset_limit``."""

    @abstractmethod
    def set_limit(self, limit: Limit) -> None:
        """An operator's new values for a registered limit; every claim after the commit
        uses them. Raises ConfigError naming the known limits if it is not registered."""

    @abstractmethod
    def reset_limit(self, name: str) -> Limit:
        """Back to the values last declared by a worker; returns them."""

    @abstractmethod
    def limit_figures(self) -> LimitFigures:
        """Registered limits, tokens held, jobs waiting and buckets, in one snapshot."""

    # ---- worker registry and signals ---------------------------------------
    @abstractmethod
    def publish_worker(
        self, info: WorkerInfo, held: int, snapshot: str, stopped: bool = False
    ) -> None:
        """Upsert the worker's registry row: ``started_at`` on the first publish,
        ``last_seen`` now (broker clock), ``stopped_at`` now when ``stopped``; ``snapshot``
        is JSON text. Rows of workers gone (stopped or unseen) over an hour are deleted."""

    @abstractmethod
    def list_workers(self, gone_within: float = 3600.0) -> WorkerList:
        """Workers not stopped (live ones, and those gone without a word, until their rows
        are forgotten), and those stopped or last seen within ``gone_within`` s. Telling
        live from lost is the reader's (``sluicegate.metrics.status``): it knows each
        worker's heartbeat interval."""

    @abstractmethod
    def queue_depths(self, queues: Sequence[str] | None = None) -> dict[str, QueueDepth]:
        """Unfinished jobs per queue (all queues with any when ``queues`` is None), read
        through the partial indexes: the cost follows the backlog, not the table."""

    @abstractmethod
    def arrivals(self, after_id: int | None) -> tuple[int, dict[str, int]]:
        """Jobs stored since ``after_id`` (ids above it) per queue, and the id to pass
        next time. None: only that id (nothing counted). Reads at most ARRIVALS_SCAN rows
        per call; the returned id then marks where the next call goes on."""

    # ---- operator actions ----------------------------------------------
    @abstractmethod
    def cancel(self, job_id: int | str, *, by: str | None = None) -> Job:
        """Cancel a non-terminal job; ``by`` (who asks: ``who_asked``, user@host when None)
        goes in its history entry. A claimed or running job's outcome is refused from then on, and the worker
        running it hears of it (``subscribe_cancelled``) and stops it. Raises JobNotFound
        or InvalidTransition (and InvalidJobId for an id that is not an integer or its
        decimal text: ``job_id_of``)."""

    def shed(self, queue: str, priority: int, *, by: str) -> Job | None:
        """Cancel the ready job of ``queue`` that would start last (the highest priority
        number, then the latest run_at, then the highest id), if its priority number is
        at least ``priority`` (it is no more urgent than the job taking its place); the
        cancelled job, or None when there is none. Only a job still ready is cancelled,
        never one a worker claimed meanwhile (admission's ``shed`` policy)."""
        raise NotImplementedError(f"{type(self).__name__} cannot shed jobs")

    @abstractmethod
    def retry(self, job_id: int | str) -> Job:
        """Bring a dead or cancelled job back to ready with a fresh attempt budget."""

    @abstractmethod
    def retry_matching(
        self, *, queue: str | None = None, task: str | None = None, limit: int = 1000
    ) -> int:
        """Dead jobs of ``queue`` and ``task`` (None: any) back to ready with a fresh
        attempt budget, each as ``retry`` would: at most ``limit`` of them, in one short
        transaction; returns how many. Call it again until it returns 0.

        A dead job whose unique key an unfinished job holds stays dead (``retry`` refuses
        it), and of dead jobs sharing a key one comes back; neither is counted or in the
        way of the others. Safe against other callers, single retries and workers: no job
        comes back twice."""

    @abstractmethod
    def cancel_matching(
        self,
        *,
        state: JobState,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 1000,
        by: str | None = None,
    ) -> int:
        """Jobs in ``state`` of ``queue`` and ``task`` (None: any) cancelled, each as
        ``cancel`` would (a claimed or running job's later outcome is refused): at most
        ``limit`` of them, in one short transaction; returns how many. Call it again until
        it returns 0. A job that finishes meanwhile is not cancelled. A finished ``state``
        raises InvalidTransition."""

    @abstractmethod
    def migrate(self) -> list[int]:
        """Create or upgrade the storage schema; returns the migration versions applied."""

    # ---- retention -----------------------------------------------------
    def prune(self, retention: Retention, batch: int = 1000) -> int:
        """Delete finished jobs older than their state's retention; returns how many.

        One small batch per transaction, repeated until a batch comes back short. Safe
        from many workers at once: each batch takes only rows no other pruner holds.
        """
        deleted = 0
        for state, older_than in retention.by_state().items():
            while True:
                count = self.prune_batch(state, older_than, batch)
                deleted += count
                if count < batch:
                    break
        return deleted

    @abstractmethod
    def prune_batch(self, state: JobState, older_than: float, batch: int) -> int:
        """Delete at most ``batch`` jobs of ``state`` finished over ``older_than`` s ago;
        returns how many. Concurrent calls never count one row twice (SQLite: they
        serialise on the write lock; PostgreSQL: ``FOR UPDATE SKIP LOCKED``)."""

    # ---- transactional completion -----------------------------------------
    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        """A storage connection in an open transaction (brokers with supports_transactions)."""
        raise ConfigError(
            f"{type(self).__name__} does not support transactional tasks; use postgresql://"
        )

    def ack_on(self, connection: Any, claim: Claim, result_json: str) -> None:
        """Ack inside ``connection``'s transaction; LeaseLost (caller rolls back) if stale."""
        raise ConfigError(
            f"{type(self).__name__} does not support transactional tasks; use postgresql://"
        )

    # ---- read side -----------------------------------------------------
    @abstractmethod
    def get_job(self, job_id: int | str) -> Job | None:
        """The job, or None. An id may be given as its decimal text ("42"); any other
        text raises InvalidJobId (``job.job_id_of``), the same on every broker."""

    @abstractmethod
    def list_jobs(
        self,
        state: JobState | None = None,
        queue: str | None = None,
        limit: int = 100,
        *,
        task: str | None = None,
        unique_key: str | None = None,
        before_id: int | None = None,
    ) -> list[Job]:
        """At most ``limit`` jobs, newest (highest id) first, that match every filter given:
        ``state``, ``queue``, ``task``, ``unique_key`` (exact, in any state) and, for keyset
        paging, ids below ``before_id`` (the next page passes the last id shown). A SQL
        broker reads index ranges only, whatever the filter and however deep the page."""

    @abstractmethod
    def stats(self) -> Stats: ...

    # ---- wake-ups ------------------------------------------------------
    @abstractmethod
    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from any thread) soon after jobs may have become ready.

        Covers enqueues from this process at once, and from other processes where
        the broker can see them. Returns a function that unsubscribes.
        """

    @abstractmethod
    def wake_claimers(self) -> None:
        """Wake the claimers of the other workers on this broker (this process may be
        woken too): tokens of a limit came back (jobs that named it finished), so jobs
        held back may start. Workers also look again every 0.5 s; this makes the
        hand-over prompt."""

    def wakeups_healthy(self) -> bool:
        """True while ``subscribe`` sees every commit that makes work claimable (a live
        LISTEN connection, a doorbell): workers then need their safety poll only rarely."""
        return False

    @abstractmethod
    def close(self) -> None:
        """Release connections and threads."""

    def local_folder(self) -> str | None:
        """A folder where the processes of this machine that use this storage find each
        other, the same for all of them whatever their URL's options: workers keep their
        lock files there (``sluicegate.worker.lockdir``); whoever uses it first creates
        it. None: no other process can reach the storage. By default, a folder per URL
        in a folder private to the user (``private_folder``)."""
        return private_folder(self.url)

    # ---- single-claim conveniences over the batched calls ----------------
    def ack(self, claim: Claim, result_json: str = "null") -> None:
        if self.record((), [Succeeded(claim, result_json)]):
            raise LeaseLost(claim.job_id, claim.token)

    def fail(self, claim: Claim, error: ErrorInfo, retry_in: float | None) -> None:
        """Fail one attempt: retried in ``retry_in`` seconds, or dead when it is None."""
        outcome = Buried(claim, error) if retry_in is None else Retried(claim, error, retry_in)
        if self.record((), [outcome]):
            raise LeaseLost(claim.job_id, claim.token)

    def start(self, claim: Claim) -> None:
        if self.record([claim], ()):
            raise LeaseLost(claim.job_id, claim.token)

    def heartbeat_one(self, claim: Claim, lease: float) -> None:
        if self.heartbeat([claim], lease):
            raise LeaseLost(claim.job_id, claim.token)

    def release_one(self, claim: Claim) -> None:
        if self.release([claim]):
            raise LeaseLost(claim.job_id, claim.token)

    # ---- paused queues ----
    def pause_queue(self, queue: str, by: str | None = None) -> bool:
        """Stop every worker claiming from ``queue`` (within about a second; running jobs
        finish). Any valid name may be paused, used or not. True: this call paused it;
        False: it was paused already (the first pause, and its ``by``, stay)."""
        return self._pause_queue(check_name("queue", queue), who_asked(by))

    def resume_queue(self, queue: str) -> bool:
        """Let workers claim from ``queue`` again. False: it was not paused."""
        return self._resume_queue(check_name("queue", queue))

    @abstractmethod
    def paused_queues(self) -> dict[str, PausedQueue]:
        """Every paused queue, by name: who paused it and when. A tiny read: workers
        call it about once a second."""

    @abstractmethod
    def _pause_queue(self, queue: str, by: str) -> bool:
        """Store the pause (name and ``by`` checked) and wake the workers."""

    @abstractmethod
    def _resume_queue(self, queue: str) -> bool:
        """Remove the pause (name checked) and wake the workers."""

    # ---- asyncio producers ----
    # Producers in an event loop (``app.enqueue_async``). Never block the loop: these
    # defaults run the sync call in a worker thread; a broker with asyncio I/O of its own
    # (postgresql) or none at all (memory) overrides them.
    async def enqueue_async(self, specs: Sequence[JobSpec], connection: Any = None) -> list[Job]:
        """``enqueue``, awaited: the same storage, semantics and errors. With ``connection``
        (brokers that support transactions), the caller's asyncio connection."""
        return await asyncio.to_thread(self.enqueue, specs, connection)

    async def get_job_async(self, job_id: int | str) -> Job | None:
        """``get_job``, awaited."""
        return await asyncio.to_thread(self.get_job, job_id)

    async def aclose(self) -> None:
        """``close`` from an event loop: also closes what the asyncio calls opened in it."""
        await asyncio.to_thread(self.close)

    # ---- waiting for results (job.wait; sluicegate.waiting) ------------------------------
    @abstractmethod
    def finished_jobs(self, ids: Sequence[JobId]) -> Finished:
        """Of ``ids``, the jobs that have finished and the ids no job has, in ONE query:
        what a process's waiting hub reads on each wake-up for all its waiters at once."""

    @abstractmethod
    def subscribe_cancelled(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from any thread) soon after a claimed or running job may have
        been cancelled: from this process at once, from others where the broker can see
        them (PostgreSQL: NOTIFY on the schema's "cancelled" channel; SQLite: a doorbell).
        No payload: a worker renews its leases at once, and the claims found lost are
        the cancelled ones it holds. Returns a function that unsubscribes."""

    @abstractmethod
    def subscribe_finished(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from any thread) soon after jobs may have finished (ack,
        dead, cancel, recovery to dead): from this process at once, from others where the
        broker can see them (PostgreSQL: NOTIFY on the schema's "finished" channel, one
        per transaction that ends jobs; SQLite: a doorbell). Returns a function that
        unsubscribes. Waiters also look every second or so: this makes the wake prompt."""

    # ---- periodic schedules (issue 15; sluicegate.schedules, docs/schedules.md) ----
    @abstractmethod
    def schedule_states(self) -> ScheduleStates:
        """Every schedule's row and the broker's clock, in one read."""

    @abstractmethod
    def register_schedules(self, names: Sequence[str]) -> None:
        """Add a row for each schedule not yet known, first seen now (broker clock);
        known ones are left as they are."""

    @abstractmethod
    def enqueue_tick(self, name: str, tick: float, spec: JobSpec) -> Job | None:
        """Enqueue ``spec`` as schedule ``name``'s ``tick``, only if the schedule's last
        tick is earlier (or none): a compare-and-set of the last tick in the transaction
        that stores the job, so each tick is enqueued once across the cluster, finished
        or not. None: another process enqueued this tick or a later one first."""
