"""Scratch PostgreSQL schemas for the benchmarks: one fresh schema per measurement.

A benchmark given ``postgresql://user@host:port/db?schema=bench`` measures in
``bench_<random>`` schemas, created by the broker's own migration on first use and
dropped afterwards (``DROP SCHEMA ... CASCADE``), so runs never see each other's rows.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sluicegate.brokers.postgres import parse_postgres_url

SCHEMA_MAX = 50  # the broker's limit on schema names


def is_postgres(url: str | None) -> bool:
    return bool(url) and url.split("://", 1)[0] in ("postgresql", "postgres")  # type: ignore[union-attr]


def with_schema(url: str, schema: str) -> str:
    """``url`` with its ``schema=`` option replaced (or added)."""
    parts = urlsplit(url)
    pairs = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    return urlunsplit(parts._replace(query=urlencode([*pairs, ("schema", schema)])))


def scratch_url(url: str) -> str:
    """``url`` pointed at a new schema named after its own (default ``bench``) plus a suffix."""
    base = dict(parse_qsl(urlsplit(url).query)).get("schema", "bench")
    suffix = secrets.token_hex(4)
    return with_schema(url, f"{base[: SCHEMA_MAX - len(suffix) - 1]}_{suffix}")


def connect(url: str, autocommit: bool = True):  # type: ignore[no-untyped-def]
    """A plain psycopg connection to the database a broker URL names."""
    import psycopg

    dsn, _ = parse_postgres_url(url)
    return psycopg.connect(dsn, autocommit=autocommit)


def schema_of(url: str) -> str:
    return parse_postgres_url(url)[1].get("schema", "sluicegate")


def drop_schema(url: str) -> None:
    with connect(url) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema_of(url)} CASCADE")


@contextlib.contextmanager
def scratch_schema(url: str) -> Iterator[str]:
    """A broker URL on a fresh schema, dropped on exit (also after an error)."""
    fresh = scratch_url(url)
    try:
        yield fresh
    finally:
        drop_schema(fresh)


def listeners(url: str) -> int:
    """How many sessions have LISTENed on the broker's channel (the worker's wake-ups)."""
    with connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN %%' "
            "AND replace(query, '\"', '') ILIKE %s",
            (f"%{schema_of(url)}_jobs",),
        ).fetchone()
    return int(row[0]) if row else 0


def server_info(url: str) -> str:
    """Server version and the settings that move the figures."""
    names = ("synchronous_commit", "fsync", "shared_buffers", "max_connections", "autovacuum")
    with connect(url) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        values = [f"{n}={conn.execute(f'SHOW {n}').fetchone()[0]}" for n in names]  # type: ignore[index]
        host = conn.info.host
    return f"PostgreSQL {version.split()[0]} at {host}, " + ", ".join(values)
