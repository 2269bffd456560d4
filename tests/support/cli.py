"""Running the ``sluicegate`` command line in tests: in process (``run_cli``, the default)
or as a real process (``run_cli_process``, for the few smoke tests that need one).

``run_cli`` invokes the real ``sluicegate.cli.main`` group through click's ``CliRunner``,
set up the way a fresh ``sluicegate`` process would see the world, and puts everything
back afterwards so that one call never leaks into the next, or into the next test:

- the working directory is ``cwd`` for the call (the default broker is
  ``sqlite:///sluicegate.db`` there, ``./sluicegate.toml`` is read from there, and
  ``MODULE:APP`` imports from there);
- the environment is this process's minus the variables that would point a test at a
  developer's own setup (``SLUICEGATE_BROKER``, ``SLUICEGATE_DASHBOARD_TOKEN``), plus
  ``env`` (a value of None unsets); ``COLUMNS`` is 80 unless ``env`` says otherwise,
  which is the width rich gives a pipe when no terminal is found. ``os.environ`` is
  restored whole after the call;
- app modules are imported afresh by every call, as in a new interpreter: modules from
  ``cwd`` and from tests/apps are hidden from ``sys.modules`` during the call (a test's
  own ``import scheduleapp`` keeps its module, and the command gets another), and what
  the call imported from there is dropped after it, so two tests with a ``myapp`` in
  different folders never see each other's. ``sys.path`` is restored;
- the logging the command configured (``worker --log-format``) is undone: the root
  logger's and sluicegate's loggers' handlers, levels and ``propagate`` are restored;
- the SIGTERM/SIGINT handlers a command installs (``worker``) are restored;
- stdout and stderr are kept apart (click >= 8.2), ``output`` has both interleaved;
- a command that raises anything but ``SystemExit`` fails the test with its traceback
  (``catch_exceptions=False``): a crash never passes as "exit code 1".

``run_cli_process`` runs the installed ``sluicegate`` script (the ``sluicegate.cli:main``
entry point) in ``cwd`` with the same environment rules; ``cli_argv`` and ``cli_env``
give a test that needs ``subprocess.Popen`` (a long-running dashboard, concurrent
commands, signals) the same command and environment.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from click.testing import CliRunner

# Variables a developer may have set for their own use of sluicegate; never seen by a
# test's command unless the test sets them itself.
CLEARED = ("SLUICEGATE_BROKER", "SLUICEGATE_DASHBOARD_TOKEN")
# The width rich falls back to when neither the streams nor COLUMNS give one (a pipe).
PIPE_COLUMNS = "80"
# The test apps real workers and commands import (tests/apps); imported afresh per call.
APPS = Path(__file__).resolve().parents[1] / "apps"
SIGNALS = (signal.SIGTERM, signal.SIGINT)
Env = Mapping[str, str | None]


@dataclass(frozen=True)
class Result:
    """What a command did: its exit status, and what it wrote where."""

    args: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str
    output: str  # stdout and stderr interleaved, as a terminal would show them

    @property
    def returncode(self) -> int:
        """The exit status under subprocess's name."""
        return self.exit_code


def cli_env(env: Env | None = None) -> dict[str, str]:
    """The environment a test's command runs in: this process's without ``CLEARED``,
    with ``env`` applied (None unsets a variable)."""
    out = {k: v for k, v in os.environ.items() if k not in CLEARED}
    for key, value in (env or {}).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def cli_argv(*args: str) -> list[str]:
    """The installed ``sluicegate`` script (what users run) with ``args``; ``python -m
    sluicegate.cli`` when the script is not installed next to this interpreter."""
    script = Path(sys.executable).parent / "sluicegate"
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-m", "sluicegate.cli", *args]  # pragma: no cover


def run_cli_process(
    *args: str,
    cwd: Path | str,
    env: Env | None = None,
    input: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``sluicegate ARGS`` as a real process in ``cwd``: for the smoke tests of what only a
    process shows (exit statuses, signals, the entry point, the real environment)."""
    return subprocess.run(
        cli_argv(*args),
        cwd=cwd,
        env=cli_env(env),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_cli(
    *args: str,
    cwd: Path | str,
    env: Env | None = None,
    input: str | None = None,
) -> Result:
    """``sluicegate ARGS`` in this process, in ``cwd``, as a fresh process would run it
    (see the module's docstring); a command that crashes raises its exception here."""
    from sluicegate.cli import main

    environ = cli_env({"COLUMNS": PIPE_COLUMNS, **(env or {})})
    folders = (Path(cwd).resolve(), APPS)
    with _restored_process_state(), _fresh_modules(folders):
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        importlib.invalidate_caches()  # files the test just wrote are importable
        runner = CliRunner()
        done = runner.invoke(
            main, list(args), input=input, catch_exceptions=False, prog_name="sluicegate"
        )
    return Result(
        args=tuple(args),
        exit_code=done.exit_code,
        stdout=done.stdout,
        stderr=done.stderr,
        output=done.output,
    )


@contextmanager
def _restored_process_state() -> Iterator[None]:
    """Put back what a command may change in its process: the working directory, the
    environment, sys.path, logging and the signal handlers."""
    folder = os.getcwd()
    environ = dict(os.environ)
    path = list(sys.path)
    loggers = _logging_state()
    handlers = _signal_handlers()
    try:
        yield
    finally:
        os.chdir(folder)
        os.environ.clear()
        os.environ.update(environ)
        for added in set(sys.path) - set(path):
            sys.path_importer_cache.pop(added, None)
        sys.path[:] = path
        _restore_logging(loggers)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def _within(name: str, module: ModuleType, folders: Iterable[Path]) -> bool:
    """Whether ``module`` was imported from one of ``folders`` (as a top-level module or
    package there; a namespace package by its ``__path__``): ``myapp`` from ``F/myapp.py``,
    not ``sluicegate`` from ``F/src/sluicegate`` when the folder is the repository."""
    top = name.partition(".")[0]
    file = getattr(module, "__file__", None)
    places = [file] if file else list(getattr(module, "__path__", None) or ())
    for place in places:
        try:
            where = Path(place).resolve()
        except (OSError, TypeError, ValueError):  # pragma: no cover
            continue
        for folder in folders:
            if where.is_relative_to(folder) and where != folder:
                first = where.relative_to(folder).parts[0]
                if first == top or first.startswith(f"{top}."):  # a package, or top.py / .so
                    return True
    return False


@contextmanager
def _fresh_modules(folders: tuple[Path, ...]) -> Iterator[None]:
    """Modules from ``folders`` (and from any folder the call puts on sys.path) are imported
    afresh during the call and forgotten after it; the ones imported before the call are
    back in sys.modules afterwards."""
    hidden = {
        name: module
        for name, module in list(sys.modules.items())
        if module is not None and _within(name, module, folders)
    }
    for name in hidden:
        del sys.modules[name]
    before = set(sys.modules)
    path = set(sys.path)
    try:
        yield
    finally:
        added = [Path(p or ".").resolve() for p in sys.path if p not in path]
        for name in set(sys.modules) - before:
            module = sys.modules.get(name)
            if module is None or _within(name, module, (*folders, *added)):
                sys.modules.pop(name, None)
        sys.modules.update(hidden)


def _logging_state() -> dict[str, tuple[Any, ...]]:
    loggers = {"": logging.getLogger()}
    loggers.update(
        (name, logger)
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and name.partition(".")[0] == "sluicegate"
    )
    state: dict[str, tuple[Any, ...]] = {
        name: (logger, list(logger.handlers), logger.level, logger.propagate, logger.disabled)
        for name, logger in loggers.items()
    }
    state["<disable>"] = (logging.root.manager.disable,)
    return state


def _restore_logging(state: dict[str, tuple[Any, ...]]) -> None:
    (disable,) = state.pop("<disable>")
    logging.disable(disable)
    for logger, handlers, level, propagate, disabled in state.values():
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate
        logger.disabled = disabled


def _signal_handlers() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():  # pragma: no cover
        return {}  # signal.signal works in the main thread only: nothing can be installed
    return {signum: signal.getsignal(signum) for signum in SIGNALS}
