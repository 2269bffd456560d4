"""`sluicegate queues list|pause|resume` and paused queues in `stats`, as a user runs them
(in process, on SQLite and on PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sluicegate import App
from support.brokers import over_brokers
from support.cli import Result, run_cli

pytestmark = over_brokers


def run(folder: Path, url: str, *args: str) -> Result:
    return run_cli(*args, "--broker", url, cwd=folder)


def ok(folder: Path, url: str, *args: str) -> str:
    result = run(folder, url, *args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def listed(folder: Path, url: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(ok(folder, url, "queues", "list", "--json"))
    return rows


def test_pause_resume_and_list(tmp_path: Path, db_url: str, producer: App) -> None:
    producer.enqueue("send", queue="email")
    producer.enqueue("send", queue="email")
    producer.enqueue("build", queue="reports", delay=3600)
    assert [r["queue"] for r in listed(tmp_path, db_url)] == ["email", "reports"]
    assert not any(r["paused"] for r in listed(tmp_path, db_url))

    assert ok(tmp_path, db_url, "queues", "pause", "email", "--by", "alice") == (
        "queue email: paused\n"
    )
    again = ok(tmp_path, db_url, "queues", "pause", "email", "--by", "bob")
    assert again.startswith("queue email: already paused (by alice since ")
    rows = {r["queue"]: r for r in listed(tmp_path, db_url)}
    assert rows["email"]["paused"] is True
    assert rows["email"]["paused_by"] == "alice"
    assert isinstance(rows["email"]["paused_at"], float)
    assert rows["email"]["ready"] == 2
    assert rows["reports"] == {
        "queue": "reports",
        "paused": False,
        "paused_by": None,
        "paused_at": None,
        "ready": 0,
        "scheduled": 1,
        "running": 0,
    }
    table = ok(tmp_path, db_url, "queues", "list")
    assert "paused" in table and "alice" in table

    assert producer.enqueue("send", queue="email").state.value == "ready"  # still accepted
    assert ok(tmp_path, db_url, "queues", "resume", "email") == "queue email: resumed\n"
    assert ok(tmp_path, db_url, "queues", "resume", "email") == (
        "queue email: not paused, nothing to resume\n"
    )
    assert not any(r["paused"] for r in listed(tmp_path, db_url))


def test_a_never_used_queue_can_be_paused(tmp_path: Path, db_url: str) -> None:
    assert ok(tmp_path, db_url, "queues", "pause", "later") == "queue later: paused\n"
    (row,) = listed(tmp_path, db_url)
    assert row["queue"] == "later" and row["paused"] is True
    assert "@" in row["paused_by"]  # user@host by default
    assert row["ready"] == 0


def test_stats_shows_paused_queues(tmp_path: Path, db_url: str, producer: App) -> None:
    producer.enqueue("send", queue="email")
    producer.pause_queue("email", by="ops")
    producer.pause_queue("idle", by="ops")
    data = json.loads(ok(tmp_path, db_url, "stats", "--json"))
    assert data["queues"]["email"]["paused"] is True
    assert data["queues"]["email"]["ready"] == 1
    assert data["queues"]["idle"]["paused"] is True  # a paused queue without jobs has a row
    assert data["queues"]["idle"]["ready"] == 0
    assert [(p["queue"], p["paused_by"]) for p in data["paused_queues"]] == [
        ("email", "ops"),
        ("idle", "ops"),
    ]
    assert "queue email: paused by ops since " in ok(tmp_path, db_url, "stats")
    producer.resume_queue("email")
    data = json.loads(ok(tmp_path, db_url, "stats", "--json"))
    assert data["queues"]["email"]["paused"] is False


@pytest.mark.parametrize("action", ["pause", "resume"])
@pytest.mark.parametrize("bad", ["has space", "a/b", "x" * 128, ""])
def test_bad_names_exit_2_with_the_rule(tmp_path: Path, db_url: str, action: str, bad: str) -> None:
    result = run(tmp_path, db_url, "queues", action, bad)
    assert result.returncode == 2, result.stdout
    assert "invalid queue name" in result.stderr
    assert "1-127 characters" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_by_exits_2(tmp_path: Path, db_url: str) -> None:
    result = run(tmp_path, db_url, "queues", "pause", "email", "--by", "x" * 201)
    assert result.returncode == 2
    assert "invalid pause 'by'" in result.stderr
    assert listed(tmp_path, db_url) == []


def test_missing_name_is_a_usage_error(tmp_path: Path, db_url: str) -> None:
    result = run(tmp_path, db_url, "queues", "pause")
    assert result.returncode == 2
    assert "Missing argument 'NAME'" in result.stderr
