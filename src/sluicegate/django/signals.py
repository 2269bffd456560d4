"""Django's task signals (``task_enqueued``, ``task_started``, ``task_finished``), sent
as Django's own backends send them. A receiver that raises is logged and changes
nothing: not an enqueue that has stored its job, nor a job's outcome."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("sluicegate.django")


def send(signal: Any, sender: type[Any], task_result: Any) -> None:
    for receiver, outcome in signal.send_robust(sender=sender, task_result=task_result):
        if isinstance(outcome, BaseException):
            logger.error(
                "a receiver of Django's task signal (%r) raised for task result %s: %r",
                receiver,
                task_result.id,
                outcome,
                exc_info=outcome,
            )
