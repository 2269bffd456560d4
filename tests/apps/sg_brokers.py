"""Moved to tests/support/brokers.py; kept while tests move their imports."""

from support.brokers import (  # noqa: F401
    BROKERS,
    broker_url,
    connect,
    only_postgresql,
    over_brokers,
    plain_dsn,
    rewrite,
    row_lockable,
    schema_of,
)
