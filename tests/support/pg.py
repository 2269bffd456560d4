"""Find a PostgreSQL server for the tests, or start a throwaway one, or say why not.

Order: ``SLUICEGATE_TEST_POSTGRES`` (a DSN) when set; else a throwaway cluster made with
initdb/pg_ctl found on PATH or under /usr/lib/postgresql/*/bin; else None with a reason.
With ``SLUICEGATE_REQUIRE_POSTGRES=1`` (CI), having no server is an error, not a skip.

Schemas: ``lend()`` gives a test a migrated, empty schema; ``give_back`` truncates it for
the next test of the same process (each pytest-xdist worker keeps its own few), so a
schema is migrated once per worker, not once per test. A schema whose structure a test
changed (a table added, a column altered, its version moved) is dropped instead of
reused. ``fresh_url()`` makes a schema that does not exist yet, for tests of migration
itself; drop it with ``drop_schema``. A test that restarts its server makes a
``Cluster`` of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import re
import shutil
import socket
import subprocess
import tempfile
import uuid
from functools import cache
from typing import Any
from urllib.parse import urlsplit

ENV_DSN = "SLUICEGATE_TEST_POSTGRES"
ENV_REQUIRE = "SLUICEGATE_REQUIRE_POSTGRES"


def required() -> bool:
    return os.environ.get(ENV_REQUIRE, "") not in ("", "0", "false", "no")


def find_binaries() -> str | None:
    """The folder of initdb and pg_ctl: on PATH, or the newest /usr/lib/postgresql/*/bin."""
    initdb = shutil.which("initdb")
    if initdb:
        return os.path.dirname(initdb)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    return os.path.dirname(found[0]) if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """A throwaway PostgreSQL cluster of one's own (initdb in a temporary folder, trust
    authentication, fsync off), for the test run or for a test that stops or restarts its
    server. ``start()`` makes and starts it; ``restart(mode)`` is ``pg_ctl restart``;
    ``stop()`` stops it and removes the folder (also at exit)."""

    def __init__(self, bindir: str) -> None:
        self.bindir = bindir
        self.root = tempfile.mkdtemp(prefix="sluicegate-pg-")
        self.data = os.path.join(self.root, "data")
        self.log = os.path.join(self.root, "log")
        self.port = _free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._run_as: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root: use the postgres account
            self._run_as = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres")
        self._stopped = False

    def _pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [*self._run_as, f"{self.bindir}/pg_ctl", "-D", self.data, *args],
            check=check,
            capture_output=True,
        )

    def start(self) -> str:
        subprocess.run(
            [
                *self._run_as,
                f"{self.bindir}/initdb",
                "-D",
                self.data,
                "-U",
                "postgres",
                "-A",
                "trust",
            ],
            check=True,
            capture_output=True,
        )
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._pg_ctl("-w", "-l", self.log, "-o", options, "start")
        atexit.register(self.stop)
        return self.dsn

    def restart(self, mode: str = "immediate") -> None:
        """``pg_ctl restart -m MODE``, waiting until the server accepts connections again
        (the options of the first start are kept)."""
        self._pg_ctl("-w", "-l", self.log, "-m", mode, "restart")

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._pg_ctl("-m", "immediate", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def _unreachable(dsn: str) -> str | None:
    """Why the server behind ``dsn`` cannot be used, or None when a connection works."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[dev]')"
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.Error as exc:
        return f"cannot connect: {str(exc).strip()[:200]}"
    return None


@cache
def server() -> tuple[str | None, str]:
    """(DSN, how it was found) or (None, why there is none)."""
    dsn = os.environ.get(ENV_DSN)
    if dsn:
        problem = _unreachable(dsn)
        if problem:
            return None, f"{ENV_DSN}={redacted(dsn)}: {problem}"
        return dsn, f"{ENV_DSN}"
    bindir = find_binaries()
    if bindir is None:
        return None, f"no PostgreSQL: set {ENV_DSN} or put initdb/pg_ctl on PATH"
    try:
        return Cluster(bindir).start(), f"throwaway cluster from {bindir}"
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        return (
            None,
            f"could not start a throwaway cluster from {bindir}: {exc} {detail.decode()[:200]}",
        )


def fresh_url(extra: str = "") -> tuple[str, str]:
    """A broker URL on its own new schema, and the schema's name (drop it with drop_schema)."""
    dsn, why = server()
    if dsn is None:
        raise RuntimeError(why)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    return _url_of(dsn, schema, extra), schema


class SchemaPool:
    """This process's migrated schemas: lent to one test at a time, truncated between.

    Reset is TRUNCATE ... RESTART IDENTITY of every table but the version table, then the
    rows the migrations seeded (copied when the schema was made) put back; it is checked
    by a fingerprint of the schema's tables, columns, indexes and version, which must
    match the pristine one or the schema is dropped. A reset that cannot take its locks
    within a few seconds (a connection left inside a transaction) drops the schema too."""

    LOCK_WAIT = "3s"

    def __init__(self) -> None:
        self._free: list[str] = []
        self._made = 0
        self._prefix = f"t{os.getpid()}_{uuid.uuid4().hex[:4]}_"
        self._pristine: str | None = None  # the fingerprint of a just-migrated schema
        self._seeds: dict[str, bytes] = {}  # table -> its seeded rows (COPY binary)
        self._tables: list[str] = []
        self._all: set[str] = set()
        self._conn: Any = None  # one autocommit admin connection, kept between tests
        atexit.register(self.drop_all)

    def _admin(self) -> Any:
        import psycopg

        if self._conn is None or self._conn.closed:
            dsn, why = server()
            if dsn is None:
                raise RuntimeError(why)
            self._conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
        return self._conn

    def lend(self) -> tuple[str, str]:
        """(broker URL, schema name) of a migrated, empty schema."""
        dsn, why = server()
        if dsn is None:
            raise RuntimeError(why)
        schema = self._free.pop() if self._free else self._make(dsn)
        return _url_of(dsn, schema), schema

    def give_back(self, schema: str) -> None:
        import psycopg

        try:
            conn = self._admin()
            if self._fingerprint(conn, schema) != self._pristine:
                self._drop(conn, schema)
                return
            with conn.transaction():
                conn.execute(self._reset_sql(schema))
                for table, rows in self._seeds.items():
                    copying = f"COPY {schema}.{table} FROM STDIN (FORMAT binary)"
                    with conn.cursor().copy(copying) as copy:
                        copy.write(rows)
        except psycopg.Error:  # locks not granted, or the server went: never reuse it
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
                drop_schema(schema)
            self._all.discard(schema)
            return
        self._free.append(schema)

    def _reset_sql(self, schema: str) -> str:
        """One round trip. TRUNCATE, not DELETE: it gives the tables new, empty files, so
        the planner sees what it sees in a new schema (no pages of dead rows; the plan
        tests depend on it), and RESTART IDENTITY restarts the job ids at 1."""
        tables = ", ".join(f"{schema}.{table}" for table in self._tables)
        return ";\n".join(
            [
                f"SET LOCAL lock_timeout = '{self.LOCK_WAIT}'",
                "SET LOCAL synchronous_commit = off",  # a test schema: no need to wait for disk
                f"TRUNCATE {tables} RESTART IDENTITY",
            ]
        )

    def _make(self, dsn: str) -> str:
        from sluicegate.brokers.postgres import PostgresBroker

        self._made += 1
        schema = f"{self._prefix}{self._made}"
        self._all.add(schema)
        PostgresBroker(_url_of(dsn, schema)).close()  # creates and migrates it
        if self._pristine is None:
            self._learn(schema)
        return schema

    def _learn(self, schema: str) -> None:
        """From the first schema made: its fingerprint, its tables, the rows seeded."""
        conn = self._admin()
        self._pristine = self._fingerprint(conn, schema)
        listed = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s "
            "AND tablename <> 'schema_version' ORDER BY tablename",
            (schema,),
        )
        self._tables = [r[0] for r in listed]
        for table in self._tables:
            if conn.execute(f"SELECT EXISTS (SELECT FROM {schema}.{table})").fetchone()[0]:
                buffer = bytearray()
                with conn.cursor().copy(f"COPY {schema}.{table} TO STDOUT (FORMAT binary)") as copy:
                    for chunk in copy:
                        buffer += chunk
                self._seeds[table] = bytes(buffer)

    @staticmethod
    def _fingerprint(conn: Any, schema: str) -> str:
        """The schema's relations (tables, indexes, sequences) with their columns, its
        functions and its version, as one string with the schema's name taken out."""
        row = conn.execute(
            """
            SELECT
              (SELECT string_agg(c.relname || ':' || c.relkind::text || '(' || coalesce(
                   (SELECT string_agg(a.attname || ' ' || a.atttypid::regtype::text
                                      || CASE WHEN a.attnotnull THEN '!' ELSE '' END
                                      || CASE WHEN a.atthasdef THEN '=' ELSE '' END,
                                      ',' ORDER BY a.attnum)
                      FROM pg_attribute a
                     WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
                   '') || ')', ';' ORDER BY c.relname)
                 FROM pg_class c WHERE c.relnamespace = %(s)s::regnamespace),
              (SELECT string_agg(p.proname, ',' ORDER BY p.proname)
                 FROM pg_proc p WHERE p.pronamespace = %(s)s::regnamespace)
            """,
            {"s": schema},
        ).fetchone()
        version = conn.execute(
            f"SELECT coalesce(string_agg(version::text, ',' ORDER BY version), '') "
            f"FROM {schema}.schema_version"
        ).fetchone()
        return repr((*row, version[0])).replace(schema, "<schema>")

    def _drop(self, conn: Any, schema: str) -> None:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        self._all.discard(schema)

    def drop_all(self) -> None:
        """Drop every schema this pool made (at the end of the process)."""
        if not self._all or server.cache_info().currsize == 0:
            return
        import psycopg

        with contextlib.suppress(psycopg.Error, RuntimeError):
            conn = self._admin()
            for schema in sorted(self._all):
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            conn.close()
        self._all.clear()
        self._free.clear()


def _url_of(dsn: str, schema: str, extra: str = "") -> str:
    sep = "&" if "?" in dsn else "?"
    return f"{dsn}{sep}schema={schema}{extra}"


POOL = SchemaPool()


def lend() -> tuple[str, str]:
    """A migrated, empty schema of this process's pool: (URL, schema); ``give_back`` it."""
    return POOL.lend()


def give_back(schema: str) -> None:
    POOL.give_back(schema)


def drop_schema(schema: str) -> None:
    import psycopg

    dsn, _ = server()
    assert dsn is not None
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def redacted(dsn: str) -> str:
    """The DSN without its password, for printing."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


@cache
def server_version(dsn: str) -> str:
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            row = conn.execute("SHOW server_version").fetchone()
    except psycopg.Error as exc:
        return f"unreachable: {str(exc).strip()[:200]}"
    return f"PostgreSQL {row[0] if row else '?'}"


def describe(final: bool) -> str:
    """One line on which PostgreSQL the run uses (or used), or why its tests skip or fail."""
    if server.cache_info().currsize == 0:  # no test asked for a server (yet)
        if final:
            return "not used in this run"
        dsn = os.environ.get(ENV_DSN)
        source = f"{redacted(dsn)} from {ENV_DSN}" if dsn else "a throwaway cluster if needed"
        return source + (f" ({ENV_REQUIRE}=1: no skipping)" if required() else "")
    dsn, how = server()
    if dsn is None:
        verdict = f"REQUIRED ({ENV_REQUIRE}=1) but unavailable" if required() else "tests skipped"
        return f"{verdict}: {how}"
    return f"{redacted(dsn)} ({how}), {server_version(dsn)}"


def require_postgres() -> str:
    import pytest

    """The test server's DSN; skips the test without one, or fails it when CI requires one."""
    dsn, why = server()
    if dsn is None:
        if required():
            pytest.fail(
                f"PostgreSQL is required ({ENV_REQUIRE}=1) but unavailable: {why}",
                pytrace=False,
            )
        pytest.skip(f"PostgreSQL unavailable: {why}")
    return dsn


def generic_plan(conn: Any, query: str, params: dict[str, Any]) -> str:
    """EXPLAIN ANALYZE of ``query`` on the plan the broker's connections use: the generic
    one (PREPARE, then EXECUTE with plan_cache_mode=force_generic_plan), rolled back."""
    import psycopg.sql

    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", number, query).rstrip().rstrip(";")
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute("SET jit = off")
    conn.execute(f"PREPARE generic AS {prepared}")
    values = psycopg.sql.SQL(", ").join(psycopg.sql.Literal(params[k]) for k in order)
    plan = conn.execute(
        psycopg.sql.SQL("EXPLAIN (ANALYZE) EXECUTE generic({})").format(values)
    ).fetchall()
    conn.rollback()
    return "\n".join(r[0] for r in plan)
