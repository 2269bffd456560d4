"""In-process broker for tests and eager use. Same semantics as the durable brokers,
proven by the same conformance suite; nothing survives the process."""

from __future__ import annotations

import dataclasses
import itertools
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..codec import dumps, loads
from ..errors import ConfigError
from ..job import (
    EXPIRED,
    HELD,
    UNFINISHED,
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
    appended,
    apply,
    can_apply,
    expired,
    history_entry,
    history_error,
    initial_state,
    job_id_of,
    stored_headers,
)
from ..limits import (
    Bucket,
    Candidate,
    Key,
    Limit,
    admit,
    decode_needs,
    encode_needs,
    in_use_of,
    local_host,
)
from ..outcomes import Buried, Outcome, Retried, Succeeded, failed
from . import base
from .base import (
    FORGET_WORKERS_AFTER,
    Broker,
    ClaimBatch,
    Finished,
    LimitFigures,
    PausedQueue,
    QueueDepth,
    QueueStats,
    RecordBatch,
    Recovery,
    ScheduleState,
    ScheduleStates,
    Stats,
    WorkerInfo,
    WorkerList,
    cancellable,
    one_per_key,
    refusal,
    stored_pools,
    unique_key_taken,
    unknown_limit,
    who_asked,
    worker_died_error,
    worker_lost_error,
    worker_record,
)
from .listing import Listing
from .wakeups import Subscribers


class MemoryBroker(Broker):
    def __init__(self, url: str = "memory://", clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self._clock = clock
        self._jobs: dict[JobId, Job] = {}
        self._tokens: dict[JobId, int] = {}
        self._ids = itertools.count(1)
        self._hosts: dict[JobId, str] = {}  # the claimer's host, for host-scoped limits
        self._limits: dict[str, Limit] = {}
        self._declared: dict[str, Limit] = {}
        self._overridden: set[str] = set()
        self._buckets: dict[Key, Bucket] = {}
        # registry rows by worker id, their fields as the SQL brokers store them
        self._workers: dict[str, dict[str, Any]] = {}
        self._lock = threading.RLock()
        self._subscribers = Subscribers()
        self._paused: dict[str, PausedQueue] = {}
        self._schedules: dict[str, ScheduleState] = {}  # periodic schedules, by name
        self._waiters = Subscribers()  # waiters (subscribe_finished)
        self._cancels = Subscribers()  # workers told of cancelled running jobs

    # ---- helpers --------------------------------------------------------------
    @staticmethod
    def _noted(job: Job, now: float, happened: Happened, **fields: Any) -> list[dict[str, Any]]:
        """``job``'s history with the entry of a transition off the happy path, as the SQL
        brokers' fragment_history writes it: the attempt is the one before the change."""
        return appended(job.history, history_entry(now, happened, job.attempts, **fields))

    def _set(self, job: Job, event: Event, **changes: object) -> Job:
        updated = dataclasses.replace(job, state=apply(job.state, event), **changes)  # type: ignore[arg-type]
        self._jobs[job.id] = updated
        return updated

    def _expire(self, now: float) -> int:
        """Waiting jobs whose expires_at has come end cancelled, reason "expired" (every
        claim's first step, as on the SQL brokers)."""
        gone = 0
        for job in list(self._jobs.values()):
            if job.state in (JobState.SCHEDULED, JobState.READY) and expired(job.expires_at, now):
                self._set(
                    job,
                    Event.CANCEL,
                    finished_at=now,
                    lease_expires_at=None,
                    history=self._noted(
                        job,
                        now,
                        Happened.CANCELLED,
                        reason=EXPIRED,
                        **{"from": job.state.value},
                    ),
                )
                gone += 1
        return gone

    def _promote(self, now: float) -> None:
        for job in list(self._jobs.values()):
            if job.state is JobState.SCHEDULED and job.run_at <= now:
                self._set(job, Event.PROMOTE)

    def _holds(self, claim: Claim, event: Event) -> Job | None:
        job = self._jobs.get(claim.job_id)
        if (
            job is None
            or self._tokens.get(job.id) != claim.token
            or not can_apply(job.state, event)
        ):
            return None
        return job

    def migrate(self) -> list[int]:
        return []  # nothing to create: the jobs live in this object

    def close(self) -> None:
        self._subscribers.stop()
        self._waiters.stop()
        self._cancels.stop()

    # ---- producer side ----------------------------------------------------------
    def enqueue(self, specs: Sequence[JobSpec], connection: Any = None) -> list[Job]:
        if connection is not None:
            raise ConfigError("enqueue(connection=...) needs the postgresql:// broker")
        out = []
        with self._lock:
            now = self._clock()
            for spec in specs:
                if spec.unique_key is not None:
                    existing = next(
                        (
                            j
                            for j in self._jobs.values()
                            if j.unique_key == spec.unique_key and j.state in UNFINISHED
                        ),
                        None,
                    )
                    if existing is not None:
                        out.append(existing)
                        continue
                run_at = spec.run_at if spec.run_at is not None else now + spec.delay
                job = Job(
                    id=JobId(next(self._ids)),
                    task=spec.task,
                    queue=spec.queue,
                    state=initial_state(run_at, now),
                    args=loads(spec.args_json),
                    kwargs=loads(spec.kwargs_json),
                    priority=spec.priority,
                    max_attempts=spec.max_attempts,
                    run_at=run_at,
                    enqueued_at=now,
                    unique_key=spec.unique_key,
                    limits=decode_needs(spec.limits),
                    headers=stored_headers(spec.headers),
                    expires_at=spec.expiry(now),
                )
                self._jobs[job.id] = job
                out.append(job)
        self._subscribers.notify_local()
        return out

    # ---- hot path -------------------------------------------------------------
    def claim(
        self,
        queues: Sequence[str],
        n: int,
        lease: float,
        worker_id: str,
        host: str = "",
        done: Sequence[Claim] = (),
    ) -> ClaimBatch:
        if n <= 0:
            return ClaimBatch()
        token = secrets.randbits(62)
        host = host or local_host()
        with self._lock:
            now = self._clock()
            gone = self._expire(now)
            self._promote(now)
            wanted = set(queues)
            ready = sorted(
                (j for j in self._jobs.values() if j.state is JobState.READY and j.queue in wanted),
                key=lambda j: (j.priority, j.run_at, j.id),
            )
            admission = admit(
                (Candidate(j.id, j.limits) for j in ready),
                n,
                self._limits,
                in_use_of(self._held(done), host, self._limits),
                self._buckets,
                now,
                host,
            )
            self._buckets.update(admission.buckets)
            out = []
            for job_id in admission.ids:
                job = self._jobs[JobId(job_id)]
                claimed = self._set(
                    job,
                    Event.CLAIM,
                    attempts=job.attempts + 1,
                    lease_expires_at=now + lease,
                    worker_id=worker_id,
                )
                self._tokens[job.id] = token
                self._hosts[job.id] = host
                out.append(ClaimedJob(Claim(job.id, token), claimed))
        if gone:
            self._waiters.notify_local()
        return ClaimBatch(out, admission.retry_in, gone)

    def _held(self, done: Sequence[Claim] = ()) -> list[tuple[str, str | None, str | None, int]]:
        """(limit, partition, holder host, cost) of every need of a claimed or running job,
        but those of ``done`` (bodies ended): tokens in use derive from job states, so a
        finished job's come back with it."""
        ended = {(c.job_id, c.token) for c in done}
        return [
            (name, part, self._hosts.get(j.id), cost)
            for j in self._jobs.values()
            if j.limits and j.state in HELD and (j.id, self._tokens.get(j.id)) not in ended
            for name, part, cost in j.limits
        ]

    # ---- limits ----------------------------------------------------------------
    def register_limits(self, limits: Sequence[Limit]) -> None:
        with self._lock:
            for limit in limits:
                self._declared[limit.name] = limit
                current = self._limits.get(limit.name)
                if current is not None and limit.name in self._overridden:
                    limit = dataclasses.replace(
                        limit,
                        concurrency=current.concurrency,
                        rate=current.rate,
                        burst=current.burst,
                    )
                self._limits[limit.name] = limit
        self._subscribers.notify_local()

    def set_limit(self, limit: Limit) -> None:
        with self._lock:
            if limit.name not in self._limits:
                raise unknown_limit(limit.name, self._limits)
            self._limits[limit.name] = limit
            self._overridden.add(limit.name)
        self._subscribers.notify_local()

    def reset_limit(self, name: str) -> Limit:
        with self._lock:
            if name not in self._declared:
                raise unknown_limit(name, self._limits)
            self._limits[name] = self._declared[name]
            self._overridden.discard(name)
        self._subscribers.notify_local()
        return self._declared[name]

    def limit_figures(self) -> LimitFigures:
        with self._lock:
            waiting: dict[str, list[float]] = {}
            for j in self._jobs.values():
                if j.limits and j.state is JobState.READY:
                    waiting.setdefault(encode_needs(j.limits) or "", []).append(j.run_at)
            return LimitFigures(
                limits=dict(self._limits),
                overridden=frozenset(self._overridden),
                held=self._held(),
                waiting=[(k, len(v), min(v)) for k, v in waiting.items()],
                buckets=dict(self._buckets),
                now=self._clock(),
            )

    # ---- worker registry and signals ------------------------------------------------
    def publish_worker(
        self, info: WorkerInfo, held: int, snapshot: str, stopped: bool = False
    ) -> None:
        with self._lock:
            now = self._clock()
            cutoff = now - FORGET_WORKERS_AFTER
            for worker_id, row in list(self._workers.items()):
                gone = row["stopped_at"] if row["stopped_at"] is not None else row["last_seen"]
                if gone < cutoff:
                    del self._workers[worker_id]
            row = self._workers.setdefault(info.id, {"started_at": now, "stopped_at": None})
            row.update(
                host=info.host,
                pid=info.pid,
                version=info.version,
                pools=dumps(list(info.pools)),
                last_seen=now,
                held=held,
                snapshot=snapshot,
            )
            if stopped:
                row["stopped_at"] = now

    def list_workers(self, gone_within: float = 3600.0) -> WorkerList:
        with self._lock:
            now = self._clock()
            rows = [
                (worker_id, dict(row))
                for worker_id, row in self._workers.items()
                if row["stopped_at"] is None
                or row["stopped_at"] >= now - gone_within
                or row["last_seen"] >= now - gone_within
            ]
        workers = [
            worker_record(
                WorkerInfo(worker_id, r["host"], r["pid"], r["version"], stored_pools(r["pools"])),
                r["started_at"],
                r["last_seen"],
                r["stopped_at"],
                r["held"],
                r["snapshot"],
            )
            for worker_id, r in rows
        ]
        workers.sort(key=lambda w: (w.info.host, w.started_at, w.info.id))
        return WorkerList(now, workers)

    def queue_depths(self, queues: Sequence[str] | None = None) -> dict[str, QueueDepth]:
        wanted = None if queues is None else set(queues)
        with self._lock:
            now = self._clock()
            counts: dict[str, dict[str, int]] = {q: {} for q in wanted or ()}
            oldest: dict[str, float] = {}
            for job in self._jobs.values():
                if job.state not in UNFINISHED or (wanted is not None and job.queue not in wanted):
                    continue
                due = job.state is JobState.SCHEDULED and job.run_at <= now
                shown = JobState.READY if due else job.state
                per = counts.setdefault(job.queue, {})
                per[shown.value] = per.get(shown.value, 0) + 1
                if shown is JobState.READY:
                    oldest[job.queue] = min(oldest.get(job.queue, job.run_at), job.run_at)
        return {
            q: QueueDepth(**c, oldest_ready_age_s=max(0.0, now - oldest[q]) if q in oldest else 0.0)
            for q, c in counts.items()
        }

    def arrivals(self, after_id: int | None) -> tuple[int, dict[str, int]]:
        with self._lock:
            if after_id is None:
                return max(self._jobs, default=0), {}
            new = sorted(i for i in self._jobs if i > after_id)[: base.ARRIVALS_SCAN]
            counts: dict[str, int] = {}
            for job_id in new:
                queue = self._jobs[job_id].queue
                counts[queue] = counts.get(queue, 0) + 1
        return (new[-1] if new else after_id), counts

    def has_work(self, queues: Sequence[str]) -> bool:
        with self._lock:
            now = self._clock()
            return any(
                j.queue in queues
                and (
                    j.state is JobState.READY or (j.state is JobState.SCHEDULED and j.run_at <= now)
                )
                for j in self._jobs.values()
            )

    def next_due(self, queues: Sequence[str]) -> float | None:
        with self._lock:
            times = [
                j.run_at
                for j in self._jobs.values()
                if j.state is JobState.SCHEDULED and j.queue in queues
            ]
            return max(0.0, min(times) - self._clock()) if times else None

    def record(self, started: Sequence[Claim], outcomes: Sequence[Outcome]) -> list[Claim]:
        batch = RecordBatch.of(started, outcomes)
        done: set[Claim] = set()
        with self._lock:
            now = self._clock()
            for claim in batch.starts:
                if job := self._holds(claim, Event.START):
                    self._set(job, Event.START, started_at=now)
                    done.add(claim)
            for ack in batch.acks:
                if self._finish(ack, now, result=loads(ack.result_json), finished_at=now):
                    done.add(ack.claim)
            for buried in batch.burials:
                if self._finish(buried, now, last_error=buried.error, finished_at=now):
                    done.add(buried.claim)
            for retried in batch.retries:
                if self._finish(
                    retried, now, last_error=retried.error, run_at=now + retried.retry_in
                ):
                    done.add(retried.claim)
        if batch.retries:
            self._subscribers.notify_local()
        if batch.acks or batch.burials:
            self._waiters.notify_local()
        return batch.lost(done)

    def _finish(self, outcome: Outcome, now: float, **changes: object) -> bool:
        """Apply the outcome's event if its claim still holds the job. A job finished without
        a separate start began its body now: an earlier attempt's started_at must not stand."""
        job = self._holds(outcome.claim, outcome.event)
        if job is None:
            return False
        if not isinstance(outcome, Succeeded):
            fate = {"retry_at": now + outcome.retry_in} if isinstance(outcome, Retried) else {}
            changes["history"] = self._noted(
                job,
                now,
                Happened(failed(outcome)),
                worker=job.worker_id,
                error=history_error(outcome.error),
                dead=True if isinstance(outcome, Buried) else None,
                **fate,
            )
        started_at = job.started_at if job.state is JobState.RUNNING else now
        self._set(job, outcome.event, started_at=started_at, lease_expires_at=None, **changes)
        return True

    def heartbeat(
        self,
        claims: Sequence[Claim],
        lease: float,
        progress: Mapping[Claim, Progress] | None = None,
    ) -> list[Claim]:
        lost = []
        progress = progress or {}
        with self._lock:
            now = self._clock()
            for claim in claims:
                job = self._jobs.get(claim.job_id)
                if job is None or self._tokens.get(job.id) != claim.token or job.state not in HELD:
                    lost.append(claim)
                    continue
                reported = progress.get(claim)
                if reported is not None:  # job progress: stored with the broker's clock
                    reported = Progress(reported.fraction, reported.message, now)
                self._jobs[job.id] = dataclasses.replace(
                    job, lease_expires_at=now + lease, progress=reported or job.progress
                )
        return lost

    def release(self, claims: Sequence[Claim]) -> list[Claim]:
        lost = []
        with self._lock:
            now = self._clock()
            for claim in claims:
                job = self._holds(claim, Event.RELEASE)
                if job is None:
                    lost.append(claim)
                else:
                    self._set(
                        job,
                        Event.RELEASE,
                        attempts=max(job.attempts - 1, 0),
                        lease_expires_at=None,
                        worker_id=None,
                        history=self._noted(job, now, Happened.RELEASED, worker=job.worker_id),
                    )
        if len(lost) < len(claims):
            self._subscribers.notify_local()
        return lost

    def recover_expired(self, limit: int = 1000) -> Recovery:
        with self._lock:
            now = self._clock()
            expired = sorted(
                (
                    j
                    for j in self._jobs.values()
                    if j.state in HELD
                    and j.lease_expires_at is not None
                    and j.lease_expires_at < now
                ),
                key=lambda j: (j.lease_expires_at or 0.0, j.id),  # oldest expiry first
            )[:limit]
            result = self._recover(
                expired, now, Happened.RECOVERED, lambda job: worker_lost_error(job.worker_id)
            )
        if result.requeued:
            self._subscribers.notify_local()
        if result.dead:
            self._waiters.notify_local()
        return result

    def recover_worker(self, worker_id: str) -> Recovery:
        error = worker_died_error(worker_id)
        with self._lock:
            held = sorted(
                (j for j in self._jobs.values() if j.state in HELD and j.worker_id == worker_id),
                key=lambda j: j.id,
            )
            result = self._recover(held, self._clock(), Happened.WORKER_LOST, lambda job: error)
        if result.requeued:
            self._subscribers.notify_local()
        if result.dead:
            self._waiters.notify_local()
        return result

    def _recover(
        self,
        jobs: list[Job],
        now: float,
        happened: Happened,
        error_of: Callable[[Job], ErrorInfo],
    ) -> Recovery:
        """Held jobs back to ready (the attempt stays charged), or dead with no attempts left."""
        result = Recovery()
        for job in jobs:
            dead = job.attempts >= job.max_attempts
            history = self._noted(job, now, happened, worker=job.worker_id, dead=dead or None)
            if dead:
                self._set(
                    job,
                    Event.RECOVER_DEAD,
                    last_error=error_of(job),
                    finished_at=now,
                    lease_expires_at=None,
                    history=history,
                )
                result.dead.append(job.id)
            else:
                self._set(
                    job,
                    Event.RECOVER,
                    last_error=error_of(job),
                    lease_expires_at=None,
                    worker_id=None,
                    history=history,
                )
                result.requeued.append(job.id)
        return Recovery(requeued=sorted(result.requeued), dead=sorted(result.dead))

    # ---- operator actions -------------------------------------------------------
    def _get(self, job_id: int, event: Event) -> Job:
        job = self._jobs.get(JobId(job_id))
        if job is None or not can_apply(job.state, event):
            raise refusal(event, job_id, job.state.value if job else None)
        return job

    def cancel(self, job_id: int | str, *, by: str | None = None) -> Job:
        job_id = job_id_of(job_id)
        by = who_asked(by, "cancel")
        with self._lock:
            job = self._get(job_id, Event.CANCEL)
            held = job.state in HELD
            cancelled = self._cancel(job, self._clock(), by)
        self._waiters.notify_local()
        if held:
            self._cancels.notify_local()
        return cancelled

    def shed(self, queue: str, priority: int, *, by: str) -> Job | None:
        with self._lock:
            ready = [
                j
                for j in self._jobs.values()
                if j.state is JobState.READY and j.queue == queue and j.priority >= priority
            ]
            if not ready:
                return None
            victim = max(ready, key=lambda j: (j.priority, j.run_at, j.id))
            cancelled = self._cancel(victim, self._clock(), by)
        self._waiters.notify_local()
        return cancelled

    def _cancel(self, job: Job, now: float, by: str | None) -> Job:
        held_by = job.worker_id if job.state in HELD else None
        return self._set(
            job,
            Event.CANCEL,
            finished_at=now,
            lease_expires_at=None,
            history=self._noted(
                job, now, Happened.CANCELLED, worker=held_by, by=by, **{"from": job.state.value}
            ),
        )

    def subscribe_cancelled(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._cancels.add(callback)

    def retry(self, job_id: int | str) -> Job:
        job_id = job_id_of(job_id)
        with self._lock:
            job = self._get(job_id, Event.REVIVE)
            if job.unique_key is not None and any(
                j.unique_key == job.unique_key and j.state in UNFINISHED
                for j in self._jobs.values()
            ):
                raise unique_key_taken(job_id)
            revived = self._revive(job)
        self._subscribers.notify_local()
        return revived

    def _revive(self, job: Job) -> Job:
        now = self._clock()
        return self._set(
            job,
            Event.REVIVE,
            attempts=0,
            run_at=now,
            finished_at=None,
            lease_expires_at=None,
            worker_id=None,
            expires_at=None,  # an operator's retry runs it: an expiry it had is dropped
            history=self._noted(job, now, Happened.RETRIED, **{"from": job.state.value}),
        )

    def retry_matching(
        self, *, queue: str | None = None, task: str | None = None, limit: int = 1000
    ) -> int:
        dead = Listing(JobState.DEAD, queue, task)
        with self._lock:
            taken = {j.unique_key for j in self._jobs.values() if j.state in UNFINISHED}
            picked = [
                (j.id, j.unique_key)
                for j in self._jobs.values()
                if dead.matches(j) and (j.unique_key is None or j.unique_key not in taken)
            ][: max(limit, 0)]
            revived = one_per_key(picked)
            for job_id in revived:
                self._revive(self._jobs[job_id])
        if revived:
            self._subscribers.notify_local()
        return len(revived)

    def cancel_matching(
        self,
        *,
        state: JobState,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 1000,
        by: str | None = None,
    ) -> int:
        matching = Listing(cancellable(state), queue, task)
        by = who_asked(by, "cancel")
        with self._lock:
            now = self._clock()
            picked = [j for j in self._jobs.values() if matching.matches(j)][: max(limit, 0)]
            for job in picked:
                self._cancel(job, now, by)
        if picked:
            self._waiters.notify_local()
            if matching.state in HELD:
                self._cancels.notify_local()
        return len(picked)

    # ---- retention -----------------------------------------------------------------
    def prune_batch(self, state: JobState, older_than: float, batch: int) -> int:
        with self._lock:
            cutoff = self._clock() - older_than
            doomed = [
                j.id
                for j in self._jobs.values()
                if j.state is state and j.finished_at is not None and j.finished_at < cutoff
            ][:batch]
            for job_id in doomed:
                del self._jobs[job_id]
                self._tokens.pop(job_id, None)
        return len(doomed)

    # ---- read side --------------------------------------------------------------
    def get_job(self, job_id: int | str) -> Job | None:
        job_id = job_id_of(job_id)
        with self._lock:
            return self._jobs.get(job_id)

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
        listing = Listing.of(state, queue, limit, task, unique_key, before_id)
        with self._lock:
            jobs = list(self._jobs.values())
        return listing.page(jobs)

    def stats(self) -> Stats:
        with self._lock:
            now = self._clock()
            counts: dict[str, dict[JobState, int]] = {}
            oldest: dict[str, float] = {}
            for job in self._jobs.values():
                due = job.state is JobState.SCHEDULED and job.run_at <= now
                shown = JobState.READY if due else job.state
                per = counts.setdefault(job.queue, {})
                per[shown] = per.get(shown, 0) + 1
                if shown is JobState.READY:
                    oldest[job.queue] = min(oldest.get(job.queue, job.run_at), job.run_at)
        return Stats(
            {
                q: QueueStats(c, max(0.0, now - oldest[q]) if q in oldest else 0.0)
                for q, c in counts.items()
            }
        )

    def wake_claimers(self) -> None:
        self._subscribers.notify_local()

    def wakeups_healthy(self) -> bool:
        return True  # one process: every write notifies its subscribers at once

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._subscribers.add(callback)

    def local_folder(self) -> str | None:
        return None  # the jobs live in this object: no other process can reach them

    # ---- paused queues ----
    def paused_queues(self) -> dict[str, PausedQueue]:
        with self._lock:
            return dict(sorted(self._paused.items()))

    def _pause_queue(self, queue: str, by: str) -> bool:
        with self._lock:
            paused = queue not in self._paused
            if paused:
                self._paused[queue] = PausedQueue(queue, by, self._clock())
        self._subscribers.notify_local()
        return paused

    def _resume_queue(self, queue: str) -> bool:
        with self._lock:
            resumed = self._paused.pop(queue, None) is not None
        self._subscribers.notify_local()
        return resumed

    # ---- asyncio producers ----
    # Nothing to wait for: the jobs are in this object, behind a lock held for microseconds.
    async def enqueue_async(self, specs: Sequence[JobSpec], connection: Any = None) -> list[Job]:
        return self.enqueue(specs, connection)

    async def get_job_async(self, job_id: int | str) -> Job | None:
        return self.get_job(job_id)

    async def aclose(self) -> None:
        self.close()

    # ---- waiting for results (job.wait) -------------------------------------------
    def finished_jobs(self, ids: Sequence[JobId]) -> Finished:
        with self._lock:
            found = {i: self._jobs.get(i) for i in ids}
        return Finished(
            {i: j for i, j in found.items() if j is not None and j.finished},
            frozenset(i for i, j in found.items() if j is None),
        )

    def subscribe_finished(self, callback: Callable[[], None]) -> Callable[[], None]:
        return self._waiters.add(callback)

    # ---- periodic schedules (issue 15) ----
    def schedule_states(self) -> ScheduleStates:
        with self._lock:
            return ScheduleStates(dict(self._schedules), self._clock())

    def register_schedules(self, names: Sequence[str]) -> None:
        with self._lock:
            now = self._clock()
            for name in names:
                self._schedules.setdefault(name, ScheduleState(name, now, None, None))

    def enqueue_tick(self, name: str, tick: float, spec: JobSpec) -> Job | None:
        with self._lock:  # the compare-and-set and the job under one lock
            known = self._schedules.get(name)
            if known is not None and known.last_tick is not None and known.last_tick >= tick:
                return None
            job = self.enqueue([spec])[0]
            since = self._clock() if known is None else known.since
            self._schedules[name] = ScheduleState(name, since, tick, job.id)
            return job
