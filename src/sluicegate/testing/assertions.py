"""``assert_enqueued`` and ``assert_not_enqueued``: what a test's code enqueued, read back
from the app's broker, with a diff that says what was enqueued instead.

Jobs count in any state (a drained job was still enqueued). Arguments compare as stored:
the expected ones go through the same JSON round trip as an enqueue's, so a tuple
matches the list a job holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..codec import dumps, loads
from ..job import Job
from ..task import Task

if TYPE_CHECKING:
    from ..app import App

SCAN = 10_000  # jobs of one task read at most
SHOWN = 5  # near misses listed in a failure
ANY = object()


@dataclass(frozen=True)
class Expected:
    """One assertion's task and the fields it names (ANY: not named)."""

    task: str
    args: Any = ANY
    kwargs: Any = ANY
    queue: Any = ANY

    def describe(self, lead: str = "a job") -> str:
        named = [
            f"{name}={value!r}"
            for name, value in (("args", self.args), ("kwargs", self.kwargs), ("queue", self.queue))
            if value is not ANY
        ]
        return f"{lead} of task {self.task!r}" + (f" with {', '.join(named)}" if named else "")

    def differences(self, job: Job) -> list[str]:
        """How ``job`` differs from what is expected, one line per field; [] if it matches."""
        found = []
        for name, want, got in (
            ("args", self.args, job.args),
            ("kwargs", self.kwargs, job.kwargs),
            ("queue", self.queue, job.queue),
        ):
            if want is not ANY and want != got:
                found.append(f"{name}: expected {want!r}, got {got!r}")
        return found


def _stored(value: Any, what: str) -> Any:
    """``value`` as a job would hold it after the JSON round trip of an enqueue."""
    try:
        return loads(dumps(value))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON, as an enqueue stores it: {exc}") from None


def _expected(
    task: Task[Any, Any] | str,
    args: Sequence[Any] | None,
    kwargs: Mapping[str, Any] | None,
    queue: str | None,
    app: App | None,
) -> tuple[Expected, App]:
    if isinstance(task, Task):
        name, app = task.name, app or task.app
    elif isinstance(task, str):
        name = task
        if app is None:
            raise TypeError(f"a task given by name ({task!r}) needs app=")
    else:
        raise TypeError(f"task must be a task (@app.task) or its name, not {task!r}")
    if isinstance(args, str | bytes | Mapping):
        raise TypeError(f"args must be a list or tuple of arguments, not {args!r}")
    return (
        Expected(
            name,
            ANY if args is None else _stored(list(args), "args"),
            ANY if kwargs is None else _stored(dict(kwargs), "kwargs"),
            ANY if queue is None else queue,
        ),
        app,
    )


def _jobs_of(app: App, task: str) -> list[Job]:
    """Every job of ``task`` (up to SCAN), newest first."""
    jobs: list[Job] = []
    before: int | None = None
    while len(jobs) < SCAN:
        page = app.broker.list_jobs(task=task, limit=1000, before_id=before)
        jobs += page
        if len(page) < 1000:
            break
        before = page[-1].id
    return jobs


def _line(job: Job) -> str:
    return (
        f"job {job.id} [{job.state.value}] queue={job.queue!r} "
        f"args={job.args!r} kwargs={job.kwargs!r}"
    )


def _near_misses(expected: Expected, jobs: list[Job], app: App) -> str:
    """The jobs of the task, closest first (fewest fields off, then newest), with how each
    differs; or, when there are none, which tasks were enqueued at all."""
    if not jobs:
        return "No job of that task was enqueued. " + _tasks_seen(app)
    ranked = sorted(jobs, key=lambda j: (len(expected.differences(j)), -j.id))
    lines = [f"Jobs of task {expected.task!r} enqueued ({len(jobs)}), closest first:"]
    for job in ranked[:SHOWN]:
        lines.append(f"  {_line(job)}")
        lines += [f"      {d}" for d in expected.differences(job)]
    if len(ranked) > SHOWN:
        lines.append(f"  ... and {len(ranked) - SHOWN} more")
    return "\n".join(lines)


def _tasks_seen(app: App) -> str:
    recent = app.broker.list_jobs(limit=1000)
    if not recent:
        return "No job was enqueued at all."
    counts = Counter(job.task for job in recent)
    listed = ", ".join(f"{task} ({n})" for task, n in sorted(counts.items()))
    return f"Tasks enqueued: {listed}."


def assert_enqueued(
    task: Task[Any, Any] | str,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    queue: str | None = None,
    *,
    app: App | None = None,
    count: int | None = None,
) -> list[Job]:
    """Assert that a job of ``task`` with these ``args`` (a list, exact), ``kwargs`` (a
    dict, exact) and ``queue`` was enqueued on the task's app (``app=`` for a task named
    by a string); None matches anything. ``count``: exactly that many such jobs. Returns
    the matching jobs, newest first. AssertionError otherwise, listing the closest jobs
    of the task and how each differs (or every task enqueued, when it has none)."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"count must be an integer >= 1 (use assert_not_enqueued), not {count!r}")
    expected, app = _expected(task, args, kwargs, queue, app)
    jobs = _jobs_of(app, expected.task)
    matching = [job for job in jobs if not expected.differences(job)]
    if matching and (count is None or len(matching) == count):
        return matching
    if not matching:
        raise AssertionError(
            f"expected {expected.describe()} to be enqueued, but none was.\n"
            + _near_misses(expected, jobs, app)
        )
    found = "\n".join(f"  {_line(job)}" for job in matching[:SHOWN])
    more = f"\n  ... and {len(matching) - SHOWN} more" if len(matching) > SHOWN else ""
    raise AssertionError(
        f"expected {expected.describe(f'{count} jobs')} to be enqueued, "
        f"found {len(matching)}:\n{found}{more}"
    )


def assert_not_enqueued(
    task: Task[Any, Any] | str,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    queue: str | None = None,
    *,
    app: App | None = None,
) -> None:
    """Assert that no job of ``task`` matching ``args``, ``kwargs`` and ``queue`` (None:
    any) was enqueued; AssertionError listing the ones that were."""
    expected, app = _expected(task, args, kwargs, queue, app)
    matching = [job for job in _jobs_of(app, expected.task) if not expected.differences(job)]
    if matching:
        shown = "\n".join(f"  {_line(job)}" for job in matching[:SHOWN])
        more = f"\n  ... and {len(matching) - SHOWN} more" if len(matching) > SHOWN else ""
        raise AssertionError(
            f"expected {expected.describe('no job')} to be enqueued, "
            f"but found {len(matching)}:\n{shown}{more}"
        )
