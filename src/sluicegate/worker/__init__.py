"""The worker: pools (concurrency budgets) over queues, leases, recovery and shutdown."""

from .pool import PoolSpec, parse_pool_spec
from .worker import Worker

__all__ = ["PoolSpec", "Worker", "parse_pool_spec"]
