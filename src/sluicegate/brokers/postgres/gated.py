"""Limits on PostgreSQL: the gated claim (jobs that name limits), and the limit verbs.

The plain claim takes only jobs that name no limit, in one statement, and none when a
wanted queue has jobs that do ("gated"). The broker then claims through ``claim_gated``
(see ``PostgresBroker.claim``) until one finds no such job left: one transaction of two
round trips (pipeline mode), which takes jobs of both kinds in one claim order:

1. BEGIN; advisory locks on the limit names, in key order; promote due jobs; read the
   candidates, the tokens held, the rate buckets, the limits and the clock (one snapshot,
   taken after the locks).
2. (``sluicegate.limits.admit`` in Python) claim the admitted jobs; write the buckets back;
   COMMIT.

Which names to lock is known only once the candidates are read: the names of this queue
set's previous gated claim are locked first; if the candidates need another, the
transaction rolls back and runs again with every name, locks taken in order again (one
more round trip, in the same pipeline). Never a lock taken out of order, so no deadlock.
Claimers of the same limits admit one at a time, each after the previous one committed:
the tokens held are never read stale.

When the last gated claim of a set of queues met only limits that bound concurrency (no
rate), the next one is a single round trip instead: BEGIN, the locks, promotion and
``claim_gated_fast`` (which admits in SQL, by running sums per key in claim order, and
claims) and COMMIT, pipelined, so the locks are held for one statement's time. Jobs it
cannot judge (a limit name it did not lock, a rate) are claimed by the two-trip path in
the same call.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ...job import Claim, ClaimedJob
from ...limits import (
    DEFAULT_BURST,
    RECHECK,
    Bucket,
    Candidate,
    Key,
    Limit,
    Need,
    admit,
    decode_needs,
    in_use_of,
)
from ..base import LimitFigures, unknown_limit
from ..sqlbase import JobRows, LimitRows
from ..sqlfiles import Query
from ..wakeups import Subscribers
from .connections import Connections, psycopg

LIMIT_CACHE_MAX = 1000  # stored limit rows kept as Limit objects
MAX_GROUPS = 1000  # groups of equal needs a claim visits per queue (see claim_gated_read)
RACES_MAX = 3  # gated claims in one claim() when other claimers took admitted jobs
Queues = tuple[str, ...]


def declared_json(limit: Limit) -> str:
    """A declaration as ``limits.declared`` stores it: the values, exactly (reset_limit)."""
    return json.dumps(
        {
            "concurrency": limit.concurrency,
            "rate": limit.rate,
            "burst": limit.burst,
            "scope": limit.scope,
            "partition": limit.partition,
        },
        separators=(",", ":"),
    )


def limit_of(name: str, values: Sequence[Any]) -> Limit:
    """A Limit from (concurrency, rate, burst, scope, partition_by) as stored."""
    concurrency, rate, burst, scope, partition = values
    return Limit(
        name,
        concurrency=concurrency,
        rate=None if rate is None else float(rate),
        burst=burst,
        scope=scope,
        partition=partition,
    )


def needs_by_text(texts: Collection[str]) -> dict[str, tuple[Need, ...]]:
    """The needs of each distinct stored text, decoded with one ``json.loads`` (a claim may
    see a thousand groups). JSON of the wrong shape counts as none: its job is claimed, and
    the claim reads it as a corrupt row (a ``problem``, so the job goes dead), instead of
    every claim failing on it. (Text that is not JSON at all fails the claim's read in SQL:
    only a hand-made row can hold it.)"""
    ordered = list(texts)
    try:
        parsed = json.loads("[" + ",".join(ordered) + "]")
    except ValueError:
        parsed = None
    if not isinstance(parsed, list) or len(parsed) != len(ordered):
        parsed = [None] * len(ordered)  # one bad text: each on its own, below
    out = {}
    for text, value in zip(ordered, parsed, strict=True):
        try:
            if value is None:
                out[text] = decode_needs(text)
            else:
                out[text] = tuple(
                    (str(n), None if p is None else str(p), int(c)) for n, p, c in value
                )
        except (ValueError, TypeError):
            out[text] = ()
    return out


@dataclass(frozen=True, slots=True)
class GatedClaim:
    """Who claims, and what for: the same in every transaction of one gated claim."""

    queues: Queues
    lease: float
    worker: str
    host: str
    token: int
    done: Sequence[Claim]  # the claimer's own ended jobs (Broker.claim's ``done``)

    def claim_params(self) -> dict[str, Any]:
        """The fencing and lease columns the claiming statements set."""
        return {"token": self.token, "lease": self.lease, "worker": self.worker, "host": self.host}


class _Relock(Exception):
    """Roll the gated claim back and take its locks again, with these names."""

    def __init__(self, names: frozenset[str]) -> None:
        super().__init__(sorted(names))
        self.names = names


@dataclass(frozen=True, slots=True)
class Admitted:
    """What one gated claim decided: the ids to claim (claim order), the buckets to write,
    when to look again (None: no limit held a job back), and whether any job waited."""

    ids: list[int]
    buckets: dict[Key, Bucket]
    retry_in: float | None
    waiting: bool
    rated: bool  # a limit the candidates need has a rate: the fast claim cannot admit them
    at: float  # the broker's clock as the admission read it: the claim is stamped with it


class Limits:
    """The limit half of PostgresBroker: the gated claim and the limit verbs."""

    schema: str
    channel: str
    finished_channel: str  # job.wait's NOTIFY channel (an expiry ends jobs)
    _db: Connections
    _queries: dict[str, Query]
    _jobs: dict[str, JobRows]
    _subscribers: Subscribers
    _now: Callable[[], float | None]

    def _init_limits(self) -> None:
        # Per set of queues: whether its last claim saw jobs waiting for a limit (then the
        # next claim is gated), and the limit names its last gated claim needed (locked
        # first by the next). Plain dicts: one assignment at a time is thread-safe.
        self._gated_seen: dict[Queues, bool] = {}
        self._lock_names: dict[Queues, frozenset[str]] = {}
        self._limit_cache: dict[tuple[Any, ...], Limit] = {}
        self._group_cursor: dict[str, str] = {}  # queue -> where its next group scan starts
        # Per set of queues: whether a limit its last gated claim met has a rate (then the
        # claim admits in Python, claim_gated_read; else in SQL, claim_gated_fast).
        self._rated: dict[Queues, bool] = {}

    # ---- the gated claim ----------------------------------------------------------------
    def claim_gated(
        self,
        queues: Queues,
        n: int,
        lease: float,
        worker_id: str,
        host: str,
        token: int,
        done: Sequence[Claim] = (),
    ) -> tuple[list[ClaimedJob], float | None, int]:
        """Claim up to ``n`` jobs of ``queues``, limited or not, in claim order; returns
        them (unordered), when to look again (retry_in), and how many waiting jobs it
        cancelled as expired (``_begin``). Where the last claim of these
        queues met only concurrency limits, the admission is SQL's, in one round trip
        (``_claim_gated_fast``); otherwise, and for what that could not judge, Python's
        (``sluicegate.limits.admit``) over two.

        An admitted job another claimer took meanwhile (a job that names no limit: those
        that do are only taken under their limits' locks) leaves room for more: the claim
        goes again for what is missing, a few times at most."""
        req = GatedClaim(queues, lease, worker_id, host, token, done)
        jobs: list[ClaimedJob] = []
        expired = 0
        if queues in self._lock_names and not self._rated.get(queues, True):
            jobs, retry_in, judged, expired = self._claim_gated_fast(req, n)
            if judged or len(jobs) >= n:
                return jobs, retry_in, expired
            # it met jobs it could not judge (a new name, a rate): the rest the other way
        retry_in = None
        for _ in range(RACES_MAX):
            got, admitted, retry_in, gone = self._claim_gated_once(req, n - len(jobs))
            jobs.extend(got)
            expired += gone
            if len(got) == admitted or len(jobs) >= n:
                break
        return jobs, retry_in, expired

    def _read_params(self, req: GatedClaim, n: int, now: float | None) -> dict[str, Any]:
        """What fragment_gated reads by: the queues, where each one's group scan starts,
        and the claimer's own ended jobs (their tokens count as free)."""
        return {
            "queues": list(req.queues), "n": n, "host": req.host, "burst": DEFAULT_BURST,
            "now": now, "after": [self._group_cursor.get(q, "") for q in req.queues],
            "groups": MAX_GROUPS, "done_ids": [c.job_id for c in req.done],
            "done_tokens": [c.token for c in req.done],
        }  # fmt: skip

    def _begin(self, conn: Any, names: Collection[str], now: float | None) -> Any:
        """Queue the gated claim's opening in the pipeline: BEGIN, its settings, the locks
        on ``names`` (key order), the expiry of waiting jobs whose time is up and the
        promotion of due jobs. Returns the expiry's cursor (one row: ``expired``)."""
        conn.execute("BEGIN")
        conn.execute(self._queries["claim_settings"])
        conn.execute(self._queries["lock_limits"], {"schema": self.schema, "names": sorted(names)})
        expiry = conn.execute(
            self._queries["expire_due"], {"now": now, "finished": self.finished_channel}
        )
        conn.execute(self._queries["promote_due"], {"now": now})
        return expiry

    def _claim_gated_once(
        self, req: GatedClaim, n: int
    ) -> tuple[list[ClaimedJob], int, float | None, int]:
        """One gated claim transaction: (the jobs claimed, how many were admitted, retry_in,
        how many jobs it cancelled as expired)."""
        q = self._queries
        now = self._now()
        names = self._lock_names.get(req.queues, frozenset())
        read = q["claim_gated_read"]
        params = self._read_params(req, n, now)
        rows: list[Any] = []
        with self._db.single() as conn, rolled_back_on_error(conn):
            # BEGIN and COMMIT as statements: psycopg's transaction() syncs the pipeline
            # when it starts and before it commits, a round trip each.
            with conn.pipeline():
                claimed = None
                for attempt in (1, 2):
                    expiry = self._begin(conn, names, now)
                    row = conn.execute(read, params).fetchone()  # round trip 1
                    self._note_groups(req.queues, row[read.at["scanned"]] or [])
                    try:
                        admission, needed = self._admit(row, n, req.host, names, attempt == 1)
                    except _Relock as relock:
                        conn.execute("ROLLBACK")  # sent with the next attempt's statements
                        names = relock.names
                        continue
                    if admission.ids:
                        # The claim's time is the one its rate tokens were drawn at, not
                        # this later statement's: the jobs' claim times keep to the rate.
                        claim = {"ids": admission.ids, "now": admission.at, **req.claim_params()}
                        claimed = conn.execute(q["claim_admitted"], claim)
                    if admission.buckets:
                        conn.execute(q["save_buckets"], bucket_params(admission.buckets))
                    conn.execute("COMMIT")
                    break
            # round trip 2: the pipeline's end sends what is queued, COMMIT included
            if claimed is not None:
                rows = claimed.fetchall()
            expired = int(expiry.fetchone()[0])
        # Next time: the names this claim needed are locked first; none waiting, no gate.
        self._lock_names[req.queues] = needed
        self._gated_seen[req.queues] = admission.waiting
        self._rated[req.queues] = admission.rated
        read_row = self._jobs["claim_admitted"].claimed
        jobs = [read_row(r, req.token) for r in rows]
        return jobs, len(admission.ids), admission.retry_in, expired

    def _claim_gated_fast(
        self, req: GatedClaim, n: int
    ) -> tuple[list[ClaimedJob], float | None, bool, int]:
        """The gated claim in one round trip (BEGIN, the locks of the names the last claim
        needed, expiry, promotion, claim_gated_fast, COMMIT), for limits that bound
        concurrency only: (jobs, retry_in, judged, how many it cancelled as expired). Not ``judged``: it held back jobs it could not
        judge (a name not locked, a rate); the caller claims for them the other way."""
        fast = self._queries["claim_gated_fast"]
        queues, token = req.queues, req.token
        locked = self._lock_names[queues]
        now = self._now()
        params = {**self._read_params(req, n, now), "locked": sorted(locked), **req.claim_params()}
        with self._db.single() as conn, rolled_back_on_error(conn):
            with conn.pipeline():  # one round trip, COMMIT included
                expiry = self._begin(conn, locked, now)
                cursor = conn.execute(fast, params)
                conn.execute("COMMIT")
            rows = cursor.fetchall()
            expired = int(expiry.fetchone()[0])
        first = rows[0]
        needed = frozenset(first[fast.at["names"]])
        rated = bool(first[fast.at["rated"]])
        self._note_groups(queues, first[fast.at["scanned"]] or [])
        judged = not rated and needed <= locked
        self._lock_names[queues] = needed if judged else locked | needed
        self._gated_seen[queues] = bool(needed)
        self._rated[queues] = rated
        read_row = self._jobs["claim_gated_fast"].claimed
        jobs = [read_row(r, token) for r in rows if r[fast.at["id"]] is not None]
        return jobs, RECHECK if first[fast.at["refused"]] else None, judged, expired

    def _note_groups(self, queues: Queues, scanned: list[Any]) -> None:
        """Where each queue's next group scan starts: after the last group read when the
        scan stopped at MAX_GROUPS, else at the beginning."""
        for queue in queues:
            self._group_cursor.pop(queue, None)
        for queue, found, last in scanned:
            if found >= MAX_GROUPS:
                self._group_cursor[queue] = last

    def _admit(
        self, row: Any, n: int, host: str, locked: frozenset[str], may_relock: bool
    ) -> tuple[Admitted, frozenset[str]]:
        """Admission from what claim_gated_read returned, and the limit names its candidates
        need. Raises _Relock when they need a name not locked (and ``may_relock``); else the
        candidates that do are left for the next claim, which looks again at once."""
        read = self._queries["claim_gated_read"]
        listed = row[read.at["candidates"]] or []
        groups = needs_by_text({text for _, text in listed if text is not None})
        candidates = [
            Candidate(job_id, () if text is None else groups[text]) for job_id, text in listed
        ]
        needed = frozenset(name for needs in groups.values() for name, _, _ in needs)
        unlocked = not needed <= locked
        if unlocked:
            if may_relock:
                raise _Relock(locked | needed)
            # Jobs with new needs came in between the two reads: they wait for the next claim.
            candidates = [c for c in candidates if all(nd[0] in locked for nd in c.needs)]
        limits = {name: self._limit(name, values) for name, *values in row[read.at["limits"]] or []}
        held = [
            (name, part, holder, int(cost or 0))  # None: a cost of the wrong shape
            for name, part, holder, cost in row[read.at["held"]] or []
        ]
        buckets = {
            (name, part, holder): Bucket(float(tokens), float(at))
            for name, part, holder, tokens, at in row[read.at["buckets"]] or []
        }
        now = float(row[read.at["now"]])
        admission = admit(candidates, n, limits, in_use_of(held, host, limits), buckets, now, host)
        retry_in = 0.0 if unlocked else admission.retry_in
        rated = any(limit.rate is not None for limit in limits.values())
        admitted = Admitted(admission.ids, admission.buckets, retry_in, bool(groups), rated, now)
        return admitted, needed

    def _limit(self, name: str, values: Sequence[Any]) -> Limit:
        """A Limit per stored row, made (and validated) once."""
        key = (name, *values)
        limit = self._limit_cache.get(key)
        if limit is None:
            if len(self._limit_cache) > LIMIT_CACHE_MAX:
                self._limit_cache.clear()
            limit = self._limit_cache[key] = limit_of(name, values)
        return limit

    # ---- the limit verbs ----------------------------------------------------------------
    def register_limits(self, limits: Sequence[Limit]) -> None:
        latest = {limit.name: limit for limit in limits}  # a name given twice: the last wins
        if not latest:
            return
        ordered = [latest[name] for name in sorted(latest)]  # one lock order for all workers
        params = {
            "names": [lim.name for lim in ordered],
            "concurrency": [lim.concurrency for lim in ordered],
            "rate": [lim.rate for lim in ordered],
            "burst": [lim.burst for lim in ordered],
            "scope": [lim.scope for lim in ordered],
            "partition": [lim.partition for lim in ordered],
            "declared": [declared_json(lim) for lim in ordered],
        }
        with self._db.transaction() as conn:
            conn.execute(self._queries["register_limits"], params)
            self._wake_waiters(conn)
        self._subscribers.notify_local()

    def set_limit(self, limit: Limit) -> None:
        params = {
            "name": limit.name,
            "concurrency": limit.concurrency,
            "rate": limit.rate,
            "burst": limit.burst,
            "scope": limit.scope,
            "partition": limit.partition,
        }
        with self._db.transaction() as conn:
            if conn.execute(self._queries["set_limit"], params).fetchone() is None:
                raise unknown_limit(limit.name, self._limit_names(conn))
            self._wake_waiters(conn)
        self._subscribers.notify_local()

    def reset_limit(self, name: str) -> Limit:
        query = self._queries["reset_limit"]
        with self._db.transaction() as conn:
            row = conn.execute(query, {"name": name}).fetchone()
            if row is None:
                raise unknown_limit(name, self._limit_names(conn))
            self._wake_waiters(conn)
        self._subscribers.notify_local()
        return Limit(name, **json.loads(row[query.at["declared"]]))

    def _limit_names(self, conn: Any) -> list[str]:
        query = self._queries["limit_names"]
        return [r[query.at["name"]] for r in conn.execute(query).fetchall()]

    def _wake_waiters(self, conn: Any) -> None:
        """NOTIFY (at commit) the queues with jobs waiting for a limit: a changed limit may
        have room for them. Workers held back by a limit also look again every RECHECK s."""
        conn.execute(self._queries["notify_gated"], {"channel": self.channel}).fetchall()

    def limit_figures(self) -> LimitFigures:
        q, read = self._queries, LimitRows(self._queries)
        names = ("limit_rows", "held_needs", "waiting_groups", "bucket_rows", "clock")
        with self._db.single() as conn, rolled_back_on_error(conn):
            with conn.pipeline():  # one round trip, one snapshot
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                cursors = [
                    conn.execute(q[name], {"now": self._now()} if name == "clock" else None)
                    for name in names
                ]
                conn.execute("COMMIT")
            limit_rows, held, waiting, buckets, clock = (cur.fetchall() for cur in cursors)
        limits, overridden = read.limits(limit_rows)
        return LimitFigures(
            limits,
            overridden,
            read.held(held),
            read.waiting(waiting),
            read.buckets(buckets),
            float(clock[0][q["clock"].at["now"]]),
        )


@contextlib.contextmanager
def rolled_back_on_error(conn: Any) -> Iterator[None]:
    """Ends a transaction begun by a BEGIN statement that an error left open (the pool would
    too, with a warning); a broken connection stays broken, its error is the one raised."""
    try:
        yield
    except BaseException:
        if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")
        raise


def bucket_params(buckets: dict[Key, Bucket]) -> dict[str, list[Any]]:
    """save_buckets' arrays, in key order (one row lock order for every claimer)."""
    keys = sorted(buckets)
    return {
        "names": [k[0] for k in keys],
        "parts": [k[1] for k in keys],
        "hosts": [k[2] for k in keys],
        "tokens": [buckets[k].tokens for k in keys],
        "ats": [buckets[k].at for k in keys],
    }
