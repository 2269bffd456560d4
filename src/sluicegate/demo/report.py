"""The side-by-side table and the two-line conclusion, both computed from the numbers."""

from __future__ import annotations

from rich import box
from rich.table import Table

from .measure import RunResult
from .scenario import CLASSES, budget_text, cores

SAME = 0.10  # completion times within 10% of each other are "about the same"
MODEL_NOTE = (
    "A pool has one model: the shared pool ran everything in processes, as the CPU-bound "
    "transcodes need, so its emails ran as send_email_sync (a coroutine cannot run there)."
)


def _ms(value: float) -> str:
    return f"{value:,.0f} ms"


def _transcode_cost(shared: RunResult, separate: RunResult) -> str:
    """What separate budgets cost the transcode burst, in words."""
    s_tc = shared.classes["transcode"].completion_s
    p_tc = separate.classes["transcode"].completion_s
    figures = f"({p_tc:.1f} s vs {s_tc:.1f} s)"
    if abs(p_tc - s_tc) <= SAME * s_tc:
        slots = next((p.slots for p in separate.pools if "transcode" in p.queues), 0)
        n = cores()
        if slots >= n:
            return (
                f", and transcodes finished about as soon {figures}: {slots} processes already "
                f"keep {n} core{'s' if n != 1 else ''} busy."
            )
        return f", and transcodes finished about as soon {figures}."
    if p_tc > s_tc:
        return f", at the cost of transcodes finishing later {figures}."
    return f", and transcodes finished sooner {figures}."


def conclude(shared: RunResult, separate: RunResult) -> tuple[str, str]:
    """Two plain-language lines: the email p95 wait, then what it means (or that it did not
    show), including the cost to transcodes when there is one."""
    s_mail, p_mail = shared.classes["email"], separate.classes["email"]
    first = (
        f"email p95 wait: {_ms(s_mail.p95_wait_ms)} shared vs {_ms(p_mail.p95_wait_ms)} separate"
    )
    s_idx, p_idx = shared.classes.get("index"), separate.classes.get("index")
    if s_idx is not None and p_idx is not None:
        first += f" (index: {_ms(s_idx.p95_wait_ms)} vs {_ms(p_idx.p95_wait_ms)})"
    first += "."
    if p_mail.p95_wait_ms < s_mail.p95_wait_ms:
        second = (
            "With one shared pool, short jobs queue behind the transcode burst; "
            "separate budgets keep them flowing" + _transcode_cost(shared, separate)
        )
    else:
        second = (
            "This run did not show the effect: emails waited no longer with one shared pool "
            "than with separate budgets (is the machine overloaded?)."
        )
    return first, second


def report(shared: RunResult, separate: RunResult) -> Table:
    """ONE side-by-side table: a row per job class, shared vs separate for each figure."""
    n = cores()
    table = Table(
        title="Same arrivals, two ways to budget the slots",
        caption=f"shared: {budget_text(shared.pools)}\n"
        f"separate: {budget_text(separate.pools)} ({n} core{'s' if n != 1 else ''} here)\n"
        "wait = enqueued -> started; done after = run start -> class's last job done",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("job class", no_wrap=True)
    table.add_column("jobs", justify="right")
    for figure in ("p50 wait", "p95 wait", "done after"):
        table.add_column(f"{figure}\nshared", justify="right")
        table.add_column("\nseparate", justify="right", style="bold")
    for job_class in CLASSES:
        s, p = shared.classes.get(job_class), separate.classes.get(job_class)
        if s is None or p is None:
            continue
        table.add_row(
            job_class,
            str(s.jobs),
            _ms(s.p50_wait_ms),
            _ms(p.p50_wait_ms),
            _ms(s.p95_wait_ms),
            _ms(p.p95_wait_ms),
            f"{s.completion_s:.1f} s",
            f"{p.completion_s:.1f} s",
        )
    return table
