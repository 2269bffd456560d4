"""The CLI as users run it: real SQLite files, exit codes and stderr. In process (through
support.cli.run_cli), except the smoke tests that need a real process: the exit status of
a failing command, ``--help`` through the installed script, SLUICEGATE_BROKER read from
the real environment."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from support.cli import run_cli, run_cli_process

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


def test_enqueue_defaults_to_sqlite_file_in_current_folder(workdir: Path) -> None:
    result = run_cli("enqueue", "send_reset", "--args", "[42]", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"
    assert (workdir / "sluicegate.db").exists()
    shown = json.loads(run_cli("jobs", "show", "1", "--json", cwd=workdir).stdout)
    assert shown["queue"] == "default"  # without --app: --queue or default
    assert shown["args"] == [42]
    assert shown["state"] == "ready"


def test_enqueue_with_app_applies_task_options(workdir: Path) -> None:
    result = run_cli("enqueue", "send_reset", "--args", "[7]", "--app", "myapp:app", cwd=workdir)
    assert result.returncode == 0, result.stderr
    shown = json.loads(run_cli("jobs", "show", result.stdout.strip(), "--json", cwd=workdir).stdout)
    assert (shown["queue"], shown["max_attempts"], shown["priority"]) == ("email", 5, 3)


def test_enqueue_with_app_applies_the_settings_file_of_the_folder(workdir: Path) -> None:
    (workdir / "sluicegate.toml").write_text('[tasks.send_reset]\nqueue = "other"\n')
    result = run_cli("enqueue", "send_reset", "--app", "myapp:app", cwd=workdir)
    assert result.returncode == 0, result.stderr
    shown = json.loads(run_cli("jobs", "show", result.stdout.strip(), "--json", cwd=workdir).stdout)
    assert (shown["queue"], shown["max_attempts"]) == ("other", 5)
    # Without --app there are no tasks for [tasks.NAME] to name: the file is not read.
    bare = run_cli("enqueue", "send_reset", cwd=workdir)
    assert bare.returncode == 0, bare.stderr
    shown = json.loads(run_cli("jobs", "show", bare.stdout.strip(), "--json", cwd=workdir).stdout)
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
    first = run_cli(*args, cwd=workdir)
    second = run_cli(*args, cwd=workdir)
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout  # same unfinished job returned
    shown = json.loads(run_cli("jobs", "show", first.stdout.strip(), "--json", cwd=workdir).stdout)
    assert shown["state"] == "scheduled"
    assert shown["kwargs"] == {"day": "mon"}
    assert shown["priority"] == -1


def test_broker_env_and_flag(workdir: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/other.db"
    # A real process reads SLUICEGATE_BROKER from its real environment (smoke test).
    enqueued = run_cli_process("enqueue", "t", cwd=workdir, env={"SLUICEGATE_BROKER": url})
    assert enqueued.returncode == 0
    stats = json.loads(run_cli("stats", "--json", "--broker", url, cwd=workdir).stdout)
    assert stats["queues"]["default"]["ready"] == 1
    stats = json.loads(run_cli("--broker", url, "stats", "--json", cwd=workdir).stdout)
    assert stats["queues"]["default"]["ready"] == 1
    assert not (workdir / "sluicegate.db").exists()


def test_stats_json_shape(workdir: Path) -> None:
    run_cli("enqueue", "send_reset", "--queue", "email", cwd=workdir)
    data = json.loads(run_cli("stats", "--json", cwd=workdir).stdout)
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
        run_cli("enqueue", "t", "--queue", queue, cwd=workdir)
    listed = json.loads(run_cli("jobs", "list", "--queue", "b", "--json", cwd=workdir).stdout)
    assert [j["queue"] for j in listed] == ["b", "b"]
    assert [j["id"] for j in listed] == [3, 2]  # newest first
    limited = json.loads(run_cli("jobs", "list", "--limit", "1", "--json", cwd=workdir).stdout)
    assert len(limited) == 1
    table = run_cli("jobs", "list", "--state", "ready", cwd=workdir)
    assert table.returncode == 0 and "ready" in table.stdout


def test_jobs_list_by_task_unique_key_and_pages(workdir: Path) -> None:
    for task, key in (("a", None), ("b", "k"), ("a", None), ("b", None), ("a", "k2")):
        run_cli("enqueue", task, *(["--unique-key", key] if key else []), cwd=workdir)

    def ids(*args: str) -> list[int]:
        result = run_cli("jobs", "list", *args, "--json", cwd=workdir)
        assert result.returncode == 0, result.stderr
        return [j["id"] for j in json.loads(result.stdout)]

    assert ids("--task", "a") == [5, 3, 1]
    assert ids("--unique-key", "k") == [2]
    assert ids("--task", "b", "--unique-key", "k") == [2]
    assert ids("--task", "a", "--limit", "2") == [5, 3]
    assert ids("--task", "a", "--limit", "2", "--before", "3") == [1]
    assert ids("--before", "3", "--state", "ready") == [2, 1]
    table = run_cli("jobs", "list", "--task", "a", "--limit", "2", cwd=workdir)
    assert "next page: --before 3" in table.stdout  # a full page says where the next starts
    assert "next page" not in run_cli("jobs", "list", "--task", "a", cwd=workdir).stdout
    bad = run_cli("jobs", "list", "--before", "x", cwd=workdir)
    assert bad.returncode == 2 and "--before" in bad.stderr


def test_jobs_show_prints_the_history(workdir: Path) -> None:
    run_cli("enqueue", "t", cwd=workdir)
    assert "history: none off the happy path" in run_cli("jobs", "show", "1", cwd=workdir).stdout
    run_cli("jobs", "cancel", "1", cwd=workdir)
    run_cli("jobs", "retry", "1", cwd=workdir)
    shown = json.loads(run_cli("jobs", "show", "1", "--json", cwd=workdir).stdout)
    assert [(e["event"], e["from"]) for e in shown["history"]] == [
        ("cancelled", "ready"),
        ("retried", "cancelled"),
    ]
    text = run_cli("jobs", "show", "1", cwd=workdir).stdout
    assert "history: 2" in text and '"event": "retried"' in text


def test_cancel_records_who_asked(workdir: Path) -> None:
    run_cli("enqueue", "t", cwd=workdir)
    run_cli("enqueue", "t", cwd=workdir)
    assert run_cli("jobs", "cancel", "1", "--by", "alice: a duplicate", cwd=workdir).stdout == (
        "job 1 is cancelled\n"  # it waited: nothing to stop
    )
    run_cli("jobs", "cancel", "2", cwd=workdir)
    first, second = (
        json.loads(run_cli("jobs", "show", job, "--json", cwd=workdir).stdout)["history"][-1]
        for job in ("1", "2")
    )
    assert (first["event"], first["from"], first["by"]) == (
        "cancelled",
        "ready",
        "alice: a duplicate",
    )
    assert second["by"].count("@") == 1  # not said: the caller's user@host
    bad = run_cli("jobs", "cancel", "1", "--by", "x" * 201, cwd=workdir)
    assert bad.returncode == 2 and "invalid cancel 'by'" in bad.stderr


def test_cancel_and_retry(workdir: Path) -> None:
    run_cli("enqueue", "t", cwd=workdir)
    assert "cancelled" in run_cli("jobs", "cancel", "1", cwd=workdir).stdout
    again = run_cli("jobs", "cancel", "1", cwd=workdir)
    assert again.returncode == 1 and "cannot cancel job 1" in again.stderr
    assert "ready" in run_cli("jobs", "retry", "1", cwd=workdir).stdout
    refused = run_cli("jobs", "retry", "1", cwd=workdir)
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
    # A real process (smoke test): its real exit status, and no traceback on its stderr.
    result = run_cli_process(*args, cwd=workdir)
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
    result = run_cli(*args, cwd=workdir)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_payload_over_limit_stores_nothing(workdir: Path) -> None:
    (workdir / "smallapp.py").write_text(
        "from sluicegate import App\napp = App(payload_limit=64)\n"
    )
    big = json.dumps(["x" * 100])
    result = run_cli("enqueue", "t", "--args", big, "--app", "smallapp:app", cwd=workdir)
    assert result.returncode == 2
    assert "over the limit" in result.stderr
    listed = run_cli("jobs", "list", "--json", cwd=workdir)
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
        # The top-level --help through the installed script, a real process (smoke test).
        run = run_cli_process if args == ["--help"] else run_cli
        result = run(*args, cwd=workdir)
        assert result.returncode == 0
        assert "--broker" in result.stdout or args[0] in ("jobs", "demo")


def test_migrate_and_prune_commands(workdir: Path) -> None:
    first = run_cli("migrate", cwd=workdir)
    assert first.returncode == 0 and "applied migration(s): 1" in first.stdout
    again = run_cli("migrate", cwd=workdir)
    assert again.returncode == 0 and "up to date" in again.stdout
    run_cli("enqueue", "t", cwd=workdir)
    run_cli("jobs", "cancel", "1", cwd=workdir)
    kept = run_cli("prune", cwd=workdir)
    assert kept.returncode == 0 and "pruned 0 job(s)" in kept.stdout
    gone = run_cli("prune", "--keep-cancelled-days", "0", cwd=workdir)
    assert "pruned 1 job(s)" in gone.stdout
    assert json.loads(run_cli("jobs", "list", "--json", cwd=workdir).stdout) == []
    bad = run_cli("prune", "--keep-dead-days", "-1", cwd=workdir)
    assert bad.returncode == 2


def test_commands_close_the_app_they_opened(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command's broker does not outlive it, however the command ends: run in one
    process (an embedding, this suite), PostgreSQL connections and their pools' threads
    used to stay open after every command."""
    from sluicegate import App

    closed: list[App] = []
    close = App.close

    def recording(self: App) -> None:
        closed.append(self)
        close(self)

    monkeypatch.setattr(App, "close", recording)
    assert run_cli("enqueue", "t", cwd=workdir).exit_code == 0
    assert run_cli("jobs", "show", "999", cwd=workdir).exit_code == 1  # a failure: closed too
    assert run_cli("enqueue", "send_reset", "--app", "myapp:app", cwd=workdir).exit_code == 0
    assert (
        run_cli("worker", "myapp:app", "--pool", "e=email:1", "--burst", cwd=workdir).exit_code == 0
    )
    assert len(closed) == len({id(app) for app in closed}) == 4


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
