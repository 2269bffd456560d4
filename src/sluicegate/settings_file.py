"""The settings file: where it is, typed reading of its tables, and its ``[tasks.NAME]``
overrides: the part an ``App`` (a producer as much as a worker) needs.

``config.py`` reads the rest of the same file for the worker (pools, lease, ...). Kept
apart so that the app, which every process imports, depends on nothing of the worker.
Every error names the file, the key and what is wrong.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .admission import BOUND_KEYS, QueueBounds, bounds_table
from .errors import ConfigError
from .limits import Limit
from .names import number_problem
from .schedules import Schedule
from .task import TASK_OPTION_NAMES, TaskOptions, TaskOptionsDict

if TYPE_CHECKING:
    from .app import App
    from .task import Task

DEFAULT_FILES = ("sluicegate.toml", "pyproject.toml")
# A [tasks.NAME] table overrides the task options a deployment decides and the worker
# process applies. Not retry_on and transactional (they belong to the function's code),
# nor the backoff (process-pool children compute it, and they do not read this file).
TASK_KEYS = TASK_OPTION_NAMES - {"retry_on", "transactional", "backoff_base", "backoff_max"}
SCHEDULE_KEYS = frozenset({"task", "cron", "tz", "args", "kwargs", "queue", "catch_up"})
LIMIT_KEYS = frozenset({"concurrency", "rate", "burst", "scope", "partition"})


@dataclass(frozen=True, slots=True)
class TaskSettings:
    """The ``[tasks.NAME]`` overrides of one settings file. ``source`` names it in messages
    (e.g. ``pyproject.toml [tool.sluicegate]``); ``path`` is the file, None when there is
    none."""

    source: str | None = None
    path: str | None = None
    tasks: dict[str, TaskOptionsDict] = field(default_factory=dict)
    limits: dict[str, Limit] = field(default_factory=dict)
    schedules: dict[str, Schedule] = field(default_factory=dict)  # [schedules.NAME]
    queues: dict[str, QueueBounds] = field(default_factory=dict)  # [queues.NAME] bounds


T = TypeVar("T")


class TableReader:
    """Typed access to one TOML table, with errors that say file, key and problem."""

    def __init__(self, path: str, prefix: str, table: Any) -> None:
        self.path, self.prefix = path, prefix
        if not isinstance(table, dict):
            raise self.error("", f"must be a table, not {type(table).__name__}")
        self.table: dict[str, Any] = table

    def error(self, key: str, problem: str) -> ConfigError:
        where = ".".join(p for p in (self.prefix, key) if p)
        return ConfigError(f"{self.path}: {where or '(top level)'}: {problem}")

    def made(self, make: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``make(*args, **kwargs)``, its ConfigError named by this table."""
        try:
            return make(*args, **kwargs)
        except ConfigError as exc:
            raise self.error("", str(exc)) from None

    def only(self, allowed: Set[str]) -> None:
        for key in self.table:
            if key not in allowed:
                raise self.error(key, f"unknown key (expected one of {', '.join(sorted(allowed))})")

    def number(self, key: str, minimum: float = 0.0, integer: bool = False) -> Any:
        value = self.table.get(key)
        if value is None:
            return None
        problem = number_problem(value, minimum, integer)
        if problem is not None:
            raise self.error(key, problem)
        return value

    def text(self, key: str) -> str | None:
        value = self.table.get(key)
        if value is not None and not isinstance(value, str):
            raise self.error(key, f"must be a string, not {value!r}")
        return value


def find_config(explicit: str | None) -> tuple[str, str, dict[str, Any]] | None:
    """The settings table: an explicit file, else ./sluicegate.toml, else pyproject's
    [tool.sluicegate]; as (source for messages, file path, table), None when there is none."""
    candidates = [explicit] if explicit else list(DEFAULT_FILES)
    for name in candidates:
        path = Path(name)
        if not path.exists():
            if explicit:
                raise ConfigError(f"{name}: config file not found")
            continue
        try:
            data = tomllib.loads(path.read_text("utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{name}: cannot read: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{name}: not valid TOML: {exc}") from None
        if path.name == "pyproject.toml":
            table = data.get("tool", {}).get("sluicegate")
            if table is None:
                if explicit:
                    raise ConfigError(f"{name}: no [tool.sluicegate] table")
                continue
            return f"{name} [tool.sluicegate]", name, table
        return name, name, data
    return None


def read_task_settings(explicit: str | None = None) -> TaskSettings:
    """The task overrides of ``explicit``, else of the default file; empty when none."""
    found = find_config(explicit)
    if found is None:
        return TaskSettings()
    source, path, data = found
    return TaskSettings(
        source,
        path,
        task_overrides(source, data),
        limit_tables(source, data),
        schedules=schedule_tables(source, data),
        queues=queue_tables(source, data),
    )


def named_tables(
    source: str,
    data: dict[str, Any],
    kind: str,
    keys: Set[str],
    build: Callable[[str, TableReader], T],
) -> dict[str, T]:
    """Every ``[KIND.NAME]`` table of a settings file: unknown keys refused, each table
    built by ``build(name, reader)``."""
    tables = TableReader(source, kind, data.get(kind, {}))
    out = {}
    for name, table in tables.table.items():
        r = TableReader(source, f"{kind}.{name}", table)
        r.only(keys)
        out[name] = build(name, r)
    return out


def limit_tables(source: str, data: dict[str, Any]) -> dict[str, Limit]:
    """Every ``[limits.NAME]`` table of a settings file, checked."""
    return named_tables(
        source, data, "limits", LIMIT_KEYS, lambda n, r: r.made(Limit.of, n, **r.table)
    )


def queue_tables(source: str, data: dict[str, Any]) -> dict[str, QueueBounds]:
    """Every ``[queues.NAME]`` table of a settings file (admission bounds), checked."""
    return named_tables(
        source, data, "queues", BOUND_KEYS, lambda n, r: r.made(bounds_table, n, r.table)
    )


def task_overrides(source: str, data: dict[str, Any]) -> dict[str, TaskOptionsDict]:
    """Every ``[tasks.NAME]`` table of a settings file's top-level table, checked."""
    tasks = TableReader(source, "tasks", data.get("tasks", {}))
    return {name: task_override(source, name, table) for name, table in tasks.table.items()}


def task_override(path: str, name: str, table: Any) -> TaskOptionsDict:
    r = TableReader(path, f"tasks.{name}", table)
    r.only(TASK_KEYS)
    for key, value in r.table.items():  # TaskOptions checks; one key at a time, to name it
        try:
            TaskOptions(**{key: value})
        except ConfigError as exc:
            raise r.error(key, str(exc)) from None
    return cast(TaskOptionsDict, dict(r.table))


def apply_overrides(app: App, settings: TaskSettings) -> None:
    """Apply ``[tasks.NAME]`` overrides to the app's tasks; each must name one of them.

    ``App.configure`` calls this once, on first use; call that rather than this."""
    for name in settings.tasks:
        if name not in app.tasks:
            known = ", ".join(sorted(app.tasks)) or "none"
            raise ConfigError(
                f"{settings.source}: tasks.{name}: no such task in the app (tasks: {known})"
            )
    for task in app.tasks.values():
        apply_override(task, settings)


def apply_override(task: Task[Any, Any], settings: TaskSettings) -> None:
    """Apply the ``[tasks.NAME]`` override of this task, if the settings have one."""
    override = settings.tasks.get(task.name)
    if override:
        try:
            task.options = dataclasses.replace(task.options, **override)
        except ConfigError as exc:  # TaskOptions' own checks: add file and key
            raise ConfigError(f"{settings.source}: tasks.{task.name}: {exc}") from None


def schedule_tables(source: str, data: dict[str, Any]) -> dict[str, Schedule]:
    """Every ``[schedules.NAME]`` table of a settings file, checked (docs/schedules.md)."""
    return named_tables(source, data, "schedules", SCHEDULE_KEYS, schedule_table)


def schedule_table(name: str, r: TableReader) -> Schedule:
    for key in ("task", "cron"):
        if key not in r.table:
            raise r.error(key, "missing (a schedule needs task and cron)")
    task, cron, tz, queue = (r.text(k) for k in ("task", "cron", "tz", "queue"))
    args, kwargs = r.table.get("args"), r.table.get("kwargs")
    if args is not None and not isinstance(args, list):
        raise r.error("args", f"must be an array, not {args!r}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise r.error("kwargs", f"must be a table, not {kwargs!r}")
    catch_up = r.table.get("catch_up", 0)
    if isinstance(catch_up, bool) or not isinstance(catch_up, int) or catch_up < 0:
        raise r.error("catch_up", f"must be a whole number >= 0 (0 is skip), not {catch_up!r}")
    return r.made(
        Schedule.of, name, task or "", cron or "", tz=tz or "UTC", args=args, kwargs=kwargs,
        queue=queue, catch_up=catch_up,
    )  # fmt: skip
