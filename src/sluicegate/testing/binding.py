"""Point a user's App at a test broker for a while, and give it its own back after.

Tasks are bound to their App object (``@app.task``), so a test rebinds the app rather
than making another: ``task.enqueue`` then stores into the test's broker. Unlike
``App.use_broker``, the app's own broker is neither opened nor closed here: it is
handed back as it was (an app built on a Broker instance keeps that instance).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    from ..app import App
    from ..brokers import Broker


@contextlib.contextmanager
def bound_to(app: App, broker: Broker) -> Iterator[App]:
    """``app`` stores into and reads from ``broker`` inside the block; at its end
    ``broker`` is closed and the app's own broker (or URL) is back (``App.borrowing``)."""
    try:
        with app.borrowing(broker):
            yield app
    finally:
        broker.close()


def sqlite_broker(path: Path, clock: Callable[[], float]) -> Broker:
    """A SQLite broker on a new file at ``path``, on ``clock``."""
    from ..brokers.sqlite import SQLiteBroker

    return SQLiteBroker(f"sqlite:///{path.resolve()}", clock=clock)


def fresh_schema_url(dsn: str) -> tuple[str, str]:
    """A broker URL on a new schema of the server ``dsn`` names (any ``schema=`` it has is
    replaced), and that schema's name. The broker creates it when it opens."""
    schema = f"sgtest_{uuid.uuid4().hex[:12]}"
    parts = urlsplit(dsn)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    query.append(("schema", schema))
    return urlunsplit(parts._replace(query=urlencode(query))), schema


def drop_schema(url: str, schema: str) -> None:
    """Drop ``schema`` (and every table in it) from the server of broker URL ``url``."""
    import psycopg

    from ..brokers.postgres import parse_postgres_url

    dsn, _ = parse_postgres_url(url)
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def postgres_broker(url: str, clock: Callable[[], float]) -> Broker:
    from ..brokers.postgres import PostgresBroker

    return PostgresBroker(url, clock=clock)
