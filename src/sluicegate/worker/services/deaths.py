"""The death watch: a worker of this host whose process is gone has its jobs back at once.

Every worker holds a lock file the kernel lets go of when its process ends
(``worker/lockdir.py``). Every 0.2 s this service looks for files whose lock it can take:
their workers died (killed, crashed), so their claimed and running jobs go back to ready,
attempt charged, or to dead with no attempts left (``Broker.recover_worker``), without
waiting for their leases. A stopped process (SIGSTOP) keeps its lock, so its jobs wait for
its lease as before. Across hosts the lease stays the bound; so it does where the lock
folder cannot be used (logged once).
"""

from __future__ import annotations

import logging
import random
import time

from ...brokers import Broker
from ..lockdir import Gone, LockDir
from .backoff import Backoff
from .base import Counters, Service

log = logging.getLogger("sluicegate.worker")
LOOK_EVERY = 0.2  # s, jittered: how soon a death on this host is seen


class DeathWatch(Service):
    """Holds this worker's lock file, and recovers the jobs of the workers whose lock
    files it can lock: first at start (a restarted worker's predecessor), then every
    LOOK_EVERY s."""

    def __init__(
        self,
        broker: Broker,
        worker_id: str,
        counters: Counters | None = None,
        backoff: Backoff | None = None,
        interval: float = LOOK_EVERY,
    ) -> None:
        self.broker = broker
        self.worker_id = worker_id
        self.counters = counters or Counters()
        self.backoff = backoff or Backoff()
        self.interval = interval
        self.dir: LockDir | None = None
        self.next_at = 0.0
        self.troubled = False  # the last look failed (logged once)

    @property
    def watching(self) -> bool:
        return self.dir is not None

    def start(self) -> None:
        """Register before the first claim: a claim under this worker id must never be
        taken for a dead predecessor's (a worker id used again)."""
        try:
            folder = self.broker.local_folder()
            if folder is None:
                return  # no other process reaches the storage: nobody to watch
            self.dir = LockDir(folder, self.worker_id)
            self._register()
        except Exception as exc:
            if self.dir is not None:
                self.dir.close()
                self.dir = None
            log.warning(
                "no lock file for worker %s (%s): on this host, as across hosts, the jobs "
                "of a worker that dies come back when its lease expires",
                self.worker_id,
                exc,
            )
        self.next_at = time.monotonic()  # the first turn, before any claim, looks

    def _register(self) -> None:
        assert self.dir is not None
        while (predecessor := self.dir.register()) is not None:
            try:
                self._recover(predecessor)
            except Exception as exc:  # its jobs come back by lease expiry instead
                log.warning(
                    "recovering the jobs of a dead worker %s failed: %s", self.worker_id, exc
                )
                predecessor.bury()

    def due_in(self, now: float) -> float | None:
        return None if self.dir is None else self.next_at - now

    def run(self, now: float) -> None:
        assert self.dir is not None
        self.next_at = now + self.interval * random.uniform(0.9, 1.1)
        try:
            found = self._look()
        except OSError as exc:  # the folder's trouble, not the broker's: no backoff
            if not self.troubled:
                log.warning(
                    "cannot look in the lock folder %s (will retry): %s", self.dir.folder, exc
                )
                self.troubled = True
            return
        if self.troubled:
            log.info("the lock folder %s is usable again", self.dir.folder)
            self.troubled = False
        for i, gone in enumerate(found):
            try:
                self._recover(gone)
            except Exception:
                for rest in found[i:]:
                    rest.let_go()  # looked at again next time, here or by another worker
                raise

    def _look(self) -> list[Gone]:
        assert self.dir is not None
        if not self.dir.registered():
            log.warning("the lock file of worker %s was removed: made again", self.worker_id)
            self.dir.unregister()
            self._register()
        return self.dir.look()

    def _recover(self, gone: Gone) -> None:
        recovery = self.broker.recover_worker(gone.worker_id)
        self.backoff.ok()
        gone.bury()
        found = len(recovery.requeued) + len(recovery.dead)
        if not found:
            log.info("worker %s (pid %s) is gone; it held no jobs", gone.worker_id, gone.pid)
            return
        self.counters.recovered += found
        log.warning(
            "recovered the jobs of worker %s (pid %s), whose process is gone: "
            "%d back to ready, %d dead (attempts exhausted)",
            gone.worker_id,
            gone.pid,
            len(recovery.requeued),
            len(recovery.dead),
        )

    def stop(self) -> None:
        if self.dir is not None:
            self.dir.close()
            self.dir = None
