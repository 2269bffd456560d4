"""support.cli.run_cli runs a command in this process as a fresh ``sluicegate`` process
would, and leaves nothing behind for the next call or test: the folder, the environment,
app modules, sys.path, logging and signal handlers are as they were."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from pathlib import Path

import pytest

from support.cli import run_cli

APP = "from sluicegate import App\napp = App()\n@app.task(queue={queue!r})\ndef t(): ...\n"


def test_each_folder_gets_its_own_app_module(tmp_path: Path) -> None:
    for queue in ("first", "second"):
        folder = tmp_path / queue
        folder.mkdir()
        (folder / "myapp.py").write_text(APP.format(queue=queue))
        done = run_cli("enqueue", "t", "--app", "myapp:app", cwd=folder)
        assert done.exit_code == 0, done.stderr
        shown = run_cli("jobs", "show", done.stdout.strip(), "--json", cwd=folder)
        assert json.loads(shown.stdout)["queue"] == queue
        assert "myapp" not in sys.modules


def test_the_tests_own_app_module_is_not_the_commands(tmp_path: Path) -> None:
    import scheduleapp  # tests/apps

    mine = scheduleapp.app
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    done = run_cli("schedules", "list", "scheduleapp:app", "--broker", url, cwd=tmp_path)
    assert done.exit_code == 0, done.stderr
    assert sys.modules["scheduleapp"].app is mine and mine.broker_url != url  # not rebound


def test_process_state_is_put_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "myapp.py").write_text(APP.format(queue="q"))
    monkeypatch.setenv("SLUICEGATE_BROKER", "memory://")  # a developer's own: not seen
    folder, environ, path = os.getcwd(), dict(os.environ), list(sys.path)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    signals = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    url = f"sqlite:///{tmp_path / 'other.db'}"
    assert run_cli("enqueue", "t", cwd=tmp_path, env={"SLUICEGATE_BROKER": url}).exit_code == 0
    assert run_cli("enqueue", "t", cwd=tmp_path).exit_code == 0  # ./sluicegate.db
    args = ("worker", "myapp:app", "--pool", "q=q:1", "--burst", "--log-format", "json")
    done = run_cli(*args, "--log-level", "debug", cwd=tmp_path)
    assert done.exit_code == 0 and json.loads(done.stderr.splitlines()[0])["level"]
    assert (tmp_path / "other.db").exists() and (tmp_path / "sluicegate.db").exists()
    assert (os.getcwd(), dict(os.environ), sys.path) == (folder, environ, path)
    assert (root.handlers, root.level) == (handlers, level)
    assert {s: signal.getsignal(s) for s in signals} == signals


def test_a_crash_fails_the_test_with_its_exception(tmp_path: Path) -> None:
    (tmp_path / "crashing.py").write_text("raise RuntimeError('at import')\n")
    with pytest.raises(RuntimeError, match="at import"):
        run_cli("enqueue", "t", "--app", "crashing:app", cwd=tmp_path)
    assert "crashing" not in sys.modules


def test_a_folder_holding_the_package_does_not_import_it_again() -> None:
    """With the repository as the folder, sluicegate (src/sluicegate) is not an app module
    imported afresh: the app's ``from sluicegate import App`` is the command's App."""
    import sluicegate.app

    repository = Path(__file__).resolve().parents[2]
    args = ("enqueue", "t", "--app", "scheduleapp:app", "--broker", "memory://")
    done = run_cli(*args, cwd=repository)  # memory://: writes nothing there
    assert done.exit_code == 0, done.stderr
    assert sys.modules["sluicegate.app"] is sluicegate.app
