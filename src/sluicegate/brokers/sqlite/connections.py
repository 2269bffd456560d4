"""The SQLite broker's storage: its URL, its two connections and the transactions on them.

Every write is one ``BEGIN IMMEDIATE`` transaction on a single writer connection per
process (a Python lock orders this process's writers, so they never spin in SQLite's
busy handler against each other). Reads for stats and listings use a second
connection and never take the write lock.

Storage trouble becomes sluicegate's errors here, never a raw ``sqlite3`` one: a write
lock held elsewhere for longer than ``busy_timeout`` is ``BrokerBusy``, a full disk (or
the ``max_pages`` cap) ``StorageFull``, an I/O or open failure ``BrokerUnavailable``;
in every case the transaction was rolled back. Errors that are the caller's or the
code's (a unique key taken, a bad statement) pass through unchanged.

After a commit, a writer that finds the WAL file over ``wal_limit_mb`` runs a
``TRUNCATE`` checkpoint (see ``WalKeeper``): readers that keep overlapping can stop
SQLite's own checkpoints from ever resetting the log, which then grows without bound.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

from ...errors import BrokerBusy, BrokerUnavailable, ConfigError, StorageFull
from ..sqlbase import UrlOptions

log = logging.getLogger("sluicegate.broker")

SYNC_MODES = ("off", "normal", "full", "extra")
OPTIONS = ("synchronous", "busy_timeout", "poll_interval", "max_pages", "wal_limit_mb")
BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
# Primary result codes that mean the storage, not the statement, failed.
OUTAGE_CODES = frozenset(
    {
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_PROTOCOL,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_PERM,
        sqlite3.SQLITE_NOLFS,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_NOTADB,
    }
)
WAL_CHECK_EVERY = 0.1  # s: the most often a writer looks at the WAL file's size
CHECKPOINT_WAIT_MS = 1000  # how long a forced checkpoint waits for readers (writers wait too)
CHECKPOINT_RETRY = (1.0, 30.0)  # s: first and longest pause after readers held one off


def parse_sqlite_url(url: str) -> tuple[str, dict[str, str]]:
    """``sqlite:///relative.db`` or ``sqlite:////absolute.db``; options as query parameters."""
    parts = urlsplit(url)
    if parts.netloc:
        raise ConfigError(
            f"invalid SQLite URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
        )
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not path or path == ":memory:":
        raise ConfigError(
            f"invalid SQLite URL {url!r}: a file path is required (use memory:// for an in-memory broker)"
        )
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    UrlOptions("SQLite", url, options).only(OPTIONS)
    return path, options


def storage_error(exc: sqlite3.Error, path: str, busy_ms: int) -> BrokerUnavailable | None:
    """sluicegate's error for a storage failure; None for an error of the statement itself
    (a constraint, a syntax error, a misuse), which is a bug or the caller's to handle."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if code in BUSY_CODES:
        return BrokerBusy(
            f"SQLite database {path!r} is locked by another connection "
            f"(waited up to busy_timeout={busy_ms} ms): {exc}"
        )
    if code == sqlite3.SQLITE_FULL:
        return StorageFull(
            f"SQLite database {path!r} is full (no space on its disk, or at its max_pages "
            f"cap): {exc}; nothing was written"
        )
    if code in OUTAGE_CODES:
        return BrokerUnavailable(f"SQLite database {path!r} is unavailable: {exc}")
    return None


class Connections:
    """The writer connection (opened at once) and the reader (``open_reader``, once the
    schema is migrated), each behind its own lock.

    ``busy_ms``: how long a write waits for the write lock (this process's other threads
    first, then other processes) before ``BrokerBusy``. ``max_pages``: PRAGMA
    max_page_count on the writer (None: SQLite's own). ``wal_limit``: the WAL size in
    bytes over which a writer forces a checkpoint (0: never)."""

    def __init__(
        self,
        path: str,
        sync: str,
        busy_ms: int,
        max_pages: int | None = None,
        wal_limit: int = 0,
    ) -> None:
        self.path = path
        self.sync = sync
        self._busy_ms = busy_ms
        self._max_pages = max_pages
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self.wal = WalKeeper(path, wal_limit, busy_ms)
        self._writer = self._connect(writer=True)
        self._reader: sqlite3.Connection

    def open_reader(self) -> None:
        self._reader = self._connect()

    def _connect(self, writer: bool = False) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self._busy_ms / 1000,
            )
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.sync}")
            if writer:
                if self._max_pages is not None:
                    conn.execute(f"PRAGMA max_page_count = {self._max_pages}")
                if self.wal.limit:  # the WAL file shrinks back to the limit when reset
                    conn.execute(f"PRAGMA journal_size_limit = {self.wal.limit}")
        except sqlite3.Error as exc:
            error = storage_error(exc, self.path, self._busy_ms)
            if isinstance(error, BrokerBusy | StorageFull):
                raise error from None
            raise BrokerUnavailable(f"cannot open SQLite database {self.path!r}: {exc}") from None
        return conn

    def _translated(self, exc: sqlite3.Error) -> BrokerUnavailable | None:
        return storage_error(exc, self.path, self._busy_ms)

    @contextlib.contextmanager
    def write(self, relaxed: bool = False) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction on the writer connection; committed when the
        block ends, rolled back when it raises (or when SQLite rolled it back itself, as
        it does on a full disk). Waits at most ``busy_ms`` in all for the write lock.

        ``relaxed``: a write whose loss in a power cut is harmless (a claim, which is then
        claimed again and its holder's ack refused; a start, which leaves the job "claimed")
        commits without its own fsync (synchronous=NORMAL: still synced at checkpoints, and
        by the next full commit, which syncs the whole WAL)."""
        began = time.monotonic()
        if not self._write_lock.acquire(timeout=self._busy_ms / 1000):
            raise BrokerBusy(
                f"SQLite database {self.path!r} is locked by this process's other writers "
                f"(waited busy_timeout={self._busy_ms} ms)"
            )
        try:
            conn = self._writer
            waited_ms = int((time.monotonic() - began) * 1000)
            relax = relaxed and self.sync in ("full", "extra")
            try:
                if relax:
                    conn.execute("PRAGMA synchronous = NORMAL")
                self._begin(conn, waited_ms)
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:  # SQLite rolls back on its own after some errors
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                error = self._translated(exc)
                if error is None:
                    raise
                raise error from None
            finally:
                if relax:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute(f"PRAGMA synchronous = {self.sync}")
            self.wal.after_commit(conn)
        finally:
            self._write_lock.release()

    def _begin(self, conn: sqlite3.Connection, waited_ms: int) -> None:
        """BEGIN IMMEDIATE, with what is left of the busy timeout after waiting for this
        process's other writers (rarely more than a few ms)."""
        if waited_ms < 5:
            conn.execute("BEGIN IMMEDIATE")
            return
        conn.execute(f"PRAGMA busy_timeout = {max(0, self._busy_ms - waited_ms)}")
        try:
            conn.execute("BEGIN IMMEDIATE")
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self._read_lock:
            try:
                yield self._reader
            except sqlite3.Error as exc:
                error = self._translated(exc)
                if error is None:
                    raise
                raise error from None

    @contextlib.contextmanager
    def peek(self) -> Iterator[sqlite3.Connection]:
        """The writer connection for reads outside any transaction (the schema version
        before the reader is open): no write lock, so never waits for another writer."""
        with self._write_lock:
            try:
                yield self._writer
            except sqlite3.Error as exc:
                error = self._translated(exc)
                if error is None:
                    raise
                raise error from None

    def data_version(self, blocking: bool) -> int | None:
        """PRAGMA data_version, read on the writer connection: it changes when another
        connection commits, so this broker's own writes never count. None when the writer
        is busy and ``blocking`` is false, or on an error."""
        if not self._write_lock.acquire(blocking):
            return None
        try:
            return int(self._writer.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            return None
        finally:
            self._write_lock.release()

    def close(self) -> None:
        with self._write_lock:
            self._writer.close()
        with self._read_lock:
            self._reader.close()


class WalKeeper:
    """Keeps the WAL file near ``limit`` bytes.

    SQLite checkpoints on its own every 1000 pages (~4 MB), but a checkpoint can only
    copy what no reader still sees, and the log restarts from its beginning only when a
    checkpoint caught up with every reader. Readers that keep overlapping (a ``stats``
    loop, a dashboard, a backup) can keep that from ever happening, and the WAL grows for
    as long as writes go on. So after a commit (looking at most every WAL_CHECK_EVERY s)
    a writer that finds the file over the limit runs ``PRAGMA wal_checkpoint(TRUNCATE)``:
    it waits up to CHECKPOINT_WAIT_MS for the readers in the way to finish (new writers
    wait meanwhile; new readers do not), copies the log into the database and truncates
    it to zero bytes. When a reader outlasts the wait the checkpoint gives up, the commit
    stands, and the next try comes after a pause that doubles (CHECKPOINT_RETRY), so a
    reader that never lets go costs writers a second every 30 s, not every commit."""

    def __init__(self, path: str, limit: int, busy_ms: int) -> None:
        self.file = f"{path}-wal"
        self.limit = limit
        self._busy_ms = busy_ms
        self._look_at = 0.0  # monotonic: the next time the file's size is worth a stat
        self._pause = 0.0  # after a checkpoint readers held off; 0.0 when the last succeeded
        self.forced = 0  # checkpoints that truncated the WAL (read by tests)
        self.held_off = 0  # checkpoints a reader kept from finishing

    def after_commit(self, conn: sqlite3.Connection) -> None:
        """Never raises: the commit before it stands whatever happens here."""
        if not self.limit:
            return
        now = time.monotonic()
        if now < self._look_at:
            return
        self._look_at = now + WAL_CHECK_EVERY
        try:
            size = os.stat(self.file).st_size
        except OSError:
            return
        if size > self.limit:
            self._checkpoint(conn, size, now)

    def _checkpoint(self, conn: sqlite3.Connection, size: int, now: float) -> None:
        try:
            conn.execute(f"PRAGMA busy_timeout = {min(self._busy_ms, CHECKPOINT_WAIT_MS)}")
            try:
                held_off = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            finally:
                conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        except sqlite3.Error as exc:
            log.warning("checkpoint of %s failed: %s", self.file, exc)
            held_off = 1
        if not held_off:
            self.forced += 1
            self._pause = 0.0
            log.info("WAL %s was %.1f MB: checkpointed and truncated", self.file, size / 1e6)
            return
        self.held_off += 1
        first, longest = CHECKPOINT_RETRY
        self._pause = min(max(self._pause * 2, first), longest)
        self._look_at = now + self._pause
        log.warning(
            "WAL %s is %.1f MB (over wal_limit_mb): a reader or writer held off the "
            "checkpoint; trying again in %.0f s",
            self.file,
            size / 1e6,
            self._pause,
        )
