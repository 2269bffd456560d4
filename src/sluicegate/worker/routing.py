"""Which tasks run in which pools, and whether the pool's model can run them.

Checked at worker start-up so a coroutine task in a thread pool (or a plain function
in an async pool) is a clear error naming the task and the pool, not a runtime
surprise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .models import get_model
from .pool import PoolSpec

if TYPE_CHECKING:
    from ..app import App
    from ..task import Task


def model_mismatch(task: Task[Any, Any], model: str) -> str | None:
    """Why ``task`` cannot run in a pool of ``model``, or None when it can."""
    return get_model(model).refuses(task)


def pools_for(task: Task[Any, Any], pools: list[PoolSpec]) -> list[PoolSpec]:
    return [p for p in pools if task.options.queue in p.queues]


def check_tasks_fit(app: App, pools: list[PoolSpec], transactions: bool) -> None:
    for task in app.tasks.values():
        if task.options.transactional and not transactions:
            raise ConfigError(
                f"task {task.name!r} is transactional, which needs the postgresql:// broker"
            )
        for pool in pools_for(task, pools):
            why = model_mismatch(task, pool.model)
            if why is not None:
                raise ConfigError(f"{why} (pool {pool.name!r} serves queue {task.options.queue!r})")
