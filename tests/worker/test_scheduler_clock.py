"""The scheduler on a controlled clock (the brokers' ``clock=`` seam), on SQLite and
PostgreSQL: DST in Europe/Berlin, missed ticks after every worker was down, and several
schedulers taking turns. docs/schedules.md says what each case must do."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from sluicegate import App
from sluicegate.brokers import Broker
from sluicegate.testing import FakeClock
from sluicegate.worker.services.scheduler import Scheduler
from support.brokers import over_brokers

pytestmark = over_brokers

BERLIN = ZoneInfo("Europe/Berlin")


def open_broker(name: str, url: str, clock: FakeClock) -> Broker:
    if name == "sqlite":
        from sluicegate.brokers.sqlite import SQLiteBroker

        return SQLiteBroker(url, clock=clock)
    from sluicegate.brokers.postgres import PostgresBroker

    return PostgresBroker(url, clock=clock)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 28, 12, tzinfo=BERLIN).timestamp())


@pytest.fixture
def app(broker_name: str, db_url: str, clock: FakeClock) -> Iterator[App]:
    broker = open_broker(broker_name, db_url, clock)
    app = App(broker=broker, config=False)

    @app.task(queue="cron")
    def report(label: str) -> None: ...

    yield app
    app.close()


def scheduler(app: App, *names: str) -> Scheduler:
    app.configure()
    chosen = [app.schedules[n] for n in names] if names else list(app.schedules.values())
    return Scheduler(app, app.broker, chosen)


def ticks_of(app: App, name: str) -> list[datetime]:
    """The local times of the ticks enqueued for schedule ``name``, in id order (keys are
    schedule:NAME:UTC-time)."""
    jobs = sorted(app.broker.list_jobs(limit=1000), key=lambda j: j.id)
    prefix = f"schedule:{name}:"
    keys = [j.unique_key for j in jobs if j.unique_key and j.unique_key.startswith(prefix)]
    return [
        datetime.strptime(k[len(prefix) :], "%Y-%m-%dT%H:%M:%SZ")
        .replace(tzinfo=UTC)
        .astimezone(BERLIN)
        for k in keys
    ]


def walk(clock: FakeClock, until: datetime, step: float, *schedulers: Scheduler) -> None:
    """Move the clock in steps, every scheduler looking after each step."""
    while clock() < until.timestamp():
        clock.advance(step)
        for s in schedulers:
            s.enqueue_due()


def local(*fields: int, fold: int = 0) -> datetime:
    return datetime(*fields, tzinfo=BERLIN, fold=fold)  # type: ignore[misc]


def test_spring_forward_in_berlin(app: App, clock: FakeClock) -> None:
    """29 March 2026, 02:00 CET becomes 03:00 CEST. A daily 02:30 (5 fields, fixed minute
    and hour) runs at 03:00 that day, as Debian cron does; an every-30-minutes schedule
    has no tick in the hour that does not exist."""
    task = app.tasks["report"]
    app.periodic("30 2 * * *", tz="Europe/Berlin", args=["daily"], name="daily")(task)
    app.periodic("*/30 * * * *", tz="Europe/Berlin", args=["half"], name="half")(task)
    s = scheduler(app)
    clock.now = local(2026, 3, 29, 0, 50).timestamp()
    s.enqueue_due()  # first seen here
    walk(clock, local(2026, 3, 30, 3, 0), 300, s)
    assert ticks_of(app, "daily") == [local(2026, 3, 29, 3, 0), local(2026, 3, 30, 2, 30)]
    half = ticks_of(app, "half")
    assert half[:4] == [
        local(2026, 3, 29, 1, 0),
        local(2026, 3, 29, 1, 30),
        local(2026, 3, 29, 3, 0),  # 02:00 and 02:30 do not exist that night
        local(2026, 3, 29, 3, 30),
    ]
    gaps = {b.timestamp() - a.timestamp() for a, b in itertools.pairwise(half)}
    assert gaps == {1800.0}  # one tick every 30 real minutes, none doubled or lost


def test_fall_back_in_berlin(app: App, clock: FakeClock) -> None:
    """25 October 2026, 03:00 CEST becomes 02:00 CET: 02:00-02:59 happens twice. A daily
    02:30 runs once, at the first 02:30 (CEST); an every-30-minutes schedule runs in both
    passes, every 30 real minutes."""
    task = app.tasks["report"]
    app.periodic("30 2 * * *", tz="Europe/Berlin", args=["daily"], name="daily")(task)
    app.periodic("*/30 * * * *", tz="Europe/Berlin", args=["half"], name="half")(task)
    s = scheduler(app)
    clock.now = local(2026, 10, 25, 0, 50).timestamp()
    s.enqueue_due()
    walk(clock, local(2026, 10, 26, 3, 0), 300, s)
    daily = ticks_of(app, "daily")
    assert daily == [local(2026, 10, 25, 2, 30), local(2026, 10, 26, 2, 30)]
    assert daily[0].utcoffset() is not None and daily[0].utcoffset().total_seconds() == 7200
    half = ticks_of(app, "half")
    assert half[:8] == [
        local(2026, 10, 25, 1, 0),
        local(2026, 10, 25, 1, 30),
        local(2026, 10, 25, 2, 0),  # CEST
        local(2026, 10, 25, 2, 30),
        local(2026, 10, 25, 2, 0, fold=1),  # CET: the repeated hour
        local(2026, 10, 25, 2, 30, fold=1),
        local(2026, 10, 25, 3, 0),
        local(2026, 10, 25, 3, 30),
    ]
    gaps = {b.timestamp() - a.timestamp() for a, b in itertools.pairwise(half)}
    assert gaps == {1800.0}


@pytest.mark.parametrize(("catch_up", "expected"), [(0, 1), (3, 4), (20, 10)])
def test_missed_ticks_after_all_workers_were_down(
    app: App, clock: FakeClock, catch_up: int, expected: int
) -> None:
    """An every-second schedule: 5 ticks on time, then no scheduler runs for 10 ticks.
    skip (catch_up = 0) enqueues the latest due tick only; catch_up = N the latest and up
    to N missed ticks before it, oldest first; then it carries on at each tick."""
    app.periodic("* * * * * *", args=["sec"], name="sec", catch_up=catch_up)(app.tasks["report"])
    s = scheduler(app)
    s.enqueue_due()  # first seen at T0: ticks after it are due
    start = clock()
    walk(clock, datetime.fromtimestamp(start + 5, UTC), 1, s)
    on_time = [t.timestamp() for t in ticks_of(app, "sec")]
    assert on_time == [start + n for n in range(1, 6)]
    clock.advance(10)  # every worker down: ticks start+6 .. start+15 come and go
    s.enqueue_due()
    after = [t.timestamp() for t in ticks_of(app, "sec")][5:]
    assert after == [start + 15 - n for n in reversed(range(expected))]
    clock.advance(1)
    s.enqueue_due()
    assert ticks_of(app, "sec")[-1].timestamp() == start + 16


def test_schedulers_taking_turns_enqueue_each_tick_once(
    app: App, clock: FakeClock, broker_name: str, db_url: str
) -> None:
    """Three schedulers (three workers' broker handles) look after every tick in turn and
    at random lateness: every tick once. A late one never enqueues a finished tick again."""
    app.periodic("* * * * * *", args=["sec"], name="sec", catch_up=5)(app.tasks["report"])
    handles = [open_broker(broker_name, db_url, clock) for _ in range(2)]
    try:
        first = scheduler(app)
        others = [Scheduler(app, h, list(app.schedules.values())) for h in handles]
        first.enqueue_due()
        start = clock()
        for n in range(1, 31):
            clock.advance(1)
            order = [first, *others] if n % 2 else [*others, first]
            for s in order[: 1 + n % 3]:
                s.enqueue_due()
        ticks = [t.timestamp() for t in ticks_of(app, "sec")]
        assert ticks == [start + n for n in range(1, 31)]
        for c in app.broker.claim(["cron"], 100, 30, "w"):  # every tick's job finishes
            app.broker.ack(c.claim, "null")
        for s in others:  # look again: the ticks' keys are free, the ticks are not
            s.enqueue_due()
        spec = app.build_spec("report", ["sec"], unique_key="again")
        assert app.broker.enqueue_tick("sec", start + 30, spec) is None  # a late offer
        assert len(ticks_of(app, "sec")) == 30
        assert first.enqueued + sum(s.enqueued for s in others) == 30
    finally:
        for h in handles:
            h.close()
