"""``sluicegate demo``: 09:00 at a video platform, one shared pool vs separate budgets.

A burst of transcode jobs (~0.5 s each) lands at once; password-reset emails
(~20 ms) and search-index updates (~50 ms) trickle in just after. The same seeded
arrivals run twice through an in-process Worker, each time on a fresh temporary
SQLite file: first with one shared pool of 10 slots over all three queues, then
with separate pools (transcode 4, email 3, index 2). Each task records when its
body started (keyed by ``current_job().id``); wait = start - enqueued. The work is
simulated with ``time.sleep`` in the thread model.
"""

from __future__ import annotations

import time

from rich.console import Console

from .measure import ClassStats, DemoResult, RunResult, percentile
from .report import conclude, report
from .run import run_scenario
from .scenario import (
    CLASSES,
    DEFAULT_SEED,
    SEPARATE_POOLS,
    SHARED_POOLS,
    Arrival,
    budget_text,
    build_schedule,
)

__all__ = [
    "Arrival",
    "ClassStats",
    "DemoResult",
    "RunResult",
    "build_schedule",
    "percentile",
    "run_demo",
]


def run_demo(
    quick: bool = False, *, console: Console | None = None, seed: int = DEFAULT_SEED
) -> DemoResult:
    """Run the arrivals with one shared pool, then with separate pools; print and return."""
    console = console or Console()
    began = time.monotonic()
    schedule = build_schedule(quick, seed)
    counts = {c: sum(1 for a in schedule if a.job_class == c) for c in CLASSES}
    console.print(
        f"[bold]09:00 at a video platform.[/] {counts['transcode']} transcode jobs (~0.5 s each) "
        f"land at once; {counts['email']} password-reset emails (~20 ms) and {counts['index']} "
        f"search-index updates (~50 ms) trickle in over {schedule[-1].at:.1f} s.\n"
        "The same seeded arrivals run twice, each on a fresh temporary SQLite file "
        "(the work is simulated with sleep, thread model).\n"
    )
    runs = []
    for n, (label, pools) in enumerate(
        (("one shared pool", SHARED_POOLS), ("separate pools", SEPARATE_POOLS)), start=1
    ):
        console.rule(f"run {n} of 2: {label} [dim]({budget_text(pools)})[/]")
        runs.append(run_scenario(label, pools, schedule, console))
    shared, separate = runs
    console.print()
    console.print(report(shared, separate))
    conclusion = conclude(shared, separate)
    console.print()
    for line in conclusion:
        console.print(line, highlight=False)
    elapsed = time.monotonic() - began
    console.print(f"[dim]demo took {elapsed:.1f} s[/]")
    return DemoResult(quick, shared, separate, conclusion, elapsed)
