"""The worker loop's services: each has one job, says when it is next due, and runs.

Adding a cross-cutting feature (a registry heartbeat, limits, metrics) means adding
a ``Service`` and one line to ``Worker.services``, not a branch in the loop.
"""

from .backoff import Backoff
from .base import Counters, Service
from .claimer import Claimer
from .deaths import DeathWatch
from .dispatch import Dispatcher
from .leases import LeaseKeeper
from .pruner import Pruner
from .recoverer import Recoverer
from .results import ResultWriter
from .shutdown import Shutdown

__all__ = [
    "Backoff",
    "Claimer",
    "Counters",
    "DeathWatch",
    "Dispatcher",
    "LeaseKeeper",
    "Pruner",
    "Recoverer",
    "ResultWriter",
    "Service",
    "Shutdown",
]
