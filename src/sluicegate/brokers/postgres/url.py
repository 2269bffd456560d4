"""PostgreSQL broker URLs: sluicegate's own options split off a libpq DSN, and redaction."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ...errors import ConfigError
from ..sqlbase import UrlOptions

SCHEMA_PATTERN = re.compile(r"[a-z_][a-z0-9_]{0,49}")
OUR_OPTIONS = {"schema", "migrate", "pool_max", "poll_interval", "call_timeout"}


def parse_postgres_url(url: str) -> tuple[str, dict[str, str]]:
    """Split sluicegate's own options (OUR_OPTIONS: schema, migrate, ...) off a DSN."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in pairs if k in OUR_OPTIONS}
    theirs = [(k, v) for k, v in pairs if k not in OUR_OPTIONS]
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(theirs), ""))
    schema = ours.get("schema", "sluicegate")
    if SCHEMA_PATTERN.fullmatch(schema) is None or schema.startswith("pg_"):
        raise ConfigError(
            f"invalid schema {schema!r} in {url!r}: use 1-50 characters from a-z 0-9 _, "
            "not starting with a digit or pg_"
        )
    try:
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # pragma: no cover - the broker itself says psycopg is needed
        return dsn, ours
    try:
        conninfo_to_dict(dsn)  # libpq's own check: unknown options, bad ports, ...
    except ProgrammingError as exc:
        raise ConfigError(
            f"invalid PostgreSQL URL {redacted(url)!r}: {exc}; sluicegate's own "
            f"options are {', '.join(sorted(OUR_OPTIONS))}"
        ) from None
    return dsn, ours


def redacted(url: str) -> str:
    """``url`` with its password, if any, replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()


def server_of(dsn: str) -> str:
    """host:port/database of a DSN, for messages: never its user or password."""
    parts = urlsplit(dsn)
    return f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path}"


@dataclass(frozen=True, slots=True)
class Settings:
    """A PostgreSQL broker URL, read and checked."""

    dsn: str  # what libpq gets: the URL without sluicegate's own options
    schema: str  # validated: a plain lower-case identifier
    pool_max: int
    poll_interval: float
    migrate: bool
    call_timeout: float | None  # None: automatic (a third of the lease, see deadlines.py)

    @classmethod
    def from_url(cls, url: str) -> Settings:
        dsn, values = parse_postgres_url(url)
        options = UrlOptions("PostgreSQL", redacted(url), values)
        return cls(
            dsn=dsn,
            schema=values.get("schema", "sluicegate"),
            pool_max=options.number("pool_max", 4, int, least=1),
            poll_interval=options.number("poll_interval", 1.0, float, above=0),
            migrate=options.boolean("migrate", True),
            call_timeout=options.number("call_timeout", None, float, above=0),
        )

    @property
    def quoted_schema(self) -> str:
        """Quoting keeps reserved words (user, order, ...) usable as schema names."""
        return f'"{self.schema}"'

    @property
    def channel(self) -> str:
        return f"{self.schema}_jobs"

    @property
    def finished_channel(self) -> str:
        """Where transactions that end jobs NOTIFY processes waiting for results."""
        return f"{self.schema}_finished"

    @property
    def cancel_channel(self) -> str:
        """Where cancels of claimed or running jobs NOTIFY the workers, to stop them."""
        return f"{self.schema}_cancelled"

    @property
    def server(self) -> str:
        return server_of(self.dsn)
