"""Dependency budgets: named concurrency and rate limits, and the pure rule that admits jobs.

A pool's slots bound what one worker process runs; a limit bounds what a dependency
receives, across pools, processes and machines. This module does no I/O. Brokers hand
``admit`` what their claim transaction read (the limits, the tokens held, the rate
buckets) and write back what it decided, so every broker admits jobs the same way.

- **Concurrency**: at most ``concurrency`` cost units held at once. "Held" is derived from
  job rows: the needs of claimed and running jobs. Nothing is counted up or down, so
  nothing can leak: ack, fail, release, cancel and lease recovery give tokens back by
  moving the job out of a held state.
- **Rate**: a token bucket per limit (and partition, and host for host scope). It holds at
  most ``burst`` tokens and refills continuously at ``rate`` tokens per second; a start
  takes ``cost`` tokens. So in any window of T seconds at most ``burst + rate * T`` jobs
  start, and after an idle spell at most ``burst`` start back to back.
- **Scope**: ``global`` counts every worker on the broker; ``host`` only the workers of
  the claimer's host (``SLUICEGATE_HOST`` or the host name).
- **Partition**: a partitioned limit applies per value of a keyword argument of the job
  (or of ``limit_key=`` given at enqueue): each value has its own budget.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .codec import text_problem
from .errors import ConfigError
from .names import check_name, number_problem

SCOPES = ("global", "host")
DEFAULT_BURST = 1
RECHECK = 0.5  # s: a claimer held back by a concurrency limit looks again this often
# Unix times near 1.7e9 resolve to ~2.4e-7 s: a token due within a microsecond counts
# as here, or a claimer told to come back when it is due could find it a hair short.
CLOCK_SLACK = 1e-6
HOST_ENV = "SLUICEGATE_HOST"

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)?\s*([smhd])\s*$")

Need = tuple[str, str | None, int]  # (limit name, partition value or None, cost)
Key = tuple[str, str, str]  # (limit name, partition value or "", host or "")


def local_host() -> str:
    """This machine's name for host-scoped limits; SLUICEGATE_HOST overrides it."""
    return os.environ.get(HOST_ENV) or socket.gethostname()


def parse_rate(value: object) -> float:
    """Starts per second from ``"10/s"``, ``"600/m"``, ``"5/2s"``, ``"1000/h"`` or ``"2/d"``."""
    if isinstance(value, str):
        match = _RATE.match(value)
        if match is not None:
            count, every, unit = match.groups()
            window = float(every or 1) * _UNITS[unit]
            if float(count) > 0 and window > 0:
                return float(count) / window
    raise ConfigError(
        f"rate must be starts per time like '10/s', '600/m', '5/2s' or '1000/h', not {value!r}"
    )


def format_rate(per_second: float) -> str:
    """The shortest exact-looking form of a rate: 10/s, 30/m, 2/h."""
    for unit, window in (("s", 1.0), ("m", 60.0), ("h", 3600.0), ("d", 86_400.0)):
        count = per_second * window
        if count >= 1 and math.isclose(count, round(count), rel_tol=1e-9):
            return f"{round(count)}/{unit}"
    text = f"{per_second:.6g}"
    if "e" in text:  # no exponents: parse_rate reads this back
        text = f"{per_second:.12f}".rstrip("0").rstrip(".")
    return f"{text}/s"


@dataclass(frozen=True, slots=True)
class Limit:
    """One named budget. ``rate`` is in starts per second (``Limit.of`` parses "10/s");
    ``burst`` applies to the rate and defaults to 1 (starts evenly spaced)."""

    name: str
    concurrency: int | None = None
    rate: float | None = None
    burst: int | None = None
    scope: str = "global"
    partition: str | None = None

    def __post_init__(self) -> None:
        check_name("limit", self.name)
        where = f"limit {self.name!r}"
        if self.concurrency is None and self.rate is None:
            raise ConfigError(f"{where}: give concurrency, rate, or both")
        if self.concurrency is not None:
            problem = number_problem(self.concurrency, 1, integer=True)
            if problem:
                raise ConfigError(f"{where}: concurrency {problem}")
        if self.rate is not None:
            problem = number_problem(self.rate, 0)
            if problem or not self.rate > 0 or not math.isfinite(self.rate):
                raise ConfigError(f"{where}: rate must be > 0 starts per second")
        if self.burst is not None:
            problem = number_problem(self.burst, 1, integer=True)
            if problem:
                raise ConfigError(f"{where}: burst {problem}")
            if self.rate is None:
                raise ConfigError(f"{where}: burst applies to a rate; give rate too")
        if self.scope not in SCOPES:
            raise ConfigError(
                f"{where}: scope must be one of {', '.join(SCOPES)}, not {self.scope!r}"
            )
        if self.partition is not None and (
            not isinstance(self.partition, str) or not self.partition.isidentifier()
        ):
            raise ConfigError(
                f"{where}: partition must name a keyword argument, not {self.partition!r}"
            )

    @classmethod
    def of(cls, name: str, **values: Any) -> Limit:
        """A limit from settings-file or keyword values; ``rate`` may be "10/s" or a number."""
        known = {"concurrency", "rate", "burst", "scope", "partition"}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(
                f"limit {name!r}: unknown key {unknown[0]!r} (keys: {', '.join(sorted(known))})"
            )
        rate = values.get("rate")
        if (rate is not None and not isinstance(rate, int | float)) or isinstance(rate, bool):
            values["rate"] = parse_rate(rate)
        elif rate is not None:
            values["rate"] = float(rate)
        if values.get("scope") is None:
            values.pop("scope", None)
        return cls(name, **values)

    @property
    def capacity(self) -> int:
        """Rate tokens a bucket holds."""
        return self.burst or DEFAULT_BURST

    def bounds(self) -> str:
        """``4 at once``, ``10/s (burst 10)``, or both."""
        parts = []
        if self.concurrency is not None:
            parts.append(f"{self.concurrency} at once")
        if self.rate is not None:
            parts.append(f"{format_rate(self.rate)} (burst {self.capacity})")
        return ", ".join(parts)

    def describe(self) -> str:
        text = self.bounds()
        if self.partition:
            text += f" per {self.partition}"
        return f"{text}, {self.scope}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "concurrency": self.concurrency,
            "rate": format_rate(self.rate) if self.rate is not None else None,
            "rate_per_s": self.rate,
            "burst": self.capacity if self.rate is not None else None,
            "scope": self.scope,
            "partition": self.partition,
        }


# ---- what a job needs ---------------------------------------------------------------


def check_task_limits(value: object) -> tuple[tuple[str, int], ...]:
    """A task's ``limits=`` option: names, or names with a cost; as sorted (name, cost)."""
    if isinstance(value, str):
        raise ConfigError(f"limits must be a list of limit names or a mapping, not {value!r}")
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, list | tuple | set | frozenset):
        # names, or (name, cost) pairs: the form TaskOptions keeps them in
        pairs = [tuple(item) if isinstance(item, tuple) else (item, 1) for item in value]
    else:
        raise ConfigError(f"limits must be a list of limit names or a mapping, not {value!r}")
    out: dict[str, int] = {}
    for name, cost in pairs:
        check_name("limit", name)
        problem = number_problem(cost, 1, integer=True)
        if problem:
            raise ConfigError(f"limits: the cost of {name!r} {problem}")
        out[name] = cost
    return tuple(sorted(out.items()))


def encode_needs(needs: Sequence[Need]) -> str | None:
    """The canonical JSON a job row stores (None: no limits). Equal needs encode equally,
    so the broker groups waiting jobs by this text."""
    if not needs:
        return None
    return json.dumps(sorted(needs, key=lambda n: n[0]), separators=(",", ":"))


def decode_needs(text: str | None) -> tuple[Need, ...]:
    if not text:
        return ()
    return _decoded(text)


@functools.lru_cache(maxsize=4096)
def _decoded(text: str) -> tuple[Need, ...]:
    """Jobs of a claim mostly share a few needs: each text is parsed once (immutable)."""
    return tuple((str(n), None if p is None else str(p), int(c)) for n, p, c in json.loads(text))


def partition_value(value: object) -> str:
    """A partition value as text: strings as they are, other JSON values as JSON."""
    if isinstance(value, str):
        if not value:
            raise ConfigError("a limit's partition value must not be empty")
        if (problem := text_problem(value)) is not None:  # needs are stored and read as JSON
            raise ConfigError(f"a limit's partition value {value!r} {problem}")
        return value
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        raise ConfigError(f"a limit's partition value must be JSON, not {value!r}") from None


def key_of(limit: Limit | None, name: str, partition: str | None, host: str) -> Key:
    scoped = limit is not None and limit.scope == "host"
    return (name, partition or "", host if scoped else "")


# ---- admission -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Candidate:
    """A ready job the claim may take, in claim order; ``needs`` empty: no limits."""

    id: int
    needs: tuple[Need, ...]


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: float
    at: float  # when ``tokens`` was measured, by the broker's clock


@dataclass(slots=True)
class Admission:
    """What ``admit`` decided: the ids to claim (claim order), the buckets to write back,
    and, if a limit held a job back, when to look again (``retry_in`` seconds)."""

    ids: list[int] = field(default_factory=list)
    buckets: dict[Key, Bucket] = field(default_factory=dict)
    retry_in: float | None = None
    reasons: dict[int, str] = field(default_factory=dict)  # held-back job id -> why


def in_use_of(held: Iterable[tuple[str, str | None, str | None, int]], host: str,
              limits: Mapping[str, Limit]) -> dict[Key, int]:  # fmt: skip
    """Tokens held per key, from (name, partition, holder host, cost) of held jobs: a
    global limit counts every host's, a host-scoped one only ``host``'s."""
    out: dict[Key, int] = {}
    for name, partition, holder, cost in held:
        limit = limits.get(name)
        if limit is not None and limit.scope == "host" and holder != host:
            continue
        key = key_of(limit, name, partition, host)
        out[key] = out.get(key, 0) + int(cost)
    return out


def admit(
    candidates: Iterable[Candidate],
    n: int,
    limits: Mapping[str, Limit],
    in_use: Mapping[Key, int],
    buckets: Mapping[Key, Bucket],
    now: float,
    host: str,
) -> Admission:
    """Take up to ``n`` of ``candidates`` (given in claim order) whose every limit has room.

    A job held back blocks no job behind it that needs other limits, but once a job waits
    for a key, no later job of this claim takes that key: jobs start in their usual order.
    """
    out = Admission()
    used = dict(in_use)
    blocked: set[Key] = set()
    for cand in candidates:
        if len(out.ids) >= n:
            break
        if not cand.needs:
            out.ids.append(cand.id)
            continue
        taken: list[tuple[Key, int, Bucket | None]] = []
        reason = None
        for name, partition, cost in cand.needs:
            limit = limits.get(name)
            key = key_of(limit, name, partition, host)
            label = name if partition is None else f"{name}[{partition}]"
            if limit is None:
                reason = f"limit {name} is not registered (no worker declared it)"
                out.retry_in = _sooner(out.retry_in, RECHECK)
                break
            if key in blocked:
                reason = f"limit {label}: an earlier job waits for it"
                break
            if limit.concurrency is not None and used.get(key, 0) + cost > limit.concurrency:
                reason = f"limit {label}: {used.get(key, 0)} of {limit.concurrency} in use"
                out.retry_in = _sooner(out.retry_in, RECHECK)
                blocked.add(key)
                break
            bucket = None
            if limit.rate is not None:
                bucket = refill(out.buckets.get(key) or buckets.get(key), limit, now)
                wait = (cost - bucket.tokens) / limit.rate
                if wait > CLOCK_SLACK:  # a token due within the clock's resolution is here
                    reason = (
                        f"limit {label}: rate {format_rate(limit.rate)}, next start in {wait:.3g} s"
                    )
                    out.retry_in = _sooner(out.retry_in, wait)
                    blocked.add(key)
                    break
            taken.append((key, cost, bucket))
        if reason is not None:
            out.reasons[cand.id] = reason
            continue
        for key, cost, bucket in taken:
            used[key] = used.get(key, 0) + cost
            if bucket is not None:
                out.buckets[key] = Bucket(bucket.tokens - cost, now)
        out.ids.append(cand.id)
    return out


def room(
    needs: Sequence[Need],
    limits: Mapping[str, Limit],
    in_use: Mapping[Key, int],
    buckets: Mapping[Key, Bucket],
    now: float,
    host: str,
    most: int,
) -> int:
    """How many jobs of these needs could start now, at most ``most``: a broker reads no
    more of a group's waiting jobs than that."""
    fits = most
    for name, partition, cost in needs:
        limit = limits.get(name)
        if limit is None:
            return 0
        key = key_of(limit, name, partition, host)
        if limit.concurrency is not None:
            fits = min(fits, (limit.concurrency - in_use.get(key, 0)) // cost)
        if limit.rate is not None:
            tokens = refill(buckets.get(key), limit, now).tokens + limit.rate * CLOCK_SLACK
            fits = min(fits, int(tokens // cost))
    return max(fits, 0)


def refill(bucket: Bucket | None, limit: Limit, now: float) -> Bucket:
    """The bucket at ``now``: a new one starts full; tokens never exceed the burst."""
    capacity = float(limit.capacity)
    if bucket is None:
        return Bucket(capacity, now)
    rate = limit.rate or 0.0
    elapsed = max(0.0, now - bucket.at)
    return Bucket(min(capacity, bucket.tokens + rate * elapsed), now)


def _sooner(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


def changed(
    current: Limit, concurrency: int | None, rate: str | None, burst: int | None
) -> Limit | None:
    """``current`` with the values an operator gave (a rate as text: "10/s"), checked as a
    new Limit is; None when none was given. One rule for the CLI and the dashboard."""
    changes: dict[str, Any] = {}
    if concurrency is not None:
        changes["concurrency"] = concurrency
    if rate is not None:
        changes["rate"] = parse_rate(rate)
    if burst is not None:
        changes["burst"] = burst
    return dataclasses.replace(current, **changes) if changes else None
