"""The scheduler: enqueues the app's periodic jobs at their ticks. Every worker runs one.

Which ticks are due is decided on the broker's clock (the one clock every worker shares,
read with the schedules' rows), from each schedule's last tick enqueued. Each tick is
enqueued by ``Broker.enqueue_tick``, a compare-and-set of that last tick in the
transaction that stores the job: however many workers look at once, one enqueues it,
and a late worker never enqueues a tick whose job has finished already.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...brokers import Broker
from ...errors import SluicegateError
from ...job import JobSpec
from ...schedules import Schedule
from .base import Service

if TYPE_CHECKING:
    from ...app import App

log = logging.getLogger("sluicegate.worker")

REFRESH = 30.0  # s: look at least this often (a schedule changed by another process)
SOONEST = 0.01  # s: never spin, even when the broker's clock runs a little behind ours


class Scheduler(Service):
    def __init__(
        self, app: App, broker: Broker, schedules: Sequence[Schedule], refresh: float = REFRESH
    ) -> None:
        self.app = app
        self.broker = broker
        self.schedules = list(schedules)
        self.refresh = refresh
        self.next_run = 0.0  # due at once: ticks missed while no worker ran
        self.enqueued = 0  # ticks this worker enqueued (tests, logs)
        self.registered = False
        self.halted = False
        for schedule in self.schedules:  # a job the task refuses fails the worker's start
            self.spec(schedule, 0.0)

    def start(self) -> None:
        for s in self.schedules:
            policy = f"catch_up = {s.catch_up}" if s.catch_up else "skip"
            log.info("schedule %s: %s at %r (%s), %s", s.name, s.task, s.cron, s.tz, policy)

    def due_in(self, now: float) -> float | None:
        return None if self.halted else self.next_run - now

    def halt(self) -> None:
        self.halted = True  # shutting down: enqueue no more ticks

    def run(self, now: float) -> None:
        self.next_run = now + self.refresh  # after a failure: the backoff, then this
        wait = self.enqueue_due()
        self.next_run = now + max(SOONEST, min(wait, self.refresh))

    def enqueue_due(self) -> float:
        """Enqueue every due tick of every schedule; seconds until the next tick."""
        states = self.broker.schedule_states()
        if not self.registered:
            missing = [s.name for s in self.schedules if s.name not in states.rows]
            if missing:  # first seen now: ticks from here on are due
                self.broker.register_schedules(missing)
                states = self.broker.schedule_states()
            self.registered = True
        wait = self.refresh
        for schedule in self.schedules:
            row = states.rows.get(schedule.name)
            last = states.now if row is None else row.since
            if row is not None and row.last_tick is not None:
                last = row.last_tick
            for tick in schedule.due(last, states.now):
                self.enqueue_tick(schedule, tick)
            following = schedule.next_fire(states.now)
            if following is not None:
                wait = min(wait, following - states.now)
        return wait

    def spec(self, schedule: Schedule, tick: float) -> JobSpec:
        """The tick's job, checked as any enqueue is (a bad one is a ConfigError)."""
        return self.app.build_spec(
            schedule.task,
            schedule.args,
            schedule.kwargs,
            queue=schedule.queue,
            unique_key=schedule.tick_key(tick),
        )

    def enqueue_tick(self, schedule: Schedule, tick: float) -> None:
        try:
            spec = self.spec(schedule, tick)
        except SluicegateError as exc:  # checked at start: only a changed task gets here
            log.error("schedule %s: tick not enqueued: %s", schedule.name, exc)
            return
        job = self.broker.enqueue_tick(schedule.name, tick, spec)
        if job is None:
            return  # another worker enqueued it first
        self.enqueued += 1
        self.app._enqueued([job])  # the on_enqueue hooks, as for any enqueue
        log.info("schedule %s: tick %s enqueued as job %s", schedule.name, spec.unique_key, job.id)
