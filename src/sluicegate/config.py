"""``sluicegate.toml`` (or ``[tool.sluicegate]`` in pyproject.toml) -> the worker's settings.

Every error names the file, the key and what is wrong. CLI flags override the file.
The ``[tasks.NAME]`` overrides are read by ``settings_file`` (an ``App`` applies them,
in producers as in workers); this module adds what only a worker needs:

    broker = "sqlite:///jobs.db"
    lease = 30
    shutdown_timeout = 30

    [pools.transcode]
    queues = ["transcode"]          # or weighted: { email = 3, reports = 1 }
    slots = 4
    model = "process"               # a key of worker.models.MODELS: thread | async | process
    max_jobs_per_child = 200        # the model's own options (process model)
    max_memory_mb = 512

    [limits.storage]                # a dependency budget tasks name (docs/limits.md)
    concurrency = 4
    scope = "host"

    [queues.email]                  # admission bounds (docs/admission.md)
    max_ready = 10000
    max_wait = 30                   # seconds of predicted wait
    policy = "refuse"               # or "shed"

    [tasks.send_reset]              # per-task overrides
    queue = "email"
    max_attempts = 5
    timeout = 30
    priority = 0

    [schedules.nightly]             # a periodic job (docs/schedules.md)
    task = "send_report"
    cron = "30 2 * * *"
    tz = "Europe/Berlin"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .names import check_name, lease_problem
from .settings_file import (
    TableReader,
    TaskSettings,
    apply_override,
    apply_overrides,
    find_config,
    limit_tables,
    queue_tables,
    task_overrides,
)
from .worker.models import MODELS, ModelOptionError, validate_model_options
from .worker.pool import PoolSpec

TOP_KEYS = {
    "broker",
    "lease",
    "shutdown_timeout",
    "pools",
    "tasks",
    "limits",
    "schedules",
    "queues",
}
POOL_BASE_KEYS = {"queues", "slots", "model"}
# Every option any concurrency model declares, by name (its pools' other keys).
MODEL_OPTIONS = {option.name: option for model in MODELS.values() for option in model.options}
POOL_KEYS = POOL_BASE_KEYS | set(MODEL_OPTIONS)


@dataclass(frozen=True, slots=True)
class Settings(TaskSettings):
    """The whole settings file: its task overrides and the worker's settings."""

    broker: str | None = None
    lease: float | None = None
    shutdown_timeout: float | None = None
    pools: list[PoolSpec] = field(default_factory=list)


def load_settings(explicit: str | None = None) -> Settings:
    """The settings of ``explicit``, else of the default file; empty when there is none."""
    found = find_config(explicit)
    if found is None:
        return Settings()
    source, path, data = found
    top = TableReader(source, "", data)
    top.only(TOP_KEYS)
    pools_table = TableReader(source, "pools", data.get("pools", {}))
    return Settings(
        source=source,
        path=path,
        tasks=task_overrides(source, data),
        limits=limit_tables(source, data),
        queues=queue_tables(source, data),
        broker=top.text("broker"),
        lease=_lease(top),
        shutdown_timeout=top.number("shutdown_timeout"),
        pools=[_pool(source, name, table) for name, table in pools_table.table.items()],
    )


def _lease(top: TableReader) -> float | None:
    value = top.table.get("lease")
    if value is not None and (problem := lease_problem(value)) is not None:
        raise top.error("lease", problem)
    return value


def _pool(path: str, name: str, table: Any) -> PoolSpec:
    r = TableReader(path, f"pools.{name}", table)
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
    options = {key: value for key, value in r.table.items() if key not in POOL_BASE_KEYS}
    for key, value in options.items():  # a bad value first, whichever model it belongs to
        problem = MODEL_OPTIONS[key].problem(value)
        if problem is not None:
            raise r.error(key, problem)
    try:
        checked = validate_model_options(model, options)
    except ModelOptionError as exc:  # an option this pool's model does not have
        raise r.error(exc.option, exc.problem) from None
    except ConfigError as exc:  # an unknown model
        raise r.error("", str(exc)) from None
    try:
        return PoolSpec(
            check_name("pool", name),
            tuple(weights),
            slots,
            model,
            options=checked,
            weights=tuple(weights.values()) if isinstance(raw, dict) else None,
        )
    except ConfigError as exc:  # PoolSpec's own checks (names, model): add file and key
        raise r.error("", str(exc)) from None


__all__ = ["Settings", "apply_override", "apply_overrides", "load_settings"]
