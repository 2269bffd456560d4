"""The SQLite broker under storage faults, in one process: another connection holding the
write lock, a full database (``max_pages``), a WAL that readers keep from resetting, and
the CLI facing a locked file. Every fault becomes a typed error (``BrokerBusy``,
``StorageFull``, both ``BrokerUnavailable``), never a raw ``sqlite3`` one, and a write
that raised stored nothing. The same faults with real worker processes are in
tests/chaos/test_sqlite_faults.py.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluicegate import App, BrokerBusy, BrokerUnavailable, JobState, StorageFull
from sluicegate.brokers.sqlite import SQLiteBroker, connections
from sluicegate.brokers.sqlite.connections import storage_error
from sluicegate.errors import ConfigError
from sluicegate.outcomes import Succeeded
from sluicegate.worker.services import Backoff, Counters, LeaseKeeper, ResultWriter
from support.specs import spec
from support.waiting import wait_for

CAP = 300  # max_pages in the disk-full tests (300 x 4 KiB)


def stored(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM jobs").fetchone()[0])
    finally:
        conn.close()


@contextlib.contextmanager
def write_lock(path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holding the database's write lock (BEGIN IMMEDIATE)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    finally:
        conn.execute("ROLLBACK")
        conn.close()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


def test_url_options_are_checked(path: Path) -> None:
    with pytest.raises(ConfigError, match="max_pages must be at least 0"):
        SQLiteBroker(f"sqlite:///{path}?max_pages=-1")
    with pytest.raises(ConfigError, match="wal_limit_mb must be a number"):
        SQLiteBroker(f"sqlite:///{path}?wal_limit_mb=lots")


# ---- a write lock held elsewhere ---------------------------------------------------------


def begins_immediate(broker: SQLiteBroker) -> threading.Event:
    """Set once the broker's writer connection runs BEGIN IMMEDIATE (SQLite's trace
    callback, called as a statement begins): the write lock is what it asks for next."""
    began = threading.Event()

    def traced(statement: str) -> None:
        if statement.startswith("BEGIN IMMEDIATE"):
            began.set()

    broker._db._writer.set_trace_callback(traced)
    return began


def asleep(thread: threading.Thread) -> bool:
    """Whether ``thread`` sleeps in the kernel (Linux's /proc; elsewhere taken as so)."""
    try:
        stat = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "S"  # the state, after "(name)"


def test_a_write_waits_out_a_lock_shorter_than_busy_timeout(path: Path) -> None:
    broker = SQLiteBroker(f"sqlite:///{path}")  # busy_timeout: 10 s
    began = begins_immediate(broker)
    done: list[float] = []
    thread = threading.Thread(
        target=lambda: (broker.enqueue([spec()]), done.append(time.monotonic()))
    )
    try:
        with write_lock(path):
            thread.start()
            # The enqueue waits: it began BEGIN IMMEDIATE, and (the lock held here) it
            # sleeps in SQLite's busy handler between its tries for the lock.
            assert began.wait(10)
            wait_for(lambda: asleep(thread) or done, timeout=10, what="the enqueue asleep")
            assert not done
            released = time.monotonic()
        thread.join(10)
        assert done and done[0] >= released
        assert stored(path) == 1
    finally:
        broker.close()


def test_a_lock_past_busy_timeout_is_broker_busy_and_stores_nothing(path: Path) -> None:
    broker = SQLiteBroker(f"sqlite:///{path}?busy_timeout=200")
    try:
        with write_lock(path):
            began = time.monotonic()
            with pytest.raises(BrokerBusy, match=r"locked by another connection.*busy_timeout=200"):
                broker.enqueue([spec()])
            waited = time.monotonic() - began
            assert 0.15 <= waited < 5.0, waited
            assert isinstance(BrokerBusy("x"), BrokerUnavailable)
        assert stored(path) == 0  # nothing half-written
        assert len(broker.enqueue([spec()])) == 1  # and the broker carries on
    finally:
        broker.close()


def test_reading_and_opening_never_wait_for_the_write_lock(path: Path) -> None:
    SQLiteBroker(f"sqlite:///{path}").close()  # migrated
    with write_lock(path):
        began = time.monotonic()
        broker = SQLiteBroker(f"sqlite:///{path}?busy_timeout=0")  # would fail if it waited
        try:
            assert broker.stats().to_dict()["queues"] == {}
            assert broker.list_jobs() == []
            assert broker.get_job(1) is None
        finally:
            broker.close()
        assert time.monotonic() - began < 2.0


def test_threads_of_one_process_share_the_busy_timeout(path: Path) -> None:
    """The bound holds per call, not per thread in line: a thread waiting behind its
    siblings' writes gives up after busy_timeout in all."""
    broker = SQLiteBroker(f"sqlite:///{path}?busy_timeout=300")
    errors: list[Exception] = []
    times: list[float] = []

    def enqueue() -> None:
        began = time.monotonic()
        try:
            broker.enqueue([spec()])
        except Exception as exc:
            errors.append(exc)
        times.append(time.monotonic() - began)

    try:
        with write_lock(path):
            threads = [threading.Thread(target=enqueue) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
        assert len(errors) == 4 and all(isinstance(e, BrokerBusy) for e in errors), errors
        assert all("is locked by" in str(e) for e in errors), errors
        assert max(times) < 0.3 + 1.0, times  # not 4 x 0.3 s in a row
        assert stored(path) == 0
    finally:
        broker.close()


def test_the_cli_waits_out_a_lock_then_fails_in_one_line(path: Path, tmp_path: Path) -> None:
    def cli(url: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "sluicegate.cli", *args, "--broker", url],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    url = f"sqlite:///{path}"
    SQLiteBroker(url).close()
    with write_lock(path):
        impatient = cli(f"{url}?busy_timeout=300", "enqueue", "t")
        patient = cli(url, "enqueue", "t")
        out, err = impatient.communicate(timeout=60)
        assert impatient.returncode == 1, (out, err)
        assert "locked by another connection" in err and "busy_timeout=300" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        reader = cli(f"{url}?busy_timeout=0", "stats", "--json")  # reads need no lock
        out, err = reader.communicate(timeout=60)
        assert reader.returncode == 0, err
        assert patient.poll() is None  # still waiting for the lock
    out, err = patient.communicate(timeout=60)
    assert patient.returncode == 0, err
    assert out.strip() == "1"
    assert stored(path) == 1


# ---- a full database ---------------------------------------------------------------------


def fill(path: Path, cap: int = CAP) -> sqlite3.Connection:
    """Fill the file up to ``cap`` pages with a filler table, as a full disk would leave
    it; returns the connection (DELETE FROM filler gives the space back)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA max_page_count = {cap}")
    conn.execute("CREATE TABLE IF NOT EXISTS filler (blob BLOB)")
    for size in (3000, 300, 30):
        with contextlib.suppress(sqlite3.OperationalError):
            while True:
                conn.execute("INSERT INTO filler VALUES (randomblob(?))", (size,))
    return conn


def test_enqueue_on_a_full_database_is_storage_full_and_stores_nothing(path: Path) -> None:
    broker = SQLiteBroker(f"sqlite:///{path}?max_pages={CAP}")
    try:
        kept = broker.enqueue([spec(args=["small"])])
        filler = fill(path)
        with pytest.raises(StorageFull, match="is full"):
            broker.enqueue([spec(args=["x" * 5000])])  # needs pages of its own
        with pytest.raises(StorageFull):  # a batch is all or nothing
            broker.enqueue(
                [spec(args=["a"]), spec(args=["b"]), spec(args=["x" * 5000]), spec(args=["c"])]
            )
        assert isinstance(StorageFull("x"), BrokerUnavailable)
        assert stored(path) == 1
        assert broker.get_job(kept[0].id) is not None
        filler.execute("DELETE FROM filler")  # space comes back (pages on the free list)
        filler.close()
        again = broker.enqueue([spec(args=["x" * 5000]), spec(args=["c"])])
        assert [broker.get_job(j.id) is not None for j in again] == [True, True]
        assert stored(path) == 3
    finally:
        broker.close()


def test_outcomes_that_do_not_fit_are_kept_until_space_returns(path: Path) -> None:
    """The result writer's batch fails with StorageFull, is kept whole, and is written
    once space returns: every job succeeded, once."""
    broker = SQLiteBroker(f"sqlite:///{path}?max_pages={CAP}")
    try:
        broker.enqueue([spec() for _ in range(5)])
        claimed = broker.claim(["q"], 5, 30.0, "w")
        leases = LeaseKeeper(broker, 30.0)
        leases.hold(c.claim for c in claimed)
        backoff = Backoff()
        writer = ResultWriter(broker, leases, Counters(), backoff)
        filler = fill(path)
        big = '"' + "r" * 5000 + '"'  # each result needs pages of its own
        for job in claimed:
            writer.add(Succeeded(job.claim, big))
        writer.flush()
        assert writer.pending == 5 and backoff.errors == 1
        assert all(broker.get_job(j.claim.job_id).state == JobState.CLAIMED for j in claimed)
        filler.execute("DELETE FROM filler")
        filler.close()
        writer.flush()
        assert writer.pending == 0
        assert all(broker.get_job(j.claim.job_id).state == JobState.SUCCEEDED for j in claimed)
        assert all(broker.get_job(j.claim.job_id).result == "r" * 5000 for j in claimed)
    finally:
        broker.close()


def test_errors_of_the_statement_itself_are_not_storage_errors(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE t (k INTEGER UNIQUE)")
        conn.execute("INSERT INTO t VALUES (1)")
        for sql in ("INSERT INTO t VALUES (1)", "SELEC 1", "SELECT * FROM nowhere"):
            with pytest.raises(sqlite3.Error) as caught:
                conn.execute(sql)
            assert storage_error(caught.value, str(path), 0) is None, sql
    finally:
        conn.close()


# ---- the WAL -----------------------------------------------------------------------------


def wal_size(path: Path) -> int:
    try:
        return os.path.getsize(f"{path}-wal")
    except FileNotFoundError:
        return 0


def test_a_wal_over_its_limit_is_truncated_once_readers_let_go(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "WAL_CHECK_EVERY", 0.0)
    monkeypatch.setattr(connections, "CHECKPOINT_WAIT_MS", 50)
    monkeypatch.setattr(connections, "CHECKPOINT_RETRY", (0.2, 0.4))
    broker = SQLiteBroker(f"sqlite:///{path}?wal_limit_mb=1")
    keeper = broker._db.wal
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        broker.enqueue([spec()])
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM jobs").fetchone()  # pins the WAL from here on
        while wal_size(path) < 2_000_000:
            broker.enqueue([spec(args=["x" * 2000]) for _ in range(50)])
        assert keeper.held_off >= 1 and keeper.forced == 0
        reader.execute("COMMIT")  # the reader lets go
        deadline = time.monotonic() + 10
        while keeper.forced == 0 and time.monotonic() < deadline:
            broker.enqueue([spec()])
            time.sleep(0.02)
        assert keeper.forced >= 1
        assert wal_size(path) < 1_000_000
    finally:
        reader.close()
        broker.close()
    app = App(broker=f"sqlite:///{path}", config=False)
    try:
        assert app.broker.stats().to_dict()["queues"]["q"]["ready"] == stored(path)
    finally:
        app.close()
