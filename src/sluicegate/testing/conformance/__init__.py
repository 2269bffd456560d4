"""The conformance suite: what every broker must do, run against each broker kind.

Every test runs on a fake clock (leases expire by ``clock.advance``, never by sleeping)
and compares durable brokers with the in-memory reference broker on random operations.

To run it against a broker of your own (written outside this repository), register its
URL scheme with an entry point in your package's metadata, which every process sees
(the process races open the broker through ``broker_from_url`` in fresh interpreters)::

    [project.entry-points."sluicegate.brokers"]
    mine = "mypackage.broker:MyBroker"

then, in a test module::

    import pytest
    from sluicegate.testing import BrokerKind
    from sluicegate.testing.conformance import *  # the tests and their fixtures

    @pytest.fixture
    def broker_kind() -> BrokerKind:
        return BrokerKind(
            "mine", url=lambda tmp_path: f"mine:///{tmp_path}/jobs",
            open=lambda url, clock: MyBroker(url, clock=clock),
            shared=True, multiprocess=True,
        )

The suite's fixtures are all built from ``broker_kind``: ``clock`` (a FakeClock),
``broker_url``, ``open_broker`` (more handles on the same storage, closed at the end) and
``broker``; override any of them if your broker needs it. Needs pytest and hypothesis.

The suite in parts, each exporting its tests: ``helpers`` (the fixtures, and helpers such
as ``spec``, ``put``, ``take`` and ``make_state`` for cases of your own), ``enqueue_claim``,
``record_lease`` (record, fencing, heartbeat and release), ``recovery_actions`` (recovery,
cancel, retry), ``recover_worker`` (a dead worker's jobs, at once), ``read_wakeups`` (read side, subscribe, reopening), ``limits`` (dependency
limits: concurrency, rate, scope, partitions, overrides), ``registry`` (the worker
registry, queue depths and arrivals), ``edge_values`` (values at the edges of what is
accepted, stored and read back alike), ``races`` (threads and processes claiming and
recovering), ``lifecycle_races`` (an outcome against lease expiry, cancel against claim and
backoff, retry against retry: thousands of jobs each), ``stats_counts`` (stats and
listings against a count of every job, whenever finished counts settle),
``reference_model`` (random operations against the reference broker), ``listings``
(filtered listings and keyset pages), ``bulk_actions`` (retry and cancel by filter),
``history`` (a job's entries off the happy path), ``paused_queues`` (pause, resume
and the paused set), ``async_producers`` (``enqueue_async`` and ``get_job_async``
against their sync twins), ``progress`` (a running job's progress, carried by
heartbeats), ``headers`` (string pairs stored with a job at enqueue), ``cancel_notices`` (a cancel of a held job tells the workers), ``schedules``
(periodic ticks: each enqueued once, finished or not) and
``wait_results`` (waiting for a job's result: every outcome, sync and
async, and what 1,000 waiters cost), ``expiry`` (a job not claimed by its expiry ends
cancelled, reason expired, on every claim path).
"""

from __future__ import annotations

from . import (
    async_producers,
    bulk_actions,
    cancel_notices,
    edge_values,
    enqueue_claim,
    expiry,
    headers,
    helpers,
    history,
    lifecycle_races,
    limits,
    listings,
    paused_queues,
    progress,
    races,
    read_wakeups,
    record_lease,
    recover_worker,
    recovery_actions,
    reference_model,
    registry,
    schedules,
    stats_counts,
    wait_results,
)
from .async_producers import *  # noqa: F403
from .bulk_actions import *  # noqa: F403
from .cancel_notices import *  # noqa: F403
from .edge_values import *  # noqa: F403
from .enqueue_claim import *  # noqa: F403
from .expiry import *  # noqa: F403
from .headers import *  # noqa: F403
from .helpers import *  # noqa: F403
from .helpers import BOOM as BOOM
from .helpers import LEASE as LEASE
from .helpers import S as S
from .helpers import get as get
from .helpers import make_state as make_state
from .helpers import put as put
from .helpers import spec as spec
from .helpers import state as state
from .helpers import take as take
from .history import *  # noqa: F403
from .lifecycle_races import *  # noqa: F403
from .limits import *  # noqa: F403
from .listings import *  # noqa: F403
from .paused_queues import *  # noqa: F403
from .progress import *  # noqa: F403
from .races import *  # noqa: F403
from .read_wakeups import *  # noqa: F403
from .record_lease import *  # noqa: F403
from .recover_worker import *  # noqa: F403
from .recovery_actions import *  # noqa: F403
from .reference_model import *  # noqa: F403
from .registry import *  # noqa: F403
from .schedules import *  # noqa: F403
from .stats_counts import *  # noqa: F403
from .wait_results import *  # noqa: F403

# What ``import *`` hands a test module: the fixtures, then every test, in suite order.
__all__ = [
    *helpers.__all__,
    *enqueue_claim.__all__,
    *async_producers.__all__,
    *headers.__all__,
    *record_lease.__all__,
    *recovery_actions.__all__,
    *recover_worker.__all__,
    *read_wakeups.__all__,
    *limits.__all__,
    *registry.__all__,
    *edge_values.__all__,
    *races.__all__,
    *lifecycle_races.__all__,
    *reference_model.__all__,
    *stats_counts.__all__,
    *listings.__all__,
    *bulk_actions.__all__,
    *history.__all__,
    *paused_queues.__all__,
    *progress.__all__,
    *cancel_notices.__all__,
    *wait_results.__all__,
    *schedules.__all__,
    *expiry.__all__,
]
