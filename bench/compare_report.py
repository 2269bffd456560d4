"""The markdown tables of bench/compare.py: figures, ratios to sluicegate, the machine."""

from __future__ import annotations

import math
import statistics
from typing import Any

# sluicegate's row for each kind of store: the peers' ratios are taken against it.
BASELINE = {"sqlite": "sluicegate-sqlite", "postgresql": "sluicegate-pg", "redis": "sluicegate-pg"}


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(values) if values else None


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def rate_cell(result: dict[str, Any], key: str) -> str:
    """A median rate, with a mark where a drain did not finish within --drain-timeout."""
    runs = result.get(key) or []
    if isinstance(runs, str):
        return runs  # "n/a: why"
    value = median([r["rate"] for r in runs])
    partial = any(not r.get("complete", True) for r in runs)
    return num(value) + (" (partial)" if partial else "") if value is not None else "-"


def io20_cell(result: dict[str, Any]) -> str:
    runs = result.get("io20") or []
    if not runs:
        return "-"
    seconds = median([r["seconds"] for r in runs])
    bound = runs[0]["bound"]
    if seconds is None:
        return "-"
    partial = " (partial)" if any(not r["complete"] for r in runs) else ""
    return f"{seconds:.2f} s = {bound / seconds:.0%} of bound{partial}"


def latency_cell(result: dict[str, Any]) -> str:
    lat = result.get("latency")
    if not lat:
        return "-"
    return f"{lat['p50_ms']:.1f} / {lat['p99_ms']:.1f}"


def cpu_cell(result: dict[str, Any], key: str) -> str:
    runs = result.get("eight") or []
    if isinstance(runs, str) or not runs:
        return "-"
    values = [r[key] for r in runs if r.get(key) is not None]
    if not values:
        return "n/a (in process)" if key == "broker_cpu_ms_per_1k" else "-"
    return num(median(values))


def kill_cell(result: dict[str, Any]) -> str:
    kill = result.get("kill")
    if not kill:
        return "-"
    recovery = (
        f"{kill['recovery_s']:.1f} s" if kill["recovery_s"] is not None else "not within wait"
    )
    return f"{kill['lost']} / {kill['duplicates']} / {recovery}"


COLUMNS = [
    ("enqueue one by one /s", lambda r: rate_cell(r, "one")),
    ("enqueue bulk /s", lambda r: rate_cell(r, "bulk")),
    ("drain, default /s", lambda r: rate_cell(r, "default")),
    ("drain, 8-way /s", lambda r: rate_cell(r, "eight")),
    ("2,000 x 20 ms on 50 slots", io20_cell),
    ("idle latency p50 / p99 ms", latency_cell),
    ("worker CPU ms/1k jobs", lambda r: cpu_cell(r, "worker_cpu_ms_per_1k")),
    ("broker CPU ms/1k jobs", lambda r: cpu_cell(r, "broker_cpu_ms_per_1k")),
    ("kill: not done / started twice / recovery", kill_cell),
]


def figures_table(systems: list[dict[str, Any]]) -> list[str]:
    lines = ["| system | " + " | ".join(c for c, _ in COLUMNS) + " |"]
    lines.append("|---" * (len(COLUMNS) + 1) + "|")
    for s in systems:
        if s.get("skipped"):
            continue
        cells = [fn(s["results"]) for _, fn in COLUMNS]
        lines.append(f"| {s['label']} {s.get('version', '')} | " + " | ".join(cells) + " |")
    return lines


def scalar(result: dict[str, Any], key: str) -> float | None:
    """The median figure a ratio is taken from (higher is better for all but CPU/latency)."""
    if key == "p50":
        lat = result.get("latency")
        return lat["p50_ms"] if lat else None
    if key == "io20":
        runs = result.get("io20") or []
        return median([r["bound"] / r["seconds"] for r in runs]) if runs else None
    runs = result.get("eight" if key == "cpu" else key) or []
    if isinstance(runs, str):
        return None
    field = "worker_cpu_ms_per_1k" if key == "cpu" else "rate"
    return median([r[field] for r in runs if r.get(field) is not None])


RATIOS = [
    ("enqueue one", "one"),
    ("bulk", "bulk"),
    ("drain default", "default"),
    ("drain 8-way", "eight"),
    ("50-slot efficiency", "io20"),
    ("idle p50 (lower: faster)", "p50"),
    ("worker CPU (lower: cheaper)", "cpu"),
]


def ratio_table(systems: list[dict[str, Any]]) -> list[str]:
    """Each peer's figure over sluicegate's on the same kind of store ("x sluicegate")."""
    by_key = {s["key"]: s for s in systems if not s.get("skipped")}
    lines = ["| system | against | " + " | ".join(n for n, _ in RATIOS) + " |"]
    lines.append("|---" * (len(RATIOS) + 2) + "|")
    for s in systems:
        if s.get("skipped") or s["key"].startswith("sluicegate"):
            continue
        base = by_key.get(BASELINE[s["store"]])
        if base is None:
            continue
        cells = []
        for _, key in RATIOS:
            mine, theirs = scalar(s["results"], key), scalar(base["results"], key)
            cells.append(f"{mine / theirs:.2f}x" if mine and theirs else "-")
        lines.append(f"| {s['label']} | {base['label']} | " + " | ".join(cells) + " |")
    return lines


def markdown(report: dict[str, Any]) -> str:
    systems = report["systems"]
    out = [f"# sluicegate and its peers ({report['date']})", ""]
    out += figures_table(systems)
    out += ["", "Ratios: each peer's median over sluicegate's on the same kind of store "
            "(SQLite peers against sluicegate on SQLite; PostgreSQL and Redis peers against "
            "sluicegate on PostgreSQL). Above 1 the peer is faster, except the last two "
            "columns (lower is better there).", ""]  # fmt: skip
    out += ratio_table(systems)
    out += ["", "What `default` means, and each system's crash recovery:", ""]
    for s in systems:
        if s.get("skipped"):
            out.append(f"- {s['label']}: skipped: {s['skipped']}")
        else:
            out.append(f"- {s['label']} {s.get('version', '')}: {s.get('notes', '')}")
    out += ["", "Machine:", ""]
    out += [f"- {k}: {v}" for k, v in report["machine"].items()]
    out += ["", f"Options: {report['options']}", ""]
    out.append(f"Total time: {report['total_s'] / 60:.1f} min.")
    return "\n".join(out) + "\n"
