"""`sluicegate limits list|set|reset` and `jobs show`'s waiting_for, as a user runs them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from sluicegate import App
from sluicegate.limits import Limit
from support.cli import run_cli

APP_SOURCE = textwrap.dedent(
    """
    from sluicegate import App
    app = App(config=False)
    app.limit("db", concurrency=1)
    app.limit("mail", rate="10/s", partition="account")

    @app.task(limits=["db"])
    def report(n):
        pass

    @app.task(limits=["mail"])
    def send(to, account):
        pass
    """
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "limitapp.py").write_text(APP_SOURCE)
    broker = App(broker=f"sqlite:///{tmp_path / 'sluicegate.db'}").broker
    broker.register_limits(
        [Limit("db", concurrency=1), Limit("mail", rate=10.0, partition="account")]
    )
    broker.close()
    return tmp_path


def limits(folder: Path) -> dict[str, dict[str, object]]:
    result = run_cli("limits", "list", "--json", cwd=folder)
    assert result.returncode == 0, result.stderr
    return {line["name"]: line for line in json.loads(result.stdout)}


def test_list_set_reset(folder: Path) -> None:
    assert limits(folder)["db"]["concurrency"] == 1
    result = run_cli("limits", "set", "db", "--concurrency", "3", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "limit db: 3 at once, global"
    shown = limits(folder)["db"]
    assert (shown["concurrency"], shown["set_by_operator"]) == (3, True)
    assert (
        run_cli("limits", "reset", "db", cwd=folder).stdout.strip() == "limit db: 1 at once, global"
    )
    assert limits(folder)["db"]["set_by_operator"] is False
    bad = run_cli("limits", "set", "nope", "--concurrency", "2", cwd=folder)
    assert bad.returncode != 0 and "no limit named 'nope'" in bad.stderr
    assert run_cli("limits", "set", "db", cwd=folder).returncode == 2  # nothing to set


def test_jobs_show_says_which_limit_a_job_waits_for(folder: Path) -> None:
    first = run_cli("enqueue", "report", "--args", "[1]", "--app", "limitapp:app", cwd=folder)
    second = run_cli("enqueue", "report", "--args", "[2]", "--app", "limitapp:app", cwd=folder)
    assert first.returncode == 0 and second.returncode == 0, first.stderr
    broker = App(broker=f"sqlite:///{folder / 'sluicegate.db'}").broker
    assert len(broker.claim(["default"], 5, 30.0, "w")) == 1  # the first holds "db"
    broker.close()
    shown = json.loads(run_cli("jobs", "show", second.stdout.strip(), "--json", cwd=folder).stdout)
    assert shown["waiting_for"] == "limit db: 1 of 1 in use"
    assert shown["limits"] == [{"limit": "db", "partition": None, "cost": 1}]
    assert limits(folder)["db"]["in_use"] == 1 and limits(folder)["db"]["waiting"] == 1


def test_enqueue_limit_key_partitions_and_needs_the_app(folder: Path) -> None:
    done = run_cli(
        "enqueue", "send", "--args", '["a@b", "x"]', "--limit-key", "acct-9",
        "--app", "limitapp:app", cwd=folder,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = json.loads(run_cli("jobs", "show", done.stdout.strip(), "--json", cwd=folder).stdout)
    assert shown["limits"] == [{"limit": "mail", "partition": "acct-9", "cost": 1}]
    alone = run_cli("enqueue", "send", "--limit-key", "acct-9", cwd=folder)
    assert alone.returncode == 2 and "--limit-key needs --app" in alone.stderr
