"""What a transactional task needs from storage, as an interface the runner is typed against.

A transactional task's own writes and its ack commit in one transaction. The runner
reaches storage only through this Protocol; brokers that support transactions provide
it without importing the worker (it is structural), so nothing that runs tasks imports a
broker module.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from ..job import Claim


class TransactionalStore(Protocol):
    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        """A storage connection in an open transaction: committed on success, else rolled
        back."""
        ...

    def ack_on(self, connection: Any, claim: Claim, result_json: str) -> None:
        """Ack ``claim`` inside ``connection``'s transaction; LeaseLost if it is stale."""
        ...
