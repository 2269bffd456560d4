"""Opening the broker when a worker starts: a write lock held elsewhere is waited out.

Opening a broker may write (it migrates a new or older schema), so several workers
starting in the same instant on one SQLite file queue for its write lock, and one can
wait longer than the URL's ``busy_timeout``. That is contention, not a fault: the
worker waits with the backoff its loop uses for every other broker call (logged once)
instead of exiting. Every other error at opening (a bad URL, unreachable storage, a
failed migration) still ends the start with its message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..brokers import Broker
from ..errors import BrokerBusy
from .services.backoff import Backoff

if TYPE_CHECKING:
    from ..app import App


def open_broker(
    app: App, backoff: Backoff | None = None, sleep: Callable[[float], None] = time.sleep
) -> Broker:
    """``app.broker``, opened once no other connection holds the write lock too long."""
    backoff = backoff or Backoff()
    while True:
        try:
            broker = app.broker
        except BrokerBusy as exc:
            backoff.failed(exc)
            sleep(max(0.0, backoff.until - time.monotonic()))
            continue
        backoff.ok()
        return broker
