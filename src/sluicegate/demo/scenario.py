"""The 09:00 arrivals and the two pool layouts they run against."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ..worker import PoolSpec

CLASSES = ("transcode", "email", "index")
SHARED_POOLS = (PoolSpec("shared", CLASSES, 10),)
SEPARATE_POOLS = (
    PoolSpec("transcode", ("transcode",), 4),
    PoolSpec("email", ("email",), 3),
    PoolSpec("index", ("index",), 2),
)
DEFAULT_SEED = 900  # 09:00

BURST_GAP = 0.005  # seconds between two transcode enqueues of the burst
TRICKLE_START = 0.25  # the trickle starts shortly after the burst
# job class: (seconds between arrivals, seconds of work)
TRICKLE = {
    "email": ((0.05, 0.10), (0.015, 0.025)),
    "index": ((0.08, 0.12), (0.04, 0.06)),
}


@dataclass(frozen=True, slots=True)
class Arrival:
    """One job to enqueue ``at`` seconds after the run starts; its body takes ``seconds``."""

    at: float
    job_class: str
    seconds: float


def build_schedule(quick: bool = False, seed: int = DEFAULT_SEED) -> list[Arrival]:
    """Seeded arrivals: a burst of transcodes (~0.5 s each), then emails (~20 ms, one every
    50-100 ms) and index updates (~50 ms, one every ~100 ms) trickling in for a few seconds."""
    rng = random.Random(seed)
    transcodes, trickle_end = (12, 1.5) if quick else (40, 3.5)
    arrivals = [
        Arrival(round(i * BURST_GAP, 4), "transcode", rng.uniform(0.45, 0.55))
        for i in range(transcodes)
    ]
    for job_class, (gap, work) in TRICKLE.items():
        at = TRICKLE_START + rng.uniform(0.0, gap[0])
        while at < trickle_end:
            arrivals.append(Arrival(round(at, 4), job_class, rng.uniform(*work)))
            at += rng.uniform(*gap)
    return sorted(arrivals, key=lambda a: a.at)


def budget_text(pools: Sequence[PoolSpec]) -> str:
    """``10 slots over transcode, email, index`` or ``transcode 4, email 3, index 2``."""
    if len(pools) == 1:
        return f"{pools[0].slots} slots over {', '.join(pools[0].queues)}"
    return ", ".join(f"{p.name} {p.slots}" for p in pools)
