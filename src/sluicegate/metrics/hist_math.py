"""Arithmetic on the snapshot's ``Hist`` dicts, for the readers (cluster view, sizing).

Readers only ever merge histograms from several workers and ask for a quantile or a
mean; this keeps that to plain dicts so a reader needs nothing from the recorder side.
Bucket i holds values in (BUCKETS[i-1], BUCKETS[i]] (the first from 0), as Prometheus
``le`` buckets do; the last bucket holds values above every bound.
"""

from __future__ import annotations

from collections.abc import Iterable

from .schema import BUCKETS, Hist

SIZE = len(BUCKETS) + 1


def empty() -> Hist:
    return {"counts": [0] * SIZE, "count": 0, "sum": 0.0}


def merge(a: Hist, b: Hist) -> Hist:
    """A new Hist holding both: counts add bucket by bucket, as do count and sum."""
    _check(a)
    _check(b)
    return {
        "counts": [x + y for x, y in zip(a["counts"], b["counts"], strict=True)],
        "count": a["count"] + b["count"],
        "sum": a["sum"] + b["sum"],
    }


def merge_all(hists: Iterable[Hist]) -> Hist:
    out = empty()
    for hist in hists:
        out = merge(out, hist)
    return out


def mean(hist: Hist) -> float | None:
    """Exact (the sum is kept exactly); None for an empty histogram."""
    return hist["sum"] / hist["count"] if hist["count"] > 0 else None


def quantile(hist: Hist, q: float) -> float | None:
    """The q-quantile (0 <= q <= 1), interpolated linearly within its bucket; None when
    empty. A quantile that falls in the last, unbounded bucket is reported as the
    highest bound: the histogram cannot say how far above it the values lie."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be between 0 and 1, not {q!r}")
    _check(hist)
    total = sum(hist["counts"])
    if total <= 0:
        return None
    rank = q * total
    below = 0
    for i, count in enumerate(hist["counts"]):
        if count <= 0:
            continue
        if below + count >= rank:
            if i >= len(BUCKETS):
                return BUCKETS[-1]
            lower = BUCKETS[i - 1] if i > 0 else 0.0
            upper = BUCKETS[i]
            return lower + (upper - lower) * max(0.0, rank - below) / count
        below += count
    return BUCKETS[-1]  # unreachable: the last occupied bucket reaches the rank


def _check(hist: Hist) -> None:
    if len(hist["counts"]) != SIZE:
        raise ValueError(
            f"a histogram has {SIZE} buckets (schema.BUCKETS and one above them), "
            f"not {len(hist['counts'])}"
        )
