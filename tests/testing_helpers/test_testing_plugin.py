"""The pytest plugin: registered by entry point, cheap and inert to import, and its
fixtures bind an app to a test broker and give it its own back afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from sg_plugin_pg import plugin_pg_env, repo_sluicegate_postgres  # noqa: F401

from sluicegate import App
from sluicegate.brokers.memory import MemoryBroker
from sluicegate.testing import FakeClock, bound_to, drain

IMPORT_PROBE = """
import json, os, sys
env, files = dict(os.environ), sorted(os.listdir("."))
import pytest
before = set(sys.modules)
import sluicegate.testing.plugin
import sluicegate.testing
new = sorted(set(sys.modules) - before)
print(json.dumps({
    "env_same": dict(os.environ) == env,
    "files_same": sorted(os.listdir(".")) == files,
    "new": new,
}))
"""


def test_the_plugin_is_registered_by_entry_point(pytestconfig: pytest.Config) -> None:
    [found] = [e for e in entry_points(group="pytest11") if e.name == "sluicegate"]
    assert found.value == "sluicegate.testing.plugin"
    assert pytestconfig.pluginmanager.hasplugin("sluicegate")


def test_importing_the_plugin_opens_nothing_and_changes_nothing(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    found = json.loads(out)
    assert found["env_same"] and found["files_same"]
    heavy = [
        name
        for name in found["new"]
        if name.startswith(("sluicegate.worker", "psycopg", "sqlite3"))
        or name.startswith(
            tuple(f"sluicegate.brokers.{b}" for b in ("memory", "sqlite", "postgres"))
        )
        or name in {"sluicegate.testing.drain", "sluicegate.testing.running"}
    ]
    assert heavy == [], heavy


def test_bound_to_gives_the_app_its_own_broker_back_unclosed() -> None:
    own = MemoryBroker()
    app = App(broker=own, config=False)

    @app.task
    def noted(n: int) -> int:
        return n

    noted.enqueue(1)
    test_broker = MemoryBroker(clock=FakeClock())
    with bound_to(app, test_broker):
        noted.enqueue(2)
        assert app.broker is test_broker
        assert drain(app).succeeded == 1
    assert app.broker is own
    assert [job.args for job in own.list_jobs()] == [[1]]
    noted.enqueue(3)  # the app's own broker is still open
    assert len(own.list_jobs()) == 2
    app.close()


def test_the_sqlite_fixture_is_a_fresh_file_on_the_test_clock(
    sluicegate_sqlite: App, sluicegate_clock: FakeClock, tmp_path: Path
) -> None:
    assert sluicegate_sqlite.broker.url == f"sqlite:///{(tmp_path / 'sluicegate.db').resolve()}"
    assert sluicegate_sqlite.broker.list_jobs() == []
    job = sluicegate_sqlite.enqueue("anything", args=[], delay=30)
    assert job.run_at == sluicegate_clock() + 30  # the clock stands still between reads
    sluicegate_clock.advance(30)
    assert sluicegate_sqlite.broker.next_due([job.queue]) == 0


def test_the_postgres_fixture_is_a_fresh_schema(sluicegate_postgres: App) -> None:
    broker = sluicegate_postgres.broker
    assert broker.url.split("schema=")[1].startswith("sgtest_")
    assert broker.list_jobs() == []


class TestAnAppOfItsOwn:
    """A test module (or class) may give its own app by overriding ``sluicegate_app``."""

    @pytest.fixture
    def sluicegate_app(self) -> App:
        app = App(broker="memory://", config=False)

        @app.task(queue="mine")
        def mine() -> str:
            return "ran"

        return app

    def test_it_is_the_one_bound(self, sluicegate_sqlite: App) -> None:
        assert "mine" in sluicegate_sqlite.tasks
        sluicegate_sqlite.enqueue("mine")
        assert drain(sluicegate_sqlite).jobs["succeeded"][0].result == "ran"
