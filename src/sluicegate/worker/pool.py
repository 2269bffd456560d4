"""Pool specs and the per-pool slot budget.

A pool is a named budget of N slots over one or more queues with a concurrency
model (a key of ``models.MODELS``) and that model's options. It claims only as many jobs as it has free slots, so waiting work stays in
the broker where any other worker can take it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..job import Claim, ClaimedJob
from ..names import check_name
from .models import ConcurrencyModel, get_model, validate_model_options

MAX_SLOTS = 10_000
SPEC_FORMAT = "NAME=QUEUE[*WEIGHT][,QUEUE[*WEIGHT]...]:SLOTS[:MODEL]"


@dataclass(frozen=True, slots=True)
class PoolSpec:
    name: str
    queues: tuple[str, ...]
    slots: int
    model: str = "thread"
    weights: tuple[int, ...] | None = None  # per queue; None: one claim order over all queues
    # The model's own options by name (e.g. the process model's max_jobs_per_child), as
    # given; checked against what the model declares and stored with its defaults.
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        self._check()
        try:
            checked = validate_model_options(self.model, self.options)
        except ConfigError as exc:
            raise ConfigError(f"pool {self.name!r}: {exc}") from None
        object.__setattr__(self, "options", checked)

    def _check(self) -> None:
        check_name("pool", self.name)
        if not self.queues:
            raise ConfigError(f"pool {self.name!r} has no queues")
        for queue in self.queues:
            check_name("queue", queue)
        if isinstance(self.slots, bool) or not isinstance(self.slots, int):
            raise ConfigError(f"pool {self.name!r}: slots must be an integer")
        if not 1 <= self.slots <= MAX_SLOTS:
            raise ConfigError(f"pool {self.name!r}: slots must be between 1 and {MAX_SLOTS}")
        if self.weights is not None and (
            len(self.weights) != len(self.queues) or any(w < 1 for w in self.weights)
        ):
            raise ConfigError(f"pool {self.name!r}: one weight >= 1 per queue")


DEFAULT_POOL = PoolSpec("default", ("default",), 10)


def parse_pool_spec(text: str) -> PoolSpec:
    """Parse ``NAME=QUEUE[,QUEUE...]:SLOTS[:MODEL]``, e.g. ``email=email,notify:3:thread``."""
    name, sep, rest = text.partition("=")
    if not sep or not name:
        raise ConfigError(f"malformed pool spec {text!r}: expected {SPEC_FORMAT}")
    parts = rest.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise ConfigError(f"malformed pool spec {text!r}: expected {SPEC_FORMAT}")
    queues_weights = [q.strip().partition("*") for q in parts[0].split(",")]
    queues = tuple(q for q, _, _ in queues_weights)
    weights = None
    if any(star for _, star, _ in queues_weights):
        try:
            weights = tuple(int(w) if star else 1 for _, star, w in queues_weights)
        except ValueError:
            raise ConfigError(f"malformed pool spec {text!r}: WEIGHT must be an integer") from None
    try:
        slots = int(parts[1])
    except ValueError:
        raise ConfigError(
            f"malformed pool spec {text!r}: SLOTS must be an integer, not {parts[1]!r}"
        ) from None
    model = parts[2] if len(parts) == 3 else "thread"
    try:
        return PoolSpec(name.strip(), queues, slots, model, weights=weights)
    except ConfigError as exc:
        raise ConfigError(f"malformed pool spec {text!r}: {exc}") from None


def check_pools(pools: list[PoolSpec]) -> list[PoolSpec]:
    names = [p.name for p in pools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"pool name(s) given twice: {', '.join(duplicates)}")
    return pools


@dataclass(slots=True)
class PoolState:
    """Runtime bookkeeping of one pool: which claims occupy its slots."""

    spec: PoolSpec
    model: type[ConcurrencyModel] = field(init=False)  # the class spec.model names
    busy: dict[Claim, ClaimedJob] = field(default_factory=dict)
    maybe_more: bool = True  # a wake-up arrived, or the last claim came back full
    backlog: bool = False  # the last claim was full: claim again without probing first

    def __post_init__(self) -> None:
        self.model = get_model(self.spec.model)

    @property
    def free(self) -> int:
        return self.spec.slots - len(self.busy)
