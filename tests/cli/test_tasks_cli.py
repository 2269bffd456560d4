"""``sluicegate tasks MODULE:APP``: each task's queue, pool, model and options as a worker
with these pools would run it, with problems flagged (a coroutine in a thread pool, a
plain function in an async pool, a queue no pool serves). In process (support.cli.run_cli)
on tests/apps/poisonapp.py, which has tasks for every model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.cli import Result, run_cli

APP = "poisonapp:app"  # tests/apps, importable
ALL_POOLS = ("--pool", "proc=proc:2:process", "--pool", "thr=thr:2", "--pool", "aio=aio:2:async")


def sluicegate(cwd: Path, *args: str) -> Result:
    # rich wraps tables to the terminal width; keep rows on one line
    return run_cli(*args, cwd=cwd, env={"COLUMNS": "250"})


def rows(cwd: Path, *args: str) -> dict[str, dict[str, Any]]:
    result = sluicegate(cwd, "tasks", APP, "--json", *args)
    assert result.returncode == 0, result.stderr
    return {row["task"]: row for row in json.loads(result.stdout)}


def test_json_lists_queue_pool_model_and_options(tmp_path: Path) -> None:
    found = rows(tmp_path, *ALL_POOLS)
    assert set(found) == {
        "p_ok",
        "p_raise",
        "p_hang",
        "p_exit",
        "p_segv",
        "p_blow_up",
        "p_sleep",
        "p_hold",
        "t_ok",
        "t_raise",
        "t_hang",
        "t_exit",
        "t_segv",
        "a_ok",
        "a_raise",
        "a_hang",
        "a_exit",
        "a_segv",
    }
    assert found["p_hang"] == {
        "task": "p_hang",
        "queue": "proc",
        "pools": ["proc"],
        "models": ["process"],
        "kind": "function",
        "max_attempts": 2,
        "timeout": 0.5,
        "priority": 0,
        "transactional": False,
        "limits": {},
        "problem": None,
    }
    assert found["a_ok"]["kind"] == "coroutine"
    assert (found["a_ok"]["pools"], found["a_ok"]["models"]) == (["aio"], ["async"])
    assert (found["t_ok"]["pools"], found["t_ok"]["models"]) == (["thr"], ["thread"])
    assert found["t_ok"]["max_attempts"] == 3 and found["t_ok"]["timeout"] is None
    assert all(row["problem"] is None for row in found.values())


def test_table_shows_every_task_with_pool_and_model(tmp_path: Path) -> None:
    result = sluicegate(tmp_path, "tasks", APP, *ALL_POOLS)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(line for line in lines if "task" in line and "model" in line)
    for column in ("queue", "pool", "attempts", "timeout", "priority", "note"):
        assert column in header
    cells = {c[0]: c for line in lines if len(c := [x.strip() for x in line.split("│")[1:-1]]) > 1}
    assert cells["p_hang"] == ["p_hang", "proc", "proc", "process", "2", "0.5s", "0", ""]
    assert cells["a_ok"] == ["a_ok", "aio", "aio", "async", "3", "-", "0", ""]
    assert cells["t_raise"] == ["t_raise", "thr", "thr", "thread", "2", "-", "0", ""]
    assert len(cells) == 18


def test_coroutine_in_thread_pool_and_function_in_async_pool_are_flagged(
    tmp_path: Path,
) -> None:
    found = rows(tmp_path, "--pool", "aio=aio:2:thread", "--pool", "thr=thr:2:async")
    assert found["a_ok"]["problem"] == (
        "task 'a_ok' is a coroutine function; it needs an async pool, not thread"
    )
    assert found["t_ok"]["problem"] == (
        "task 't_ok' is a plain function; an async pool runs coroutine functions only"
    )
    assert found["p_ok"]["problem"] == "no pool serves this queue"
    assert found["p_ok"]["pools"] == []

    table = sluicegate(tmp_path, "tasks", APP, "--pool", "aio=aio:2:process")
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if " a_hang " in line)
    assert "coroutine function; it needs an async pool, not process" in row


def test_a_task_served_by_two_pools_lists_both_and_any_misfit(tmp_path: Path) -> None:
    found = rows(tmp_path, "--pool", "fast=aio:4:async", "--pool", "slow=aio,thr:1")
    assert (found["a_ok"]["pools"], found["a_ok"]["models"]) == (
        ["fast", "slow"],
        ["async", "thread"],
    )
    assert "needs an async pool, not thread" in found["a_ok"]["problem"]
    assert found["t_ok"]["problem"] is None


def test_default_pool_serves_only_the_default_queue(tmp_path: Path) -> None:
    found = rows(tmp_path)
    assert all(row["problem"] == "no pool serves this queue" for row in found.values())
    table = sluicegate(tmp_path, "tasks", APP)
    assert table.stdout.count("no pool serves this queue") == len(found)


def test_config_file_pools_and_task_overrides(tmp_path: Path) -> None:
    (tmp_path / "sluicegate.toml").write_text(
        '[pools.cpu]\nqueues = ["proc"]\nslots = 2\nmodel = "process"\n'
        "max_memory_mb = 256\n\n"
        "[tasks.p_ok]\nmax_attempts = 9\ntimeout = 4\npriority = -1\n"
        '[tasks.t_ok]\nqueue = "proc"\n'
    )
    found = rows(tmp_path)  # ./sluicegate.toml found by default
    assert (found["p_ok"]["pools"], found["p_ok"]["models"]) == (["cpu"], ["process"])
    assert (found["p_ok"]["max_attempts"], found["p_ok"]["timeout"]) == (9, 4)
    assert found["p_ok"]["priority"] == -1
    assert (found["t_ok"]["queue"], found["t_ok"]["pools"]) == ("proc", ["cpu"])
    assert found["t_raise"]["problem"] == "no pool serves this queue"

    # --pool replaces the file's pools; its task overrides still apply.
    found = rows(tmp_path, "--pool", "other=proc:1:thread")
    assert (found["p_ok"]["pools"], found["p_ok"]["models"]) == (["other"], ["thread"])
    assert found["p_ok"]["max_attempts"] == 9

    # An explicit --config, elsewhere.
    explicit = tmp_path / "conf.toml"
    explicit.write_text('[pools.loop]\nqueues = ["aio"]\nslots = 8\nmodel = "async"\n')
    found = rows(tmp_path, "--config", str(explicit))
    assert (found["a_ok"]["pools"], found["a_ok"]["problem"]) == (["loop"], None)
    assert found["p_ok"]["max_attempts"] == 3  # sluicegate.toml was not read


@pytest.mark.parametrize(
    ("args", "config", "expected"),
    [
        ((), "[tasks.nope]\ntimeout = 1\n", "sluicegate.toml: tasks.nope: no such task in the app"),
        ((), "[pools.x]\nslots = -1\n", "sluicegate.toml: pools.x.slots: must be an integer >= 1"),
        (("--config", "missing.toml"), None, "missing.toml: config file not found"),
        (("--pool", "x=q:two"), None, "malformed pool spec 'x=q:two'"),
        (("--pool", "x=q:1:fibers"), None, "unknown model 'fibers'"),
    ],
)
def test_bad_config_or_pool_is_one_line_exit_2(
    tmp_path: Path, args: tuple[str, ...], config: str | None, expected: str
) -> None:
    if config is not None:
        (tmp_path / "sluicegate.toml").write_text(config)
    result = sluicegate(tmp_path, "tasks", APP, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("sluicegate: "), result.stderr
    assert expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_unknown_app_is_an_error(tmp_path: Path) -> None:
    result = sluicegate(tmp_path, "tasks", "no_such_module:app")
    assert result.returncode == 2
    assert "cannot import app module 'no_such_module'" in result.stderr
