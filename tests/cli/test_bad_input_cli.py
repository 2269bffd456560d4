"""Bad input at the command line, as users type it (in process, on a SQLite file):
each gets one clear line on stderr from sluicegate's own errors and an exit status, never
a traceback, and changes nothing; the few documented outcomes (a negative delay) hold."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from support.cli import Result, run_cli

APP_SOURCE = textwrap.dedent(
    """
    from sluicegate import App

    app = App()

    @app.task(queue="q")
    def t(*args):
        return len(args)
    """
)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "myapp.py").write_text(APP_SOURCE)
    return tmp_path


def one_line(result: Result, code: int, expected: str) -> None:
    """The command failed with ``code`` and said ``expected`` on one stderr line."""
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [f"sluicegate: {expected}"], result.stderr


def listed(workdir: Path) -> list[dict[str, object]]:
    jobs: list[dict[str, object]] = json.loads(
        run_cli("jobs", "list", "--json", cwd=workdir).stdout
    )
    return jobs


NOT_AN_ID = "a job id is an integer or its decimal text"


def test_job_ids_that_are_not_integers(workdir: Path) -> None:
    assert run_cli("enqueue", "t", cwd=workdir).returncode == 0
    for bad in ("abc", "5.5", "", "1e3"):
        one_line(
            run_cli("jobs", "show", bad, cwd=workdir), 1, f"no job has id {bad!r}: {NOT_AN_ID}"
        )
    one_line(run_cli("jobs", "retry", "x1", cwd=workdir), 1, f"no job has id 'x1': {NOT_AN_ID}")
    one_line(run_cli("jobs", "cancel", "1.0", cwd=workdir), 1, f"no job has id '1.0': {NOT_AN_ID}")
    one_line(run_cli("jobs", "show", str(10**30), cwd=workdir), 1, f"job {10**30} not found")
    # its decimal text, spaces and all
    shown = run_cli("jobs", "show", " 1 ", "--json", cwd=workdir)
    assert shown.returncode == 0 and json.loads(shown.stdout)["state"] == "ready"


ENQUEUE_ERRORS = [
    (["--delay", "nan"], "task 't': delay must be a finite number of seconds, not nan"),
    (["--delay", "inf"], "task 't': delay must be a finite number of seconds, not inf"),
    (["--priority", str(2**31)], "task 't': priority 2147483648 is out of range"),
    (["--max-attempts", str(2**31)], "task 't': max_attempts must be at most 2147483647"),
    (["--args", "[NaN]"], "task 't': argument 0 (Out of range float values are not JSON"),
    (["--args", '["\\ud800"]'], "task 't': argument 0 (a string holds a lone surrogate"),
    (["--args", "[" * 10_000 + "]" * 10_000], "--args is nested too deeply"),
    (["--kwargs", '{"x": Infinity}'], "task 't': keyword argument 'x' (Out of range float"),
]


@pytest.mark.parametrize(("options", "expected"), ENQUEUE_ERRORS)
def test_enqueue_refuses_what_no_broker_can_store(
    workdir: Path, options: list[str], expected: str
) -> None:
    result = run_cli("enqueue", "t", *options, cwd=workdir)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"sluicegate: {expected}"), line
    assert listed(workdir) == []


def test_a_negative_delay_is_no_delay(workdir: Path) -> None:
    result = run_cli("enqueue", "t", "--delay", "-5", cwd=workdir)
    assert result.returncode == 0, result.stderr
    [job] = listed(workdir)
    assert job["state"] == "ready"


WORKER_ERRORS = [
    (["--pool", "x=q:100000"], "malformed pool spec 'x=q:100000': pool 'x': slots must be between 1 and 10000"),
    (["--lease", "0.001"], "--lease must be a number of seconds from 0.5 to 86400, not 0.001"),
    (["--lease", "1e9"], "--lease must be a number of seconds from 0.5 to 86400, not 1000000000.0"),
    (["--lease", "nan"], "--lease must be a number of seconds from 0.5 to 86400, not nan"),
    (["--shutdown-timeout", "nan"], "--shutdown-timeout must be a number >= 0, not nan"),
]  # fmt: skip


@pytest.mark.parametrize(("options", "expected"), WORKER_ERRORS)
def test_worker_refuses_absurd_pools_and_leases(
    workdir: Path, options: list[str], expected: str
) -> None:
    assert run_cli("enqueue", "t", cwd=workdir).returncode == 0
    one_line(run_cli("worker", "myapp:app", "--burst", *options, cwd=workdir), 2, expected)
    [job] = listed(workdir)
    assert job["state"] == "ready"  # nothing ran, nothing was claimed


def test_worker_runs_at_the_edges_of_the_lease_range(workdir: Path) -> None:
    assert (
        run_cli("enqueue", "t", "--args", "[1, 2]", "--app", "myapp:app", cwd=workdir).returncode
        == 0
    )
    for lease in ("0.5", "86400"):
        result = run_cli(
            "worker", "myapp:app", "--pool", "q=q:1", "--lease", lease, "--burst", cwd=workdir
        )
        assert result.returncode == 0, result.stderr
    [job] = listed(workdir)
    assert (job["state"], job["result"], job["attempts"]) == ("succeeded", 2, 1)
