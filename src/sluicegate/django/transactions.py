"""How an enqueue meets the caller's Django transaction.

Outside ``transaction.atomic()`` the job is stored at once. Inside one, on PostgreSQL
through psycopg 3, when the broker lives in the same database as Django's connection, the
job is written on Django's own connection: it commits or rolls back with the caller's
rows. Anywhere else (SQLite, another server, psycopg2) it is enqueued on commit
(``transaction.on_commit``), so a rolled-back transaction never leaves a job either.
"""

from __future__ import annotations

from typing import Any

from ..brokers import Broker
from ..errors import BrokerUnavailable

# Identifies a database on a server whatever the path to it (socket, TCP, a host alias):
# its oid, and the server's start time (to the microsecond).
IDENTITY = (
    "SELECT d.oid::text, pg_postmaster_start_time()::text FROM pg_database AS d "
    "WHERE d.datname = current_database()"
)


def raw_psycopg(django_connection: Any) -> Any:
    """Django's psycopg 3 connection under ``django_connection``, or None (another
    database, or psycopg2)."""
    if django_connection.vendor != "postgresql":
        return None
    try:
        import psycopg
    except ImportError:
        return None
    django_connection.ensure_connection()
    raw = django_connection.connection
    return raw if isinstance(raw, psycopg.Connection) else None


def same_database(django_connection: Any, broker: Broker) -> bool:
    """Is ``broker`` a PostgreSQL broker on the very database Django's connection uses?"""
    if raw_psycopg(django_connection) is None:
        return False
    from ..brokers.postgres import PostgresBroker

    if not isinstance(broker, PostgresBroker):
        return False
    import psycopg

    with django_connection.cursor() as cursor:
        cursor.execute(IDENTITY)
        ours = tuple(cursor.fetchone())
    try:
        with psycopg.connect(broker.dsn, autocommit=True, connect_timeout=10) as conn:
            theirs = tuple(conn.execute(IDENTITY).fetchone() or ())
    except psycopg.Error as exc:
        raise BrokerUnavailable(
            f"PostgreSQL unavailable ({broker.settings.server}): {exc}"
        ) from None
    return ours == theirs
