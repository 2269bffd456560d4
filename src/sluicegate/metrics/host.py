"""The machine a worker runs on: CPU busy and I/O wait since the last sample, load, CPUs.

Whether more slots would help depends on the host as much as on the queue: a pool at 100%
on a saturated CPU needs another machine, not more threads. Sampling is best effort: a
platform that lacks a figure, or a psutil call that fails, gives zeros (None for I/O
wait) rather than an exception in the worker's loop.
"""

from __future__ import annotations

import os

import psutil

from .schema import HostFigures


class HostSampler:
    """CPU figures cover the time since the previous ``sample`` (psutil keeps the last
    reading, once per process: one sampler per process, or they split the intervals)."""

    def __init__(self) -> None:
        self._cpus = _cpu_count()
        self._primed = False

    def sample(self) -> HostFigures:
        """The host's figures now. The first call only primes psutil's CPU reading, so
        its CPU figures are 0 (I/O wait None); later calls cover the time since the last."""
        cpu, iowait = self._cpu()
        load1, load5, load15 = _load()
        return {
            "cpus": self._cpus,
            "cpu_percent": cpu,
            "iowait_percent": iowait,
            "load1": load1,
            "load5": load5,
            "load15": load15,
        }

    def _cpu(self) -> tuple[float, float | None]:
        try:
            times = psutil.cpu_times_percent(interval=None)
        except Exception:
            return 0.0, None
        if not self._primed:
            self._primed = True
            return 0.0, None
        iowait: float | None = getattr(times, "iowait", None)
        # Busy as psutil.cpu_percent counts it: neither idle nor waiting on I/O.
        busy = 100.0 - times.idle - (iowait or 0.0)
        return round(min(100.0, max(0.0, busy)), 1), None if iowait is None else round(iowait, 1)


def _cpu_count() -> int:
    try:
        return psutil.cpu_count() or os.cpu_count() or 0
    except Exception:
        return os.cpu_count() or 0


def _load() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except (AttributeError, OSError):
        pass  # not on this platform: psutil emulates it (Windows)
    try:
        load1, load5, load15 = psutil.getloadavg()
        return load1, load5, load15
    except Exception:
        return 0.0, 0.0, 0.0
