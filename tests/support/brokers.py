"""Which brokers a test runs on: one table of broker kinds, and the marks made from it.

``KINDS`` serves the in-process tests (the conformance suite's ``broker`` fixture takes
every kind, through ``broker_kind``); ``over_brokers`` serves tests of real worker
processes, which need storage other processes can open (SQLite and PostgreSQL). To add
a broker, add one ``BrokerKind`` here.

SQLite is a file in the test's folder. PostgreSQL is a migrated, empty schema lent from
this process's pool (support/pg.py) and given back, emptied, when the test ends; without
a server its tests are skipped with the reason, or fail when CI requires one
(``SLUICEGATE_REQUIRE_POSTGRES=1``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from sluicegate.brokers.base import Broker
from sluicegate.brokers.memory import MemoryBroker
from sluicegate.brokers.sqlite import SQLiteBroker
from sluicegate.testing import BrokerKind
from support import pg

# Schemas lent during the current test; given back by the autouse fixture at its end.
LENT: list[str] = []


def sqlite_url(path: Path) -> str:
    """``sqlite:////ABS/PATH`` for a path."""
    return f"sqlite:///{path.resolve()}"


def postgres_url(folder: Path | None = None) -> str:
    """A URL on a migrated, empty schema of the test server, for this test only."""
    pg.require_postgres()
    url, schema = pg.lend()
    LENT.append(schema)
    return url


def give_back_lent(first: int = 0) -> None:
    """Give back (empty) the schemas lent since ``LENT[first]``."""
    while len(LENT) > first:
        pg.give_back(LENT.pop())


def postgres_done(url: str) -> None:
    """The test is finished with ``url``'s schema: give it back now (emptied), so the
    next example of a property test gets it again rather than a new one."""
    schema = schema_of(url)
    if schema in LENT:
        LENT.remove(schema)
        pg.give_back(schema)


def _open_postgres(url: str, clock: Callable[[], float]) -> Broker:
    from sluicegate.brokers.postgres import PostgresBroker

    return PostgresBroker(url, clock=clock)


KINDS: dict[str, BrokerKind] = {
    "memory": BrokerKind(
        "memory",
        lambda tmp: "memory://",
        lambda url, clock: MemoryBroker(url, clock=clock),
        shared=False,
        multiprocess=False,
    ),
    "sqlite": BrokerKind(
        "sqlite",
        lambda tmp: sqlite_url(tmp / "jobs.db"),
        lambda url, clock: SQLiteBroker(url, clock=clock),
        shared=True,
        multiprocess=True,
    ),
    "postgresql": BrokerKind(
        "postgresql",
        postgres_url,
        _open_postgres,
        shared=True,
        multiprocess=True,
        done=postgres_done,
    ),
}

# Real worker processes: the kinds other processes can open.
BROKERS = tuple(name for name, kind in KINDS.items() if kind.multiprocess)
over_brokers = pytest.mark.parametrize("broker_name", BROKERS, indirect=True)
only_postgresql = pytest.mark.parametrize("broker_name", ["postgresql"], indirect=True)


def broker_url(name: str, folder: Path) -> str:
    """The URL of broker kind ``name`` for one test (storage in ``folder``)."""
    if name not in BROKERS:
        raise ValueError(f"unknown broker {name!r} (one of {', '.join(BROKERS)})")
    return KINDS[name].url(folder)


def schema_of(url: str) -> str:
    return dict(parse_qsl(urlsplit(url).query)).get("schema", "sluicegate")


def plain_dsn(url: str) -> str:
    """The libpq DSN of a broker URL, without sluicegate's own options (schema, ...)."""
    from sluicegate.brokers.postgres import parse_postgres_url

    return parse_postgres_url(url)[0]


def connect(url: str, **options: Any) -> Any:
    """A direct autocommit psycopg connection to the server a broker URL names."""
    import psycopg

    return psycopg.connect(plain_dsn(url), autocommit=True, connect_timeout=10, **options)


def rewrite(url: str, *, port: int | None = None, **params: str) -> str:
    """The same URL through 127.0.0.1:``port`` and/or with extra query parameters."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if port is not None:
        user = netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{port}" if user else f"127.0.0.1:{port}"
    query = urlencode([*parse_qsl(parts.query), *params.items()])
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def row_lockable(url: str, job_id: int) -> bool:
    """Could another session lock this job's row right now (nobody holds it in a
    transaction)? The PostgreSQL twin of "the SQLite file is writable"."""
    import psycopg

    with connect(url) as conn:
        try:
            with conn.transaction():
                conn.execute("SET LOCAL lock_timeout = '200ms'")
                conn.execute(
                    f"SELECT 1 FROM {schema_of(url)}.jobs WHERE id = %s FOR UPDATE", (job_id,)
                )
        except psycopg.errors.LockNotAvailable:
            return False
    return True
