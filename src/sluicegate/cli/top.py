"""`sluicegate top`: a live terminal view of queues, pools and workers, every second.

Each frame is two cheap reads: the depth of every queue with unfinished jobs (through
the partial indexes, never the finished rows) and the registry (one row per worker,
with its last snapshot). Fits 80 columns; quits on q or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import select
import sys
import time
from collections.abc import Iterator
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..brokers import Broker
from ..metrics.cluster import fold
from ..units import age, ms
from .common import broker_option, friendly_errors, open_app
from .figures import bar, rate, status


def frame(broker: Broker) -> Group:
    """One screen of figures, read now."""
    view = fold(broker.list_workers(), broker.queue_depths())
    return render(view, broker.url)


def render(view: dict[str, Any], url: str) -> Group:
    live = sum(1 for w in view["workers"] if w["status"] == "live")
    head = Text.assemble(
        ("sluicegate top", "bold"),
        f"  {time.strftime('%H:%M:%S')}  {live} worker(s) live  q: quit\n",
        (url[:80], "dim"),
    )
    gap = Text("")
    return Group(head, gap, _queues(view), gap, _pools(view), gap, _workers(view))


def _queues(view: dict[str, Any]) -> Table:
    table = Table(
        "queue", "ready", "sched", "run", "oldest", "in/s", "done/s", "p50", "p95", "fail",
        box=None, header_style="bold", pad_edge=False,
    )  # fmt: skip
    for name, q in sorted(view["queues"].items()):
        table.add_row(
            name[:14],
            str(q["ready"]),
            str(q["scheduled"]),
            str(q["claimed"] + q["running"]),
            age(q["oldest_ready_age_s"]),
            rate(q["enqueue_rate"]),
            rate(q["completion_rate"]),
            ms(q["duration_p50_s"]),
            ms(q["duration_p95_s"]),
            "-" if q["failed"] is None else str(q["failed"]),
        )
    return table


def _pools(view: dict[str, Any]) -> Table:
    table = Table(
        "pool", "model", "busy", "utilisation 1m", "", "5m", "15m",
        box=None, header_style="bold", pad_edge=False,
    )  # fmt: skip
    for name, p in sorted(view["pools"].items()):
        u = p["utilisation"]
        table.add_row(
            name[:14],
            p["model"],
            f"{p['busy']}/{p['slots']}",
            bar(u["1m"], 12),
            f"{100 * u['1m']:.0f}%",
            f"{100 * u['5m']:.0f}%",
            f"{100 * u['15m']:.0f}%",
        )
    return table


def _workers(view: dict[str, Any]) -> Table:
    table = Table(
        "worker", "status", "held", "seen", "busy/slots", "up",
        box=None, header_style="bold", pad_edge=False,
    )  # fmt: skip
    for w in view["workers"]:
        busy = sum(p["busy"] or 0 for p in w["pools"])
        slots = sum(p["slots"] for p in w["pools"])
        table.add_row(
            w["id"][-24:],
            status(w),
            str(w["held"]),
            age(w["last_seen_age_s"]),
            f"{busy}/{slots} in {len(w['pools'])} pool(s)",
            age(w["uptime_s"]),
        )
    return table


@contextlib.contextmanager
def _keys() -> Iterator[Any]:
    """Single keypresses from a terminal without Enter; a no-op when stdin is not one."""
    if not sys.stdin.isatty():
        yield None
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield sys.stdin
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _quit_pressed(stdin: Any, timeout: float) -> bool:
    """Wait up to ``timeout`` s for a key; True if it was q."""
    if stdin is None:
        time.sleep(timeout)
        return False
    ready, _, _ = select.select([stdin], [], [], timeout)
    return bool(ready) and stdin.read(1) in ("q", "Q")


@click.command()
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option("--once", is_flag=True, help="Print one frame and exit (for scripts).")
@broker_option
@friendly_errors
def top(interval: float, once: bool, broker_url: str | None) -> None:
    """Live view of queues (depth, oldest age, rates, p50/p95, failures), pools
    (busy/slots, utilisation) and workers. q or Ctrl-C quits."""
    broker = open_app(broker_url).broker
    console = Console()
    if once:
        console.print(frame(broker))
        return
    try:
        with _keys() as stdin, Live(frame(broker), console=console, auto_refresh=False) as live:
            while not _quit_pressed(stdin, interval):
                live.update(frame(broker), refresh=True)
    except KeyboardInterrupt:
        pass
