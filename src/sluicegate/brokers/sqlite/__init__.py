"""The embedded default broker: one SQLite file in WAL mode, for one machine.

In parts: ``connections`` (the URL, the writer and reader connections, the write
transactions), ``watch`` (wake-ups from other processes: a doorbell, and ``PRAGMA
data_version`` polled cheaply by one watcher thread) and ``broker`` (the verbs).
"""

from __future__ import annotations

from .broker import SQLiteBroker, job_columns
from .connections import OPTIONS, SYNC_MODES, parse_sqlite_url
from .watch import BELL_CHECK

__all__ = ["BELL_CHECK", "OPTIONS", "SYNC_MODES", "SQLiteBroker", "job_columns", "parse_sqlite_url"]
