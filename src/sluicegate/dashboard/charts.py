"""Charts drawn on the server as inline SVG: no chart library, nothing loaded from
elsewhere, nothing for the Content-Security-Policy to allow. Colours come from classes
in dashboard.css (an SVG ``style`` attribute would be an inline style the policy forbids).
Every piece of text is escaped here, since the result is markup."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from markupsafe import Markup

WIDTH, HEIGHT = 600, 150
LEFT, RIGHT, TOP, BOTTOM = 52, 592, 12, 126  # the plot area inside the view box
SERIES_CLASSES = 8  # series-0 .. series-7, then round again


def bar(fraction: float | None, label: str = "", hot: bool = True) -> Markup:
    """A horizontal bar for busy/slots or in use/capacity (0..1, clamped); ``bar-hot``
    from 90% up, so a saturated budget stands out (``hot=False``: a plain comparison)."""
    f = 0.0 if fraction is None or math.isnan(fraction) else max(0.0, min(1.0, fraction))
    hot_class = " bar-hot" if hot and f >= 0.9 else ""
    return Markup(
        '<svg class="bar{hot}" viewBox="0 0 100 8" preserveAspectRatio="none" role="img"'
        ' aria-label="{label}"><rect class="bar-bg" width="100" height="8"/>'
        '<rect class="bar-fill" width="{w:.1f}" height="8"/></svg>'
    ).format(hot=hot_class, label=label or f"{100 * f:.0f}%", w=100 * f)


def nice_ceiling(value: float) -> float:
    """1, 2 or 5 times a power of ten at or above ``value`` (an axis' top)."""
    if value <= 0 or math.isnan(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power * (1 + 1e-9):
            return float(step * power)
    return float(10 * power)


def line_chart(
    series: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    step_s: float,
    label: Callable[[float], str],
    ceiling: float | None = None,
) -> Markup:
    """One line per series over the same time steps (oldest first, None: no figure for
    that step, drawn as a gap). ``label`` writes a y value; ``ceiling`` fixes the top
    (1.0 for utilisation), else it is the nearest 1-2-5 above the largest value."""
    points = max((len(v) for v in series.values()), default=0)
    values = [x for v in series.values() for x in v if x is not None and math.isfinite(x)]
    top = ceiling if ceiling is not None else nice_ceiling(max(values, default=0.0))
    parts = [
        Markup('<svg class="chart" viewBox="0 0 {w} {h}" role="img" aria-label="{t}">').format(
            w=WIDTH, h=HEIGHT, t=title
        ),
        Markup("<title>{}</title>").format(title),
        _grid(top, label, points, step_s),
    ]
    for i, (name, ys) in enumerate(series.items()):
        cls = f"series series-{i % SERIES_CLASSES}"
        for segment in _segments(ys, points, top):
            if len(segment) == 1:
                (x, y) = segment[0]
                parts.append(
                    Markup('<circle class="{c}" cx="{x:.1f}" cy="{y:.1f}" r="2"/>').format(
                        c=cls, x=x, y=y
                    )
                )
            else:
                coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in segment)
                parts.append(
                    Markup('<polyline class="{c}" points="{p}"><title>{n}</title></polyline>')
                    .format(c=cls, p=coords, n=name)
                )  # fmt: skip
    if not values:
        parts.append(
            Markup('<text class="chart-empty" x="{x}" y="{y}">no figures yet</text>').format(
                x=(LEFT + RIGHT) // 2 - 40, y=(TOP + BOTTOM) // 2
            )
        )
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)


def legend(names: Sequence[str]) -> Markup:
    """The series' names with their colours, as HTML under a chart."""
    items = [
        Markup('<li><span class="swatch series-{i}"></span>{n}</li>').format(
            i=i % SERIES_CLASSES, n=name
        )
        for i, name in enumerate(names)
    ]
    return Markup('<ul class="legend">{}</ul>').format(Markup("").join(items))


def _x(i: int, points: int) -> float:
    if points <= 1:
        return float(RIGHT)
    return LEFT + (RIGHT - LEFT) * i / (points - 1)


def _y(value: float, top: float) -> float:
    frac = max(0.0, min(1.0, value / top)) if top > 0 else 0.0
    return BOTTOM - (BOTTOM - TOP) * frac


def _segments(
    ys: Sequence[float | None], points: int, top: float
) -> list[list[tuple[float, float]]]:
    """Runs of consecutive figures; a missing one breaks the line."""
    out: list[list[tuple[float, float]]] = []
    run: list[tuple[float, float]] = []
    offset = points - len(ys)  # a shorter series ends at "now" with the others
    for i, value in enumerate(ys):
        if value is None or not math.isfinite(value):
            if run:
                out.append(run)
            run = []
            continue
        run.append((_x(i + offset, points), _y(value, top)))
    if run:
        out.append(run)
    return out


def _grid(top: float, label: Callable[[float], str], points: int, step_s: float) -> Markup:
    """Axis lines, the top and middle values, and the time span under the plot."""
    mid = (TOP + BOTTOM) / 2
    span_min = round(max(points - 1, 0) * step_s / 60)
    parts = [
        Markup('<line class="axis" x1="{l}" y1="{b}" x2="{r}" y2="{b}"/>').format(
            l=LEFT, r=RIGHT, b=BOTTOM
        ),
        Markup('<line class="grid" x1="{l}" y1="{t}" x2="{r}" y2="{t}"/>').format(
            l=LEFT, r=RIGHT, t=TOP
        ),
        Markup('<line class="grid" x1="{l}" y1="{m}" x2="{r}" y2="{m}"/>').format(
            l=LEFT, r=RIGHT, m=mid
        ),
        Markup('<text class="tick" x="{x}" y="{y}" text-anchor="end">{v}</text>').format(
            x=LEFT - 6, y=TOP + 4, v=label(top)
        ),
        Markup('<text class="tick" x="{x}" y="{y}" text-anchor="end">{v}</text>').format(
            x=LEFT - 6, y=mid + 4, v=label(top / 2)
        ),
        Markup('<text class="tick" x="{x}" y="{y}" text-anchor="end">0</text>').format(
            x=LEFT - 6, y=BOTTOM + 4
        ),
        Markup('<text class="tick" x="{x}" y="{y}">{v}</text>').format(
            x=LEFT, y=HEIGHT - 4, v=f"-{span_min} min" if span_min else ""
        ),
        Markup('<text class="tick" x="{x}" y="{y}" text-anchor="end">now</text>').format(
            x=RIGHT, y=HEIGHT - 4
        ),
    ]
    return Markup("").join(parts)


__all__ = ["bar", "legend", "line_chart", "nice_ceiling"]
