"""Which broker a worker or chaos test runs its real worker processes on.

``sqlite``: a file in the test's folder. ``postgresql``: a fresh schema on the server
tests/pgserver.py finds (``SLUICEGATE_TEST_POSTGRES`` or a throwaway cluster), dropped
when the test ends. Without a server a PostgreSQL test is skipped with the reason, or
fails when CI requires one (``SLUICEGATE_REQUIRE_POSTGRES=1``).

A test module opts in with ``pytestmark = over_brokers`` (both) or ``only_postgresql``;
the fixture ``broker_name`` (default ``sqlite``) then carries the parameter.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

import pgserver  # noqa: E402
from pgserver import require_postgres  # noqa: E402

BROKERS = ("sqlite", "postgresql")
over_brokers = pytest.mark.parametrize("broker_name", BROKERS, indirect=True)
only_postgresql = pytest.mark.parametrize("broker_name", ["postgresql"], indirect=True)


@contextlib.contextmanager
def broker_url(name: str, folder: Path) -> Iterator[str]:
    """A broker URL for one test; a PostgreSQL schema is dropped when the block exits."""
    if name == "sqlite":
        yield f"sqlite:///{(folder / 'jobs.db').resolve()}"
        return
    if name != "postgresql":
        raise ValueError(f"unknown broker {name!r}")
    require_postgres()
    url, schema = pgserver.fresh_url()
    try:
        yield url
    finally:
        pgserver.drop_schema(schema)


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
