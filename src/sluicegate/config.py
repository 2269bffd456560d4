"""``sluicegate.toml`` (or ``[tool.sluicegate]`` in pyproject.toml) -> typed settings.

Every error names the file, the key and what is wrong. CLI flags override the file.
The worker reads it all; an ``App`` reads it too (``App.configure``, once, on first use)
and applies the ``[tasks.NAME]`` overrides, so producers route by them as workers do.

    broker = "sqlite:///jobs.db"
    lease = 30
    shutdown_timeout = 30

    [pools.transcode]
    queues = ["transcode"]          # or weighted: { email = 3, reports = 1 }
    slots = 4
    model = "process"               # thread | async | process
    max_jobs_per_child = 200        # process model
    max_memory_mb = 512             # process model

    [tasks.send_reset]              # per-task overrides
    queue = "email"
    max_attempts = 5
    timeout = 30
    priority = 0
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from .errors import ConfigError
from .names import check_name
from .task import TASK_OPTION_NAMES, TaskOptions, TaskOptionsDict
from .worker.pool import PoolSpec

if TYPE_CHECKING:
    from .app import App
    from .task import Task

DEFAULT_FILES = ("sluicegate.toml", "pyproject.toml")
TOP_KEYS = {"broker", "lease", "shutdown_timeout", "pools", "tasks"}
POOL_KEYS = {"queues", "slots", "model", "max_jobs_per_child", "max_memory_mb"}
# A [tasks.NAME] table overrides the task options a deployment decides and the worker
# process applies. Not retry_on and transactional (they belong to the function's code),
# nor the backoff (process-pool children compute it, and they do not read this file).
TASK_KEYS = TASK_OPTION_NAMES - {"retry_on", "transactional", "backoff_base", "backoff_max"}


@dataclass(frozen=True, slots=True)
class Settings:
    source: str | None = None
    broker: str | None = None
    lease: float | None = None
    shutdown_timeout: float | None = None
    pools: list[PoolSpec] = field(default_factory=list)
    tasks: dict[str, TaskOptionsDict] = field(default_factory=dict)


class _Reader:
    """Typed access to one TOML table, with errors that say file, key and problem."""

    def __init__(self, path: str, prefix: str, table: Any) -> None:
        self.path, self.prefix = path, prefix
        if not isinstance(table, dict):
            raise self.error("", f"must be a table, not {type(table).__name__}")
        self.table: dict[str, Any] = table

    def error(self, key: str, problem: str) -> ConfigError:
        where = ".".join(p for p in (self.prefix, key) if p)
        return ConfigError(f"{self.path}: {where or '(top level)'}: {problem}")

    def only(self, allowed: Set[str]) -> None:
        for key in self.table:
            if key not in allowed:
                raise self.error(key, f"unknown key (expected one of {', '.join(sorted(allowed))})")

    def number(self, key: str, minimum: float = 0.0, integer: bool = False) -> Any:
        value = self.table.get(key)
        if value is None:
            return None
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or value < minimum:
            kind = "an integer" if integer else "a number"
            raise self.error(key, f"must be {kind} >= {minimum:g}, not {value!r}")
        return value

    def text(self, key: str) -> str | None:
        value = self.table.get(key)
        if value is not None and not isinstance(value, str):
            raise self.error(key, f"must be a string, not {value!r}")
        return value


def find_config(explicit: str | None) -> tuple[str, dict[str, Any]] | None:
    """The settings table: an explicit file, else ./sluicegate.toml, else pyproject's
    [tool.sluicegate]; None when there is none."""
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
            return f"{name} [tool.sluicegate]", table
        return name, data
    return None


def load_settings(explicit: str | None = None) -> Settings:
    found = find_config(explicit)
    if found is None:
        return Settings()
    path, data = found
    top = _Reader(path, "", data)
    top.only(TOP_KEYS)
    pools_table = _Reader(path, "pools", data.get("pools", {}))
    tasks_table = _Reader(path, "tasks", data.get("tasks", {}))
    return Settings(
        source=path,
        broker=top.text("broker"),
        lease=top.number("lease", minimum=0.001),
        shutdown_timeout=top.number("shutdown_timeout"),
        pools=[_pool(path, name, table) for name, table in pools_table.table.items()],
        tasks={name: _task(path, name, table) for name, table in tasks_table.table.items()},
    )


def _pool(path: str, name: str, table: Any) -> PoolSpec:
    r = _Reader(path, f"pools.{name}", table)
    r.only(POOL_KEYS)
    raw = r.table.get("queues", [name])
    if isinstance(raw, list):
        if not all(isinstance(q, str) for q in raw) or len(set(raw)) != len(raw):
            raise r.error("queues", f"must be a list of distinct queue names, not {raw!r}")
        weights = {q: 1 for q in raw}
    elif isinstance(raw, dict):
        weights = raw
    else:
        raise r.error("queues", f"must be a list of names or a table of weights, not {raw!r}")
    for queue, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
            raise r.error(f"queues.{queue}", f"weight must be an integer >= 1, not {weight!r}")
    slots = r.number("slots", minimum=1, integer=True)
    if slots is None:
        raise r.error("slots", "is required")
    model = r.text("model") or "thread"
    max_jobs = r.number("max_jobs_per_child", minimum=1, integer=True)
    max_memory = r.number("max_memory_mb", minimum=1)
    if model != "process" and (max_jobs is not None or max_memory is not None):
        raise r.error(
            "model", f"max_jobs_per_child and max_memory_mb apply to process pools, not {model}"
        )
    try:
        return PoolSpec(
            check_name("pool", name),
            tuple(weights),
            slots,
            model,
            max_jobs_per_child=max_jobs or 1000,
            max_memory_mb=max_memory,
            weights=tuple(weights.values()) if isinstance(raw, dict) else None,
        )
    except ConfigError as exc:  # PoolSpec's own checks (names, model): add file and key
        raise r.error("", str(exc)) from None


def _task(path: str, name: str, table: Any) -> TaskOptionsDict:
    r = _Reader(path, f"tasks.{name}", table)
    r.only(TASK_KEYS)
    for key, value in r.table.items():  # TaskOptions checks; one key at a time, to name it
        try:
            TaskOptions(**{key: value})
        except ConfigError as exc:
            raise r.error(key, str(exc)) from None
    return cast(TaskOptionsDict, dict(r.table))


def apply_overrides(app: App, settings: Settings) -> None:
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


def apply_override(task: Task[Any, Any], settings: Settings) -> None:
    """Apply the ``[tasks.NAME]`` override of this task, if the settings have one."""
    override = settings.tasks.get(task.name)
    if override:
        try:
            task.options = dataclasses.replace(task.options, **override)
        except ConfigError as exc:  # TaskOptions' own checks: add file and key
            raise ConfigError(f"{settings.source}: tasks.{task.name}: {exc}") from None
