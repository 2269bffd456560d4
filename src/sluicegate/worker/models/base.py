"""What every concurrency model is: a class that builds its pool's executor and work
items, says which tasks it runs (and why not), and declares its options as data.

A model enforces its own timeout inside its executor (kill a child, cancel a coroutine,
fail a thread's attempt at the deadline), so the worker never needs to know which model
a pool has. The table of models is ``models.MODELS``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ...context import ProgressSink, StopCheck
from ...errors import ConfigError
from ...hooks import NO_HOOKS, Hooks
from ...job import ClaimedJob
from ...names import number_problem
from ..executors import Executor, WorkItem
from ..transactional import TransactionalStore

if TYPE_CHECKING:
    from ...task import Task


@dataclass(frozen=True, slots=True)
class ModelOption:
    """One option a model accepts in its pools' settings (``[pools.NAME]`` keys)."""

    name: str
    kind: type[int] | type[float]  # int: an integer; float: any number
    minimum: float
    default: int | float | None  # None: unset (the option's feature is off)
    help: str

    def problem(self, value: object) -> str | None:
        """What is wrong with ``value`` for this option, or None (None itself: the default)."""
        if value is None:
            return None
        return number_problem(value, self.minimum, integer=self.kind is int)


class ModelOptionError(ConfigError):
    """A bad pool option, naming the model, the option and the problem (kept apart, so a
    config file's error can name its own key)."""

    def __init__(self, model: str, option: str, problem: str) -> None:
        super().__init__(f"{model} model option {option!r}: {problem}")
        self.model, self.option, self.problem = model, option, problem


@dataclass(frozen=True, slots=True)
class PoolContext:
    """What the worker hands every pool's executor, whatever its model."""

    app_path: Callable[[], str]  # MODULE:APP of the worker's app (ConfigError if it has none)
    result_limit: int  # bytes of a task's JSON result
    store: TransactionalStore  # transactional tasks commit their writes and ack here
    progress: ProgressSink | None = None  # where current_job().progress(...) reports go
    stopped: StopCheck | None = None  # current_job().cancelled asks here
    hooks: Hooks = NO_HOOKS  # the app's lifecycle hooks (the runner calls them)


class ConcurrencyModel(ABC):
    """A concurrency model. Stateless: its executor holds each pool's state."""

    name: ClassVar[str]
    options: ClassVar[tuple[ModelOption, ...]] = ()
    # Each slot is a child process: slow to start (a fresh interpreter imports the app),
    # and a task that crashes costs its slot's child, not the worker.
    child_processes: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def refuses(cls, task: Task[Any, Any]) -> str | None:
        """Why ``task`` cannot run in a pool of this model, or None when it can."""

    @classmethod
    @abstractmethod
    def executor(
        cls, name: str, slots: int, options: Mapping[str, Any], context: PoolContext
    ) -> Executor[Any]:
        """The executor of pool ``name``, with ``options`` already checked and defaulted."""

    @classmethod
    @abstractmethod
    def work_item(cls, task: Task[Any, Any], claimed: ClaimedJob) -> WorkItem:
        """The item this model's executor runs for one claimed job of ``task`` (one object
        per job: this is the hot path)."""


def needs_async_pool(task: Task[Any, Any], model: str) -> str | None:
    """The refusal of a coroutine task by a model that runs plain functions."""
    if task.is_coroutine:
        return f"task {task.name!r} is a coroutine function; it needs an async pool, not {model}"
    return None


def needs_thread_pool(task: Task[Any, Any]) -> str | None:
    """The refusal of a transactional task by a model that cannot hold its connection."""
    if task.options.transactional:
        return f"task {task.name!r} is transactional; transactional tasks run in thread pools"
    return None
