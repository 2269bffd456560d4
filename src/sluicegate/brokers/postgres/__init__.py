"""The PostgreSQL broker, in parts: ``url`` (options, redaction), ``connections`` (pools,
checkout, error translation, quiet pool logs), ``deadlines`` (how long a call may take,
and the watchdog that ends it), ``listener`` (LISTEN/NOTIFY wake-ups), ``fate``
(writes of unknown fate), ``inserts`` (rows in), ``gated`` (limits: the gated claim and
the limit verbs) and ``broker`` (the verbs). Importing this package needs no psycopg;
opening a broker does."""

from __future__ import annotations

from .broker import LISTEN_WAIT, PostgresBroker
from .connections import CONNECT_DEFAULTS, RECONNECT_CAP, TASK_POOL_MAX, QuietPoolTrouble
from .fate import MAYBE_WRITTEN_MAX
from .listener import LISTEN_IDLE
from .url import OUR_OPTIONS, SCHEMA_PATTERN, parse_postgres_url, redacted

__all__ = [
    "CONNECT_DEFAULTS",
    "LISTEN_IDLE",
    "LISTEN_WAIT",
    "MAYBE_WRITTEN_MAX",
    "OUR_OPTIONS",
    "RECONNECT_CAP",
    "SCHEMA_PATTERN",
    "TASK_POOL_MAX",
    "PostgresBroker",
    "QuietPoolTrouble",
    "parse_postgres_url",
    "redacted",
]
