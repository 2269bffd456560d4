"""The 09:00 arrivals and the two pool layouts they run against."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass

from ..app import App
from ..worker import PoolSpec
from . import tasks

CLASSES = ("transcode", "email", "index")
SHARED_POOLS = (PoolSpec("shared", CLASSES, 10, "process"),)
SEPARATE_POOLS = (
    PoolSpec("transcode", ("transcode",), 4, "process"),
    PoolSpec("email", ("email",), 3, "async"),
    PoolSpec("index", ("index",), 2, "thread"),
)
DEFAULT_SEED = 900  # 09:00

BURST_GAP = 0.005  # seconds between two transcode enqueues of the burst
TRANSCODE_CPU = (0.35, 0.45)  # seconds of CPU per transcode (hashing, calibrated at start)
TRICKLE_START = 0.25  # the trickle starts shortly after the burst
# job class: (seconds between arrivals, seconds of work)
TRICKLE = {
    "email": ((0.05, 0.10), (0.015, 0.025)),
    "index": ((0.08, 0.12), (0.04, 0.06)),
}


@dataclass(frozen=True, slots=True)
class Arrival:
    """One job to enqueue ``at`` seconds after the run starts; its body takes ``seconds``
    (of CPU for a transcode, of waiting for the others)."""

    at: float
    job_class: str
    seconds: float


@dataclass(frozen=True, slots=True)
class Layout:
    """One way to budget the slots: the pools, and the app whose tasks fit their models."""

    name: str  # a file name: its broker is <name>.db
    label: str
    app: App
    pools: tuple[PoolSpec, ...]
    tasks: dict[str, str]  # job class -> task name


SHARED = Layout(
    "shared",
    "one shared pool",
    tasks.shared_app,
    SHARED_POOLS,
    {"transcode": "transcode_video", "email": "send_email_sync", "index": "update_search_index"},
)
SEPARATE = Layout(
    "separate",
    "separate pools",
    tasks.app,
    SEPARATE_POOLS,
    {"transcode": "transcode_video", "email": "send_email", "index": "update_search_index"},
)


def build_schedule(quick: bool = False, seed: int = DEFAULT_SEED) -> list[Arrival]:
    """Seeded arrivals: a burst of transcodes (~0.4 s of CPU each), then emails (~20 ms, one
    every 50-100 ms) and index updates (~50 ms, one every ~100 ms) trickling in for a few
    seconds."""
    rng = random.Random(seed)
    transcodes, trickle_end = (12, 1.5) if quick else (40, 3.5)
    arrivals = [
        Arrival(round(i * BURST_GAP, 4), "transcode", rng.uniform(*TRANSCODE_CPU))
        for i in range(transcodes)
    ]
    for job_class, (gap, work) in TRICKLE.items():
        at = TRICKLE_START + rng.uniform(0.0, gap[0])
        while at < trickle_end:
            arrivals.append(Arrival(round(at, 4), job_class, rng.uniform(*work)))
            at += rng.uniform(*gap)
    return sorted(arrivals, key=lambda a: a.at)


def cores() -> int:
    """CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def budget_text(pools: Sequence[PoolSpec]) -> str:
    """``10 process slots over transcode, email, index`` or
    ``transcode 4 process, email 3 async, index 2 thread``."""
    if len(pools) == 1:
        return f"{pools[0].slots} {pools[0].model} slots over {', '.join(pools[0].queues)}"
    return ", ".join(f"{p.name} {p.slots} {p.model}" for p in pools)
