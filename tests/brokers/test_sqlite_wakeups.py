"""SQLite wake-ups across processes: the doorbell, its clean-up, and the polling fallback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from sluicegate.brokers.doorbell import Doorbell, open_doorbell
from sluicegate.brokers.sqlite import SQLiteBroker
from support.specs import spec
from support.waiting import wait_for


def open_broker(path: Path) -> SQLiteBroker:
    return SQLiteBroker(f"sqlite:///{path}")


def counted_checks(broker: SQLiteBroker) -> list[int | None]:
    """The data_version values the broker's watch loop reads from now on, in order (None:
    a check skipped, the writer busy), through the read it was given."""
    checks: list[int | None] = []
    read = broker._watcher._data_version

    def counted(blocking: bool) -> int | None:
        version = read(blocking)
        checks.append(version)
        return version

    broker._watcher._data_version = counted
    return checks


def bells(doorbell: Doorbell) -> list[str]:
    folder = doorbell.folder
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def test_an_enqueue_in_another_process_rings_a_waiting_subscriber(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    watcher = open_broker(db)
    fired = threading.Event()
    unsubscribe = watcher.subscribe(fired.set)
    try:
        assert wait_for(lambda: watcher._watcher.bell is not None)
        fired.clear()
        code = (
            "from sluicegate.brokers.sqlite import SQLiteBroker\n"
            "from sluicegate.job import JobSpec\n"
            f"b = SQLiteBroker('sqlite:///{db}')\n"
            "b.enqueue([JobSpec(task='t', queue='q', args_json='[]', kwargs_json='{}')])\n"
            "b.close()\n"
        )
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
        assert fired.wait(5)
    finally:
        unsubscribe()
        watcher.close()


def test_a_waiting_process_has_one_bell_until_it_unsubscribes(tmp_path: Path) -> None:
    broker = open_broker(tmp_path / "q.db")
    doorbell = open_doorbell(str(tmp_path / "q.db"))
    assert doorbell is not None  # Linux: Unix datagram sockets exist
    try:
        assert bells(doorbell) == []
        unsubscribe = broker.subscribe(lambda: None)
        assert wait_for(lambda: len(bells(doorbell)) == 1)
        started = time.monotonic()
        unsubscribe()  # the waiting thread is interrupted, not left to time out
        assert bells(doorbell) == []
        assert time.monotonic() - started < 2
    finally:
        doorbell.close()
        broker.close()


def test_a_bell_left_by_a_dead_process_is_removed_by_the_next_ring(tmp_path: Path) -> None:
    doorbell = open_doorbell(str(tmp_path / "q.db"))
    assert doorbell is not None
    os.makedirs(doorbell.folder, exist_ok=True)
    stale = os.path.join(doorbell.folder, "999999-dead")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(stale)
    sock.close()  # bound, never unlinked: what a killed process leaves behind
    try:
        doorbell.ring()
        assert not os.path.exists(stale)
    finally:
        doorbell.close()
        os.rmdir(doorbell.folder)


def test_without_a_doorbell_the_watcher_polls_data_version(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    watcher, producer = open_broker(db), open_broker(db)
    for broker in (watcher, producer):  # as where Unix sockets are missing
        assert broker._watcher.doorbell is not None
        broker._watcher.doorbell.close()
        broker._watcher.doorbell = None
    checks = counted_checks(watcher)
    fired = threading.Event()
    unsubscribe = watcher.subscribe(fired.set)
    try:
        assert wait_for(lambda: checks)  # its baseline read: a commit from now on is seen
        fired.clear()
        producer.enqueue([spec()])
        assert fired.wait(5)
        # its own writes do not wake it: data_version only counts other connections
        fired.clear()
        watcher.enqueue([spec()])  # notifies locally, once
        assert fired.wait(1)
        fired.clear()
        # Three checks after it: the second began after the write, and any wake-up of
        # its own came before the third.
        after = len(checks)
        assert wait_for(lambda: sum(v is not None for v in checks[after:]) >= 3)
        assert not fired.is_set()
    finally:
        unsubscribe()
        watcher.close()
        producer.close()


def test_a_writer_that_cannot_ring_is_still_seen_by_a_waiting_process(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    watcher, silent = open_broker(db), open_broker(db)
    assert silent._watcher.doorbell is not None
    silent._watcher.doorbell.close()
    silent._watcher.doorbell = None  # e.g. an older version, or a path it cannot reach the bells by
    fired = threading.Event()
    unsubscribe = watcher.subscribe(fired.set)
    try:
        assert wait_for(lambda: watcher._watcher.bell is not None)
        fired.clear()
        silent.enqueue([spec()])
        assert fired.wait(5)  # the data_version check beside the doorbell, within ~0.5 s
    finally:
        unsubscribe()
        watcher.close()
        silent.close()
