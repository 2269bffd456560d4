"""PostgreSQL bulk enqueue by COPY (brokers/postgres/copyin.py) and the Jobs built from
specs (fresh.py): a large batch is stored exactly as the batched INSERT stores it, in
batch order, with unique keys in between; in the broker's transaction or the caller's,
sync or asyncio; each queue woken once. On a real server, each test on its own schema.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from sluicegate.brokers.postgres.copyin import COPY_MIN, interval_micros, pg_micros
from sluicegate.job import Job, JobSpec, JobState, encode_headers
from sluicegate.limits import encode_needs
from support.specs import spec

psycopg = pytest.importorskip("psycopg")

if TYPE_CHECKING:
    from conftest import FakeClock
    from sluicegate.brokers.postgres import PostgresBroker

STORED = (
    "queue, task, args, kwargs, state, priority, run_at, attempts, max_attempts, unique_key, "
    "enqueued_at, limits, headers, expires_at, history, progress, result, last_error"
)


def mixed_specs(n: int, now: float, seed: int = 16) -> list[JobSpec]:
    """Every option a plain job can carry, mixed: due and future times, fractions of a
    microsecond, the integer bounds, limits, headers, expiries of both kinds."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        options: dict[str, Any] = {
            "priority": rnd.choice([0, 0, 5, -3, -(2**31), 2**31 - 1]),
            "max_attempts": rnd.choice([1, 3, 2**31 - 1]),
        }
        when = rnd.random()
        if when < 0.25:
            options["delay"] = rnd.choice([0.0, 0.5e-6, 1.5e-6, rnd.random() * 1e4, 3.15e9])
        elif when < 0.5:
            options["run_at"] = now + rnd.uniform(-1e5, 1e5) + rnd.random() * 1e-6
        elif when < 0.52:
            options["run_at"] = rnd.choice([-62_135_596_800.0, 253_402_300_799.0])
        expiry = rnd.random()
        if expiry < 0.2:
            options["expires_in"] = 3.2e9 + rnd.random()  # after any delay above
        elif expiry < 0.4:
            options["expires_at"] = 253_402_300_799.0 - rnd.random() * 1e3
        if rnd.random() < 0.2:
            options["limits"] = encode_needs([("db", None, 1), ("per", f"p{i % 7}", 2)])
        if rnd.random() < 0.2:
            options["headers"] = encode_headers({"traceparent": f"00-{i:032x}-{i:016x}-01"})
        args: list[Any] = [i, "é\u0000", {"k": [1.5, None, True]}] if i % 3 else [i]
        out.append(spec(queue=f"q{i % 4}", args=args, **options))
    return out


def stored_rows(broker: PostgresBroker, jobs: list[Job]) -> list[tuple[Any, ...]]:
    """The stored columns of ``jobs`` (all but the id), in their order, as the server has
    them (times as timestamptz, to the microsecond)."""
    with broker._db.transaction() as conn:
        rows = conn.execute(
            f"SELECT id, {STORED} FROM {broker.settings.quoted_schema}.jobs WHERE id = ANY(%s)",
            ([j.id for j in jobs],),
        ).fetchall()
    by_id = {row[0]: tuple(row[1:]) for row in rows}
    return [by_id[j.id] for j in jobs]


@pytest.fixture
def open_pg(pg_url: str, clock: FakeClock) -> Iterator[Callable[..., PostgresBroker]]:
    from sluicegate.brokers.postgres import PostgresBroker

    opened: list[PostgresBroker] = []

    def open_one(**kwargs: Any) -> PostgresBroker:
        broker = PostgresBroker(pg_url, **{"clock": clock, **kwargs})
        opened.append(broker)
        return broker

    yield open_one
    for broker in reversed(opened):
        broker.close()


def test_the_server_rounds_times_as_copyin_does(pg_dsn: str) -> None:
    """to_timestamp(s) and make_interval(secs => d), the batched INSERT's time arithmetic,
    to the microsecond, against copyin's: halves of a microsecond, the calendar's ends."""
    rnd = random.Random(7)
    stamps = [rnd.uniform(-62_135_596_800.0, 253_402_300_799.0) for _ in range(2000)]
    stamps += [1.7e9 + k * 0.5e-6 for k in range(-500, 500)] + [k * 0.25e-6 for k in range(-99, 99)]
    stamps += [-62_135_596_800.0, 253_402_300_799.0, 946_684_800.0, 0.0]
    spans = [rnd.random() * 3.2e9 for _ in range(1000)] + [k * 0.5e-6 for k in range(2000)]
    with psycopg.connect(pg_dsn) as conn:
        at = conn.execute(
            "SELECT array_agg((extract(epoch FROM to_timestamp(s) - "
            "'2000-01-01 00:00:00+00'::timestamptz) * 1000000)::int8 ORDER BY n) "
            "FROM unnest(%s::float8[]) WITH ORDINALITY AS u(s, n)",
            (stamps,),
        ).fetchone()[0]
        by = conn.execute(
            "SELECT array_agg((extract(epoch FROM make_interval(secs => d)) * 1000000)::int8 "
            "ORDER BY n) FROM unnest(%s::float8[]) WITH ORDINALITY AS u(d, n)",
            (spans,),
        ).fetchone()[0]
    assert at == [pg_micros(s) for s in stamps]
    assert by == [interval_micros(d) for d in spans]


def test_a_large_mixed_batch_is_stored_as_small_batches_are(
    open_pg: Callable[..., PostgresBroker], clock: FakeClock
) -> None:
    """10,000 jobs of every option in one COPY, and the same specs through the batched
    INSERT (runs shorter than COPY_MIN): the same stored columns, row for row, at the same
    clock; ids in batch order; each returned Job is what get_job reads."""
    broker = open_pg()
    specs = mixed_specs(10_000, clock.now)
    copied = broker.enqueue(specs)
    assert [j.id for j in copied] == sorted(j.id for j in copied)
    assert len({j.id for j in copied}) == len(specs)
    inserted: list[Job] = []
    for start in range(0, len(specs), COPY_MIN - 1):
        inserted += broker.enqueue(specs[start : start + COPY_MIN - 1])
    assert stored_rows(broker, copied) == stored_rows(broker, inserted)
    strip = lambda job: {**job.__dict__, "id": 0}  # noqa: E731
    assert [strip(j) for j in copied] == [strip(j) for j in inserted]
    states = {j.state for j in copied}
    assert states == {JobState.READY, JobState.SCHEDULED}
    for job in copied[::97] + copied[-3:] + inserted[::89]:
        assert broker.get_job(job.id) == job


def test_unique_keys_in_the_middle_keep_the_batch_order(
    open_pg: Callable[..., PostgresBroker],
) -> None:
    """Runs of plain specs long enough for COPY, with keyed specs between them, in the
    broker's transaction and in the caller's: every new job's id follows the batch order,
    and a key already held returns its holder, as everywhere."""
    broker = open_pg()
    [held] = broker.enqueue([spec(unique_key="held", args=["first"])])
    for way in ("own", "caller"):
        specs = (
            [spec(args=[way, "a", i]) for i in range(100)]
            + [spec(unique_key=f"{way}-1", args=[way, "k1"])]
            + [spec(args=[way, "b", i]) for i in range(COPY_MIN)]
            + [spec(unique_key="held", args=["again"])]
            + [spec(args=[way, "c", i]) for i in range(70)]
        )
        if way == "own":
            jobs = broker.enqueue(specs)
        else:
            with psycopg.connect(broker.dsn) as conn:
                jobs = broker.enqueue(specs, connection=conn)
        assert [j.args for j in jobs] == [
            ["first"] if s.unique_key == "held" else json.loads(s.args_json) for s in specs
        ]
        new = [j.id for j in jobs if j.id != held.id]
        assert new == sorted(new) and len(new) == len(specs) - 1
        assert jobs[101 + COPY_MIN].id == held.id
        for job in (jobs[0], jobs[100], jobs[101], jobs[-1]):
            assert broker.get_job(job.id) == job


def test_a_copy_in_the_callers_transaction_commits_and_rolls_back_with_it(
    open_pg: Callable[..., PostgresBroker],
) -> None:
    broker = open_pg()
    with psycopg.connect(broker.dsn) as conn:
        gone = broker.enqueue([spec(args=[i]) for i in range(200)], connection=conn)
        conn.rollback()
        kept = broker.enqueue([spec(args=[i]) for i in range(200)], connection=conn)
        assert broker.get_job(kept[0].id) is None  # not committed yet
        conn.commit()
    assert all(broker.get_job(j.id) is None for j in gone[::50])
    assert [broker.get_job(j.id) for j in kept[::50]] == kept[::50]


def test_a_large_batch_in_the_callers_pipeline_goes_in_by_insert(
    open_pg: Callable[..., PostgresBroker],
) -> None:
    """COPY cannot run in pipeline mode: a caller's connection in one still takes the batch."""
    broker = open_pg()
    with psycopg.connect(broker.dsn) as conn, conn.pipeline():
        jobs = broker.enqueue([spec(args=[i]) for i in range(COPY_MIN * 2)], connection=conn)
    assert [j.id for j in jobs] == sorted(j.id for j in jobs)
    assert [broker.get_job(j.id) for j in jobs[::40]] == jobs[::40]


def test_a_copy_batch_wakes_each_of_its_queues_once(
    open_pg: Callable[..., PostgresBroker],
) -> None:
    """NOTIFY once per queue of the batch, with the commit (the payload: the queue)."""
    broker = open_pg()
    with psycopg.connect(broker.dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{broker.channel}"')
        broker.enqueue([spec(queue=f"w{i % 3}", args=[i]) for i in range(300)])
        heard = [n.payload for n in listener.notifies(timeout=1.0)]
    assert sorted(heard) == ["w0", "w1", "w2"]


def test_enqueue_async_by_copy_in_its_own_and_the_callers_transaction(
    open_pg: Callable[..., PostgresBroker], clock: FakeClock
) -> None:
    from sluicegate.brokers.postgres import PostgresBroker

    broker = open_pg()
    specs = mixed_specs(300, clock.now, seed=3)

    async def both() -> tuple[list[Job], list[Job]]:
        producer = PostgresBroker(broker.url, clock=clock)
        try:
            own = await producer.enqueue_async(specs)
            async with await psycopg.AsyncConnection.connect(broker.dsn) as conn:
                theirs = await producer.enqueue_async(specs, connection=conn)
        finally:
            await producer.aclose()
        return own, theirs

    own, theirs = asyncio.run(both())
    assert [j.id for j in own + theirs] == sorted(j.id for j in own + theirs)
    assert stored_rows(broker, own) == stored_rows(broker, theirs)
    for job in own[::37] + theirs[::41]:
        assert broker.get_job(job.id) == job


def test_a_batch_stamped_by_the_server_clock_is_due_at_once(
    open_pg: Callable[..., PostgresBroker],
) -> None:
    """Without a test clock: enqueued_at is the server's time, the jobs are ready."""
    broker = open_pg(clock=None)
    before = time.time()
    jobs = broker.enqueue([spec(args=[i]) for i in range(COPY_MIN)])
    assert {j.state for j in jobs} == {JobState.READY}
    assert all(abs(j.enqueued_at - before) < 60 and j.run_at == j.enqueued_at for j in jobs)
    assert broker.get_job(jobs[-1].id) == jobs[-1]
