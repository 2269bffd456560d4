"""The overview: every queue's depth, oldest age and rates; every pool's busy/slots;
workers; limits; and the last hour's charts. One stats read, one registry read and one
limits read, whatever the size of the jobs table."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response

from ...job import JobState
from .. import charts, format
from ..data import System
from ..render import dashboard, render

FINISHED = (JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED)


def overview(request: Request) -> Response:
    source = dashboard(request).source
    system = source.system()
    limits, _values, _now = source.limits()
    return render(
        request,
        "overview.html",
        {
            "now": system.now,
            "queues": queue_rows(system),
            "pools": pool_rows(system.view),
            "workers": system.view["workers"],
            "hosts": system.view["hosts"],
            "limits": limits,
            "charts": history_charts(system.history),
        },
        nav="overview",
    )


def queue_rows(system: System) -> list[dict[str, Any]]:
    """Per queue: the fold's depth and rates, with the finished counts of the stats read."""
    rows = []
    for name, q in sorted(system.view["queues"].items()):
        counts = system.stats.queues.get(name)
        finished = {s: (counts.counts.get(s, 0) if counts else 0) for s in FINISHED}
        rows.append(
            {
                "name": name,
                **q,
                "held": q["claimed"] + q["running"],
                "paused": system.paused.get(name),
                **{state.value: n for state, n in finished.items()},
            }
        )
    return rows


def pool_rows(view: dict[str, Any]) -> list[dict[str, Any]]:
    """Per pool: busy/slots and utilisation, and mean duration by concurrency at start
    (when it grows with busy slots, more slots moved the pressure to a dependency)."""
    rows = []
    for name, p in sorted(view["pools"].items()):
        bins = [
            {"busy": busy, "count": b["count"], "mean_s": b["sum"] / b["count"]}
            for busy, b in p["by_concurrency"].items()
            if b["count"]
        ]
        slowest = max((b["mean_s"] for b in bins), default=0.0)
        for b in bins:
            b["fraction"] = b["mean_s"] / slowest if slowest > 0 else 0.0
        rows.append({"name": name, **p, "bins": bins})
    return rows


def history_charts(history: dict[str, Any], queue: str | None = None) -> list[dict[str, Any]]:
    """Completions/s and oldest ready age per queue, utilisation per pool, over the last
    hour (``queue``: that queue's lines only)."""
    step = float(history.get("step_s") or 60)
    queues = {
        name: q
        for name, q in sorted(history.get("queues", {}).items())
        if queue is None or name == queue
    }
    pools = dict(sorted(history.get("pools", {}).items()))
    if queue is not None:
        pools = {}
    specs = [
        ("chart-completions", "Completions per second", queues, "completed_per_s", format.rate, None),
        ("chart-oldest-age", "Oldest ready job's age", queues, "oldest_ready_age_s", format.age, None),
        ("chart-utilisation", "Pool utilisation", pools, "utilisation", format.pct, 1.0),
    ]  # fmt: skip
    out = []
    for testid, title, source, key, label, ceiling in specs:
        if queue is not None and source is pools:
            continue
        series = {name: list(figures.get(key) or []) for name, figures in source.items()}
        svg: Markup = charts.line_chart(
            series, title=title, step_s=step, label=label, ceiling=ceiling
        )
        out.append({"id": testid, "title": title, "svg": svg, "names": list(series)})
    return out
