"""The SQLite broker's storage: its URL, its two connections and the transactions on them.

Every write is one ``BEGIN IMMEDIATE`` transaction on a single writer connection per
process (a Python lock orders this process's writers, so they never spin in SQLite's
busy handler against each other). Reads for stats and listings use a second
connection and never take the write lock.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

from ...errors import BrokerUnavailable, ConfigError
from ..sqlbase import UrlOptions

SYNC_MODES = ("off", "normal", "full", "extra")
OPTIONS = ("synchronous", "busy_timeout", "poll_interval")


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


class Connections:
    """The writer connection (opened at once) and the reader (``open_reader``, once the
    schema is migrated), each behind its own lock."""

    def __init__(self, path: str, sync: str, busy_ms: int) -> None:
        self.path = path
        self.sync = sync
        self._busy_ms = busy_ms
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._writer = self._connect()
        self._reader: sqlite3.Connection

    def open_reader(self) -> None:
        self._reader = self._connect()

    def _connect(self) -> sqlite3.Connection:
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
        except sqlite3.Error as exc:
            raise BrokerUnavailable(f"cannot open SQLite database {self.path!r}: {exc}") from None
        return conn

    @contextlib.contextmanager
    def write(self, relaxed: bool = False) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction on the writer connection.

        ``relaxed``: a write whose loss in a power cut is harmless (a claim, which is then
        claimed again and its holder's ack refused; a start, which leaves the job "claimed")
        commits without its own fsync (synchronous=NORMAL: still synced at checkpoints, and
        by the next full commit, which syncs the whole WAL)."""
        with self._write_lock:
            conn = self._writer
            relax = relaxed and self.sync in ("full", "extra")
            if relax:
                conn.execute("PRAGMA synchronous = NORMAL")
            try:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as exc:
                    raise BrokerUnavailable(
                        f"SQLite database {self.path!r} is busy: {exc}"
                    ) from None
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                if relax:
                    conn.execute(f"PRAGMA synchronous = {self.sync}")

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self._read_lock:
            yield self._reader

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
