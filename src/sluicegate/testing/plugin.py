"""The sluicegate pytest plugin: fixtures that bind your app to a fresh broker per test.

Registered by entry point (``pytest11``), so installing sluicegate is all it takes, with
no conftest code. Importing it is cheap and does nothing (pytest and the sluicegate
package only); each fixture opens what it needs when a test asks for it.

- ``sluicegate_app``: the app under test. The ini option ``sluicegate_app =
  myproject.tasks:app`` names yours; without it, a fresh ``App`` (register tasks on it in
  the test). Override the fixture to build it otherwise.
- ``sluicegate_clock``: a FakeClock at the real time (whole seconds) when the test starts, which moves
  only when told (``sluicegate_clock.advance(60)``): the brokers below run on it.
- ``sluicegate_sqlite``: the app bound to a new SQLite file in the test's tmp_path.
- ``sluicegate_postgres``: the app bound to a new schema (dropped after the test) of the
  server named by ``SLUICEGATE_TEST_POSTGRES`` or the ini option ``sluicegate_postgres``;
  skipped, saying so, when neither is set (failed instead when
  ``SLUICEGATE_REQUIRE_POSTGRES=1``).
- ``sluicegate_any``: each of the two in turn (a test taking it runs twice).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..app import App
    from .clock import FakeClock

ENV_POSTGRES = "SLUICEGATE_TEST_POSTGRES"
ENV_REQUIRE = "SLUICEGATE_REQUIRE_POSTGRES"
INI_APP = "sluicegate_app"
INI_POSTGRES = "sluicegate_postgres"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(INI_APP, "MODULE:APP of the app the sluicegate fixtures bind to test brokers")
    parser.addini(
        INI_POSTGRES,
        f"PostgreSQL DSN for the sluicegate_postgres fixture (${ENV_POSTGRES} wins over it)",
    )


def postgres_dsn(config: pytest.Config) -> str:
    """The configured DSN; skips the test without one (fails it when one is required)."""
    dsn = os.environ.get(ENV_POSTGRES) or str(config.getini(INI_POSTGRES) or "")
    if not dsn:
        why = f"no PostgreSQL configured: set {ENV_POSTGRES} or the ini option {INI_POSTGRES}"
        if os.environ.get(ENV_REQUIRE, "") not in ("", "0", "false", "no"):
            pytest.fail(f"{why} ({ENV_REQUIRE} is set)", pytrace=False)
        pytest.skip(why)
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed: pip install 'sluicegate[postgres]'")
    return dsn


@pytest.fixture
def sluicegate_app(request: pytest.FixtureRequest) -> App:
    """The app under test: the ini option ``sluicegate_app`` (MODULE:APP), or a new App."""
    target = str(request.config.getini(INI_APP) or "")
    if target:
        from ..loading import load_app

        return load_app(target)
    from ..app import App

    return App(config=False)


@pytest.fixture
def sluicegate_clock() -> FakeClock:
    """Test time: starts at the real time (a whole second), moves only on ``advance``.

    A whole second: PostgreSQL keeps times to the microsecond, so a clock with finer
    digits would read a job's due time back a rounding away from the time it set."""
    from .clock import FakeClock

    return FakeClock(float(int(time.time())))


@pytest.fixture
def sluicegate_sqlite(
    sluicegate_app: App, sluicegate_clock: FakeClock, tmp_path: Path
) -> Iterator[App]:
    """``sluicegate_app`` on a new SQLite file, on ``sluicegate_clock``."""
    from .binding import bound_to, sqlite_broker

    broker = sqlite_broker(tmp_path / "sluicegate.db", sluicegate_clock)
    with bound_to(sluicegate_app, broker) as app:
        yield app


@pytest.fixture
def sluicegate_postgres(
    request: pytest.FixtureRequest, sluicegate_app: App, sluicegate_clock: FakeClock
) -> Iterator[App]:
    """``sluicegate_app`` on a new PostgreSQL schema, on ``sluicegate_clock``."""
    from .binding import bound_to, drop_schema, fresh_schema_url, postgres_broker

    url, schema = fresh_schema_url(postgres_dsn(request.config))
    try:
        with bound_to(sluicegate_app, postgres_broker(url, sluicegate_clock)) as app:
            yield app
    finally:
        drop_schema(url, schema)


@pytest.fixture(params=["sqlite", "postgresql"])
def sluicegate_any(request: pytest.FixtureRequest) -> App:
    """``sluicegate_sqlite``, then ``sluicegate_postgres``."""
    name = "sluicegate_sqlite" if request.param == "sqlite" else "sluicegate_postgres"
    app: App = request.getfixturevalue(name)
    return app
