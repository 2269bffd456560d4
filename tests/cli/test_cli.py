"""The CLI as users run it: real subprocesses, real SQLite files, exit codes and stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

APP_SOURCE = textwrap.dedent(
    """
    from sluicegate import App

    app = App()

    @app.task(queue="email", max_attempts=5, priority=3)
    def send_reset(user_id):
        return user_id
    """
)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "myapp.py").write_text(APP_SOURCE)
    return tmp_path


def run(
    workdir: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("SLUICEGATE_BROKER", None) if env is None else None
    return subprocess.run(
        [sys.executable, "-m", "sluicegate.cli", *args],
        cwd=workdir,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_enqueue_defaults_to_sqlite_file_in_current_folder(workdir: Path) -> None:
    result = run(workdir, "enqueue", "send_reset", "--args", "[42]")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"
    assert (workdir / "sluicegate.db").exists()
    shown = json.loads(run(workdir, "jobs", "show", "1", "--json").stdout)
    assert shown["queue"] == "default"  # without --app: --queue or default
    assert shown["args"] == [42]
    assert shown["state"] == "ready"


def test_enqueue_with_app_applies_task_options(workdir: Path) -> None:
    result = run(workdir, "enqueue", "send_reset", "--args", "[7]", "--app", "myapp:app")
    assert result.returncode == 0, result.stderr
    shown = json.loads(run(workdir, "jobs", "show", result.stdout.strip(), "--json").stdout)
    assert (shown["queue"], shown["max_attempts"], shown["priority"]) == ("email", 5, 3)


def test_enqueue_with_app_applies_the_settings_file_of_the_folder(workdir: Path) -> None:
    (workdir / "sluicegate.toml").write_text('[tasks.send_reset]\nqueue = "other"\n')
    result = run(workdir, "enqueue", "send_reset", "--app", "myapp:app")
    assert result.returncode == 0, result.stderr
    shown = json.loads(run(workdir, "jobs", "show", result.stdout.strip(), "--json").stdout)
    assert (shown["queue"], shown["max_attempts"]) == ("other", 5)
    # Without --app there are no tasks for [tasks.NAME] to name: the file is not read.
    bare = run(workdir, "enqueue", "send_reset")
    assert bare.returncode == 0, bare.stderr
    shown = json.loads(run(workdir, "jobs", "show", bare.stdout.strip(), "--json").stdout)
    assert shown["queue"] == "default"


def test_enqueue_options_and_unique_key(workdir: Path) -> None:
    args = [
        "enqueue",
        "report",
        "--kwargs",
        '{"day": "mon"}',
        "--queue",
        "reports",
        "--delay",
        "60",
        "--priority",
        "-1",
        "--unique-key",
        "report-mon",
    ]
    first = run(workdir, *args)
    second = run(workdir, *args)
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout  # same unfinished job returned
    shown = json.loads(run(workdir, "jobs", "show", first.stdout.strip(), "--json").stdout)
    assert shown["state"] == "scheduled"
    assert shown["kwargs"] == {"day": "mon"}
    assert shown["priority"] == -1


def test_broker_env_and_flag(workdir: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/other.db"
    assert run(workdir, "enqueue", "t", env={"SLUICEGATE_BROKER": url}).returncode == 0
    stats = json.loads(run(workdir, "stats", "--json", "--broker", url).stdout)
    assert stats["queues"]["default"]["ready"] == 1
    stats = json.loads(run(workdir, "--broker", url, "stats", "--json").stdout)
    assert stats["queues"]["default"]["ready"] == 1
    assert not (workdir / "sluicegate.db").exists()


def test_stats_json_shape(workdir: Path) -> None:
    run(workdir, "enqueue", "send_reset", "--queue", "email")
    data = json.loads(run(workdir, "stats", "--json").stdout)
    # The keys stats has always printed are kept; the cluster view adds the rest.
    assert set(data) == {"queues", "pools", "workers", "tasks", "limits", "hosts", "paused_queues"}
    assert set(data["queues"]["email"]) == {
        "scheduled",
        "ready",
        "claimed",
        "running",
        "succeeded",
        "dead",
        "cancelled",
        "oldest_ready_age_s",
        "enqueue_rate",
        "completion_rate",
        "duration_p50_s",
        "duration_p95_s",
        "paused",
        "predicted_wait_s",  # admission (docs/admission.md)
        "predicted_wait_unserved",
    }
    assert data["queues"]["email"]["ready"] == 1
    assert data["queues"]["email"]["predicted_wait_unserved"] is True  # no worker serves it
    assert data["queues"]["email"]["enqueue_rate"] is None  # no worker watches it
    assert (data["pools"], data["workers"]) == ({}, [])


def test_jobs_list_filters_and_json(workdir: Path) -> None:
    for queue in ("a", "b", "b"):
        run(workdir, "enqueue", "t", "--queue", queue)
    listed = json.loads(run(workdir, "jobs", "list", "--queue", "b", "--json").stdout)
    assert [j["queue"] for j in listed] == ["b", "b"]
    assert [j["id"] for j in listed] == [3, 2]  # newest first
    limited = json.loads(run(workdir, "jobs", "list", "--limit", "1", "--json").stdout)
    assert len(limited) == 1
    table = run(workdir, "jobs", "list", "--state", "ready")
    assert table.returncode == 0 and "ready" in table.stdout


def test_jobs_list_by_task_unique_key_and_pages(workdir: Path) -> None:
    for task, key in (("a", None), ("b", "k"), ("a", None), ("b", None), ("a", "k2")):
        run(workdir, "enqueue", task, *(["--unique-key", key] if key else []))

    def ids(*args: str) -> list[int]:
        result = run(workdir, "jobs", "list", *args, "--json")
        assert result.returncode == 0, result.stderr
        return [j["id"] for j in json.loads(result.stdout)]

    assert ids("--task", "a") == [5, 3, 1]
    assert ids("--unique-key", "k") == [2]
    assert ids("--task", "b", "--unique-key", "k") == [2]
    assert ids("--task", "a", "--limit", "2") == [5, 3]
    assert ids("--task", "a", "--limit", "2", "--before", "3") == [1]
    assert ids("--before", "3", "--state", "ready") == [2, 1]
    table = run(workdir, "jobs", "list", "--task", "a", "--limit", "2")
    assert "next page: --before 3" in table.stdout  # a full page says where the next starts
    assert "next page" not in run(workdir, "jobs", "list", "--task", "a").stdout
    bad = run(workdir, "jobs", "list", "--before", "x")
    assert bad.returncode == 2 and "--before" in bad.stderr


def test_jobs_show_prints_the_history(workdir: Path) -> None:
    run(workdir, "enqueue", "t")
    assert "history: none off the happy path" in run(workdir, "jobs", "show", "1").stdout
    run(workdir, "jobs", "cancel", "1")
    run(workdir, "jobs", "retry", "1")
    shown = json.loads(run(workdir, "jobs", "show", "1", "--json").stdout)
    assert [(e["event"], e["from"]) for e in shown["history"]] == [
        ("cancelled", "ready"),
        ("retried", "cancelled"),
    ]
    text = run(workdir, "jobs", "show", "1").stdout
    assert "history: 2" in text and '"event": "retried"' in text


def test_cancel_records_who_asked(workdir: Path) -> None:
    run(workdir, "enqueue", "t")
    run(workdir, "enqueue", "t")
    assert run(workdir, "jobs", "cancel", "1", "--by", "alice: a duplicate").stdout == (
        "job 1 is cancelled\n"  # it waited: nothing to stop
    )
    run(workdir, "jobs", "cancel", "2")
    first, second = (
        json.loads(run(workdir, "jobs", "show", job, "--json").stdout)["history"][-1]
        for job in ("1", "2")
    )
    assert (first["event"], first["from"], first["by"]) == (
        "cancelled",
        "ready",
        "alice: a duplicate",
    )
    assert second["by"].count("@") == 1  # not said: the caller's user@host
    bad = run(workdir, "jobs", "cancel", "1", "--by", "x" * 201)
    assert bad.returncode == 2 and "invalid cancel 'by'" in bad.stderr


def test_cancel_and_retry(workdir: Path) -> None:
    run(workdir, "enqueue", "t")
    assert "cancelled" in run(workdir, "jobs", "cancel", "1").stdout
    again = run(workdir, "jobs", "cancel", "1")
    assert again.returncode == 1 and "cannot cancel job 1" in again.stderr
    assert "ready" in run(workdir, "jobs", "retry", "1").stdout
    refused = run(workdir, "jobs", "retry", "1")
    assert refused.returncode == 1 and "cannot retry job 1" in refused.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["jobs", "show", "999"], "job 999 not found"),
        (["jobs", "cancel", "999"], "job 999 not found"),
        (["jobs", "retry", "999"], "job 999 not found"),
    ],
)
def test_missing_job_is_a_clear_nonzero_exit(workdir: Path, args: list[str], message: str) -> None:
    result = run(workdir, *args)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--broker", "redis://x", "stats"], "unknown broker URL scheme 'redis'"),
        (["stats", "--broker", "sqlite:////no/such/dir/x.db"], "does not exist"),
        (["worker", "myapp:app", "--pool", "email"], "malformed pool spec 'email'"),
        (["worker", "myapp:app", "--pool", "e=email:x"], "SLOTS must be an integer"),
        (["worker", "myapp:app", "--pool", "e=em ail:2"], "invalid queue name"),
        (["worker", "myapp:app", "--pool", "e=email:0"], "slots must be between"),
        (["worker", "myapp:app", "--pool", "e=email:2:fibers"], "unknown model 'fibers'"),
        (["worker", "no_such_module:app"], "cannot import app module 'no_such_module'"),
        (["worker", "myapp:nothing"], "is not a sluicegate App"),
        (["worker", "myapp"], "MODULE:APP"),
        (["enqueue", "t", "--args", "[1"], "--args is not valid JSON"),
        (["enqueue", "t", "--args", '{"a": 1}'], "--args must be an array"),
        (["enqueue", "t", "--kwargs", "[1]"], "--kwargs must be an object"),
        (["enqueue", "bad name"], "invalid task name"),
        (["enqueue", "t", "--queue", "x" * 128], "invalid queue name"),
    ],
)
def test_bad_input_is_one_line_exit_2(workdir: Path, args: list[str], message: str) -> None:
    result = run(workdir, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_payload_over_limit_stores_nothing(workdir: Path) -> None:
    (workdir / "smallapp.py").write_text(
        "from sluicegate import App\napp = App(payload_limit=64)\n"
    )
    big = json.dumps(["x" * 100])
    result = run(workdir, "enqueue", "t", "--args", big, "--app", "smallapp:app")
    assert result.returncode == 2
    assert "over the limit" in result.stderr
    listed = run(workdir, "jobs", "list", "--json")
    assert json.loads(listed.stdout) == []


def test_every_command_has_useful_help(workdir: Path) -> None:
    for args in (
        ["--help"],
        ["worker", "--help"],
        ["enqueue", "--help"],
        ["jobs", "--help"],
        ["jobs", "list", "--help"],
        ["jobs", "show", "--help"],
        ["stats", "--help"],
        ["demo", "--help"],
    ):
        result = run(workdir, *args)
        assert result.returncode == 0
        assert "--broker" in result.stdout or args[0] in ("jobs", "demo")


def test_migrate_and_prune_commands(workdir: Path) -> None:
    first = run(workdir, "migrate")
    assert first.returncode == 0 and "applied migration(s): 1" in first.stdout
    again = run(workdir, "migrate")
    assert again.returncode == 0 and "up to date" in again.stdout
    run(workdir, "enqueue", "t")
    run(workdir, "jobs", "cancel", "1")
    kept = run(workdir, "prune")
    assert kept.returncode == 0 and "pruned 0 job(s)" in kept.stdout
    gone = run(workdir, "prune", "--keep-cancelled-days", "0")
    assert "pruned 1 job(s)" in gone.stdout
    assert json.loads(run(workdir, "jobs", "list", "--json").stdout) == []
    bad = run(workdir, "prune", "--keep-dead-days", "-1")
    assert bad.returncode == 2


def test_retention_defaults_are_the_brokers() -> None:
    """--keep-*-days default to Retention(), in days, for both commands that take them."""
    from sluicegate.brokers.base import DAY, Retention
    from sluicegate.cli import prune, worker

    expected = {
        f"keep_{state.value}_days": seconds / DAY
        for state, seconds in Retention().by_state().items()
    }
    for command in (worker, prune):
        defaults = {p.name: p.default for p in command.params if p.name in expected}
        assert defaults == expected
