"""Fixed-bucket histograms over ``schema.BUCKETS``: cheap to observe, exact to merge.

Every worker uses the same bounds, so readers fold many workers' histograms by adding
counts (``merge``) and estimate quantiles from the fold (``quantile``), without ever
seeing the raw values. Both work on the dict form (``schema.Hist``) that snapshots carry.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence

from .schema import BUCKETS, Hist

SIZE = len(BUCKETS) + 1  # the last bucket holds values above every bound
_ZEROS = (0,) * SIZE
_INF = float("inf")


class Histogram:
    """Counts of observations per bucket (value <= bound, as Prometheus' ``le``), and
    their exact sum so the mean is exact even where the quantiles are estimates."""

    __slots__ = ("count", "counts", "sum")

    def __init__(self) -> None:
        self.counts: list[int] = list(_ZEROS)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count one value. Negative values (clock skew) count as 0; NaN and infinities
        are dropped, since one of them would poison the sum and the JSON."""
        if value < 0.0:
            value = 0.0
        elif not value < _INF:
            return
        self.counts[bisect_left(BUCKETS, value)] += 1
        self.count += 1
        self.sum += value

    def merge(self, other: Histogram) -> None:
        """Add ``other``'s observations to this one (in place)."""
        counts = self.counts
        for i, c in enumerate(other.counts):
            counts[i] += c
        self.count += other.count
        self.sum += other.sum

    def clear(self) -> None:
        """Forget everything, reusing the lists (ring slots are cleared, not replaced)."""
        self.counts[:] = _ZEROS
        self.count = 0
        self.sum = 0.0

    def copy(self) -> Histogram:
        new = Histogram()
        new.counts[:] = self.counts
        new.count = self.count
        new.sum = self.sum
        return new

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0..1), interpolated linearly inside its bucket; None if empty."""
        return _quantile(self.counts, q)

    def to_dict(self) -> Hist:
        return {"counts": list(self.counts), "count": self.count, "sum": self.sum}

    @classmethod
    def from_dict(cls, hist: Hist) -> Histogram:
        """A histogram holding ``hist``'s figures (copied). ValueError if its buckets are
        not this version's."""
        new = cls()
        new.counts[:] = _checked(hist["counts"])
        new.count = int(hist["count"])
        new.sum = float(hist["sum"])
        return new


def empty() -> Hist:
    """A Hist with no observations."""
    return {"counts": list(_ZEROS), "count": 0, "sum": 0.0}


def merge(a: Hist, b: Hist) -> Hist:
    """A new Hist holding the observations of both (neither is changed)."""
    ca, cb = _checked(a["counts"]), _checked(b["counts"])
    return {
        "counts": [x + y for x, y in zip(ca, cb, strict=True)],
        "count": a["count"] + b["count"],
        "sum": a["sum"] + b["sum"],
    }


def merge_all(hists: Iterable[Hist]) -> Hist:
    """One Hist holding every one of ``hists`` (the same figure from many workers)."""
    out = empty()
    for hist in hists:
        out = merge(out, hist)
    return out


def mean(hist: Hist) -> float | None:
    """Exact (the sum is kept exactly); None for an empty histogram."""
    return hist["sum"] / hist["count"] if hist["count"] > 0 else None


def quantile(hist: Hist, q: float) -> float | None:
    """The q-quantile (0..1) of a Hist, as ``Histogram.quantile``; None if empty."""
    return _quantile(_checked(hist["counts"]), q)


def _checked(counts: Sequence[int]) -> Sequence[int]:
    if len(counts) != SIZE:
        raise ValueError(f"histogram has {len(counts)} buckets, expected {SIZE}")
    return counts


def _quantile(counts: Sequence[int], q: float) -> float | None:
    """Prometheus' estimate: find the bucket holding rank q x total, then assume its
    values are spread evenly between its bounds (the first bucket starts at 0; values past
    the last bound read as the last bound, the best a bounded histogram can say)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within 0..1, got {q!r}")
    total = sum(counts)
    if not total:
        return None
    rank = q * total
    below = 0
    for i, c in enumerate(counts):
        if c and below + c >= rank:
            if i == len(BUCKETS):
                return BUCKETS[-1]
            lower = BUCKETS[i - 1] if i else 0.0
            return lower + (BUCKETS[i] - lower) * ((rank - below) / c)
        below += c
    return BUCKETS[-1]  # unreachable: the last non-empty bucket always holds the rank
