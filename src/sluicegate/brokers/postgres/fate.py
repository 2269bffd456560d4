"""Writes whose fate this handle cannot see, and how to find them again.

A COMMIT that loses its connection may or may not have landed; an ack made in a caller's
own transaction (``ack_on``) lands when that caller commits. Until then the claim's next
write (a retried record, a start or heartbeat waiting on the row lock) would find the
job no longer held and call the claim lost. For claims remembered here, a write that
matched nothing asks ``own_writes`` whether the row holds the claim's own write.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ...job import Claim
from ..sqlbase import matched
from ..sqlfiles import Query

MAYBE_WRITTEN_MAX = 10_000  # claims remembered; the oldest are forgotten


def ids_tokens(claims: Sequence[Claim]) -> dict[str, list[int]]:
    """The parameters of a batched write: arrays of job ids and their fencing tokens."""
    return {"ids": [c.job_id for c in claims], "tokens": [c.token for c in claims]}


class UnknownFate:
    def __init__(self, own_writes: Query) -> None:
        self._own_writes = own_writes
        self._maybe_written: dict[Claim, None] = {}  # insertion order: the oldest first
        self._lock = threading.Lock()

    def remember(self, claims: Sequence[Claim]) -> None:
        """Note claims whose write may be in the database unseen; the oldest drop out."""
        with self._lock:
            for claim in claims:
                self._maybe_written.pop(claim, None)
                self._maybe_written[claim] = None
            while len(self._maybe_written) > MAYBE_WRITTEN_MAX:
                del self._maybe_written[next(iter(self._maybe_written))]

    def own_writes(self, conn: Any, unmatched: Sequence[Claim]) -> set[Claim]:
        """Of claims a write did not match, those whose own earlier write is in the row.

        Asked only for claims remembered here: for every other claim, one that ended is
        lost (fencing, as on every broker)."""
        with self._lock:
            maybe = [c for c in unmatched if c in self._maybe_written]
        if not maybe:
            return set()
        return matched(self._own_writes, conn.execute(self._own_writes, ids_tokens(maybe)))
