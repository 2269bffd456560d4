"""Signals at the command line, as users run it: one log line per job outcome (text, or
JSON with the fields as keys), bad sizing input, and `workers`/`stats` after a worker
has come and gone. In process (support.cli.run_cli), the worker's burst included."""

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

    @app.task(queue="email")
    def send(n):
        return n

    @app.task(queue="email", max_attempts=1)
    def broken():
        raise ValueError("nope")
    """
)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "logapp.py").write_text(APP_SOURCE)
    return tmp_path


def burst(workdir: Path, *extra: str) -> Result:
    for n in range(3):
        assert (
            run_cli(
                "enqueue", "send", "--args", f"[{n}]", "--app", "logapp:app", cwd=workdir
            ).returncode
            == 0
        )
    assert run_cli("enqueue", "broken", "--app", "logapp:app", cwd=workdir).returncode == 0
    done = run_cli(
        "worker", "logapp:app", "--pool", "email=email:2", "--burst", *extra, cwd=workdir
    )
    assert done.returncode == 0, done.stderr
    return done


def test_json_logs_carry_one_object_per_outcome(workdir: Path) -> None:
    done = burst(workdir, "--log-format", "json")
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # every line is JSON
    outcomes = [x for x in lines if x["logger"] == "sluicegate.jobs"]
    assert sorted(x["outcome"] for x in outcomes) == ["dead", "succeeded", "succeeded", "succeeded"]
    for x in outcomes:
        assert {"job_id", "task", "queue", "pool", "attempt", "duration_s", "wait_s"} <= set(x)
        assert (x["queue"], x["pool"], x["attempt"]) == ("email", "email", 1)
        assert x["duration_s"] >= 0 and x["wait_s"] >= 0
    dead = next(x for x in outcomes if x["outcome"] == "dead")
    assert dead["task"] == "broken" and dead["level"] == "warning"


def test_text_logs_are_readable_lines(workdir: Path) -> None:
    done = burst(workdir)
    jobs = [line for line in done.stderr.splitlines() if "sluicegate.jobs" in line]
    assert len(jobs) == 4
    assert any("succeeded task=send queue=email pool=email attempt=1" in line for line in jobs)
    assert any("dead task=broken" in line for line in jobs)


def test_a_worker_that_came_and_went_is_listed_stopped(workdir: Path) -> None:
    burst(workdir)
    listed = json.loads(run_cli("workers", "--json", cwd=workdir).stdout)
    assert [w["status"] for w in listed] == ["stopped"]
    assert listed[0]["pools"][0]["name"] == "email"
    stats = json.loads(run_cli("stats", "--json", cwd=workdir).stdout)
    assert stats["queues"]["email"]["succeeded"] == 3
    assert stats["pools"] == {}  # a stopped worker's pools are not live capacity
    table = run_cli("stats", cwd=workdir)
    assert table.returncode == 0 and "email" in table.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["size"], "give --rate and --duration"),
        (["size", "--rate", "fast", "--duration", "1s"], "rate"),
        (["size", "--rate", "10/s", "--duration", "soon"], "duration"),
        (["size", "--rate", "10/s", "--duration", "1s", "--queue", "q"], "not both"),
        (["size", "--queue", "nobody"], "nobody"),
        (["health", "--worker", "nope"], "no worker"),
    ],
)
def test_bad_signal_input_gets_one_clear_line(workdir: Path, args: list[str], message: str) -> None:
    done = run_cli(*args, cwd=workdir)
    assert done.returncode in (1, 2)
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_declared_sizing_shows_the_arithmetic(workdir: Path) -> None:
    done = run_cli("size", "--rate", "100/s", "--duration", "500ms", cwd=workdir)
    assert done.returncode == 0
    assert "50.0 slots busy on average" in done.stdout and "63 slots" in done.stdout
    data = json.loads(
        run_cli("size", "--rate", "100/s", "--duration", "500ms", "--json", cwd=workdir).stdout
    )
    assert data["slots_exact"] == pytest.approx(50.0) and data["slots_at_target"] == 63
