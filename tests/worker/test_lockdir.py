"""Lock files (worker/lockdir.py) and the death watch (services/deaths.py): a file is taken
for a dead worker's only when no live process holds its lock -- whatever pid it names, a
stopped holder included -- and each death is recovered once, however many look.

Holders are real processes (a lock is the kernel's to drop); the brokers are real too."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluicegate.brokers.base import Recovery, private_folder
from sluicegate.brokers.memory import MemoryBroker
from sluicegate.brokers.sqlite import SQLiteBroker
from sluicegate.errors import BrokerUnavailable
from sluicegate.job import JobState
from sluicegate.worker import lockdir
from sluicegate.worker.lockdir import LockDir, WorkerIdInUse, file_name
from sluicegate.worker.services import Counters, DeathWatch
from support.specs import spec

HOLDER = """
import sys, time
from sluicegate.worker.lockdir import LockDir
LockDir(sys.argv[1], sys.argv[2]).register()
print("registered", flush=True)
time.sleep(600)
"""


class Holder:
    """A process that registers ``worker_id`` in ``folder`` and lives until killed."""

    def __init__(self, folder: Path, worker_id: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(folder), worker_id],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "registered"
        self.pid = self.proc.pid

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    started: list[Holder] = []
    yield started
    for holder in started:
        holder.kill()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db.workers"


def hold(holders: list[Holder], folder: Path, worker_id: str) -> Holder:
    holder = Holder(folder, worker_id)
    holders.append(holder)
    return holder


def names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


# ---- lock files --------------------------------------------------------------------------
def test_a_live_workers_file_is_never_taken_a_dead_ones_is(
    folder: Path, holders: list[Holder]
) -> None:
    live = hold(holders, folder, "w-live")
    dead = hold(holders, folder, "w-dead")
    me = LockDir(str(folder), "w-me")
    assert me.register() is None
    assert names(folder) == sorted(file_name(w) for w in ("w-live", "w-dead", "w-me"))
    assert me.look() == []

    dead.kill()
    [gone] = me.look()
    assert (gone.worker_id, gone.pid) == ("w-dead", dead.pid)
    gone.bury()
    assert file_name("w-dead") not in names(folder)
    assert me.look() == []
    assert live.proc.poll() is None
    me.close()
    assert names(folder) == [file_name("w-live")]


def test_a_stopped_process_keeps_its_lock(folder: Path, holders: list[Holder]) -> None:
    stopped = hold(holders, folder, "w-stopped")
    me = LockDir(str(folder), "w-me")
    me.register()
    stopped.proc.send_signal(signal.SIGSTOP)
    try:
        for _ in range(10):
            assert me.look() == []
            time.sleep(0.02)
    finally:
        stopped.proc.send_signal(signal.SIGCONT)
    me.close()


def test_pids_mean_nothing_only_the_lock_does(folder: Path, holders: list[Holder]) -> None:
    """A reused pid cannot fool the watch: a file whose lock is free is a dead worker's even
    if the pid it names runs (another program now); a file whose lock is held is a live
    worker's whatever pid it names."""
    me = LockDir(str(folder), "w-me")
    me.register()
    folder.joinpath(file_name("w-reused")).write_text(
        json.dumps({"worker_id": "w-reused", "pid": os.getpid()})  # a running pid, no lock
    )
    live = hold(holders, folder, "w-live")
    path = folder / file_name("w-live")
    path.write_text(json.dumps({"worker_id": "w-live", "pid": 999_999_999}))  # no such pid
    [gone] = me.look()
    assert (gone.worker_id, gone.pid) == ("w-reused", os.getpid())
    gone.bury()
    for _ in range(5):
        assert me.look() == []
    assert live.proc.poll() is None and path.exists()
    me.close()


def test_two_lookers_take_each_dead_file_once(folder: Path, holders: list[Holder]) -> None:
    dead = [hold(holders, folder, f"w-dead-{i}") for i in range(3)]
    one, two = LockDir(str(folder), "w-one"), LockDir(str(folder), "w-two")
    one.register()
    two.register()
    assert one.look() == two.look() == []  # both keep the files open between looks
    for holder in dead:
        holder.kill()
    first = one.look()
    assert two.look() == []  # locked by `one` meanwhile
    for gone in first:
        gone.bury()
    assert two.look() == []
    assert sorted(g.worker_id for g in first) == [f"w-dead-{i}" for i in range(3)]
    one.close()
    two.close()
    assert not folder.exists()  # the last to leave removes the folder


def test_a_file_buried_and_made_again_under_the_same_name_is_left_alone(
    folder: Path, holders: list[Holder]
) -> None:
    """A looker that opened a dead worker's file before another buried it, and a new
    process registered the same worker id, must not take the new, live file for it."""
    first = hold(holders, folder, "w-same")
    looker, burier = LockDir(str(folder), "w-looker"), LockDir(str(folder), "w-burier")
    looker.register()
    burier.register()
    assert looker.look() == [] and burier.look() == []
    first.kill()
    [gone] = burier.look()
    gone.bury()
    hold(holders, folder, "w-same")
    assert looker.look() == []  # its open file is the buried one: it lets go
    assert looker.look() == []  # the new one, opened afresh, is locked
    looker.close()
    burier.close()


def test_a_worker_id_used_again_takes_over_its_dead_predecessors_file(
    folder: Path, holders: list[Holder], monkeypatch: pytest.MonkeyPatch
) -> None:
    predecessor = hold(holders, folder, "w-fixed")
    again = LockDir(str(folder), "w-fixed")
    monkeypatch.setattr(lockdir, "TAKE_OVER_WAIT", 0.2)
    with pytest.raises(WorkerIdInUse):
        again.register()  # its holder lives: two live workers with one id
    predecessor.kill()
    gone = again.register()
    assert gone is not None and (gone.worker_id, gone.pid) == ("w-fixed", predecessor.pid)
    gone.bury()
    assert again.register() is None and again.registered()
    assert names(folder) == [file_name("w-fixed")]
    again.close()


def test_junk_and_stale_temporary_files_are_cleaned(folder: Path) -> None:
    me = LockDir(str(folder), "w-me")
    me.register()
    folder.joinpath(file_name("w-junk")).write_text("not json")
    folder.joinpath("other.lock").write_text(json.dumps({"worker_id": "w-named-otherwise"}))
    fresh = folder / f".{file_name('w-new')}.abc.tmp"
    stale = folder / f".{file_name('w-old')}.def.tmp"
    fresh.write_text("")
    stale.write_text("")
    old = time.time() - 2 * lockdir.STALE_TEMP_AFTER
    os.utime(stale, (old, old))
    assert me.look() == []
    assert names(folder) == sorted([file_name("w-me"), fresh.name])
    me.close()


def test_a_removed_file_is_noticed(folder: Path) -> None:
    me = LockDir(str(folder), "w-me")
    me.register()
    assert me.registered()
    os.unlink(me.path)
    assert not me.registered()
    me.unregister()
    assert me.register() is None and me.registered()
    me.close()


def test_the_per_user_folder_is_refused_if_others_may_write_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLUICEGATE_RUNTIME_DIR", str(tmp_path))
    path = private_folder("postgresql:h:5432/db#s")
    mine = tmp_path / f"sluicegate-{os.getuid()}"
    assert Path(path).parent == mine and (mine.stat().st_mode & 0o777) == 0o700
    assert private_folder("postgresql:h:5432/db#s") == path
    assert private_folder("postgresql:h:5432/db#t") != path
    mine.chmod(0o777)
    with pytest.raises(PermissionError):
        private_folder("postgresql:h:5432/db#s")


# ---- the death watch -------------------------------------------------------------------------


class FlakyRecovery(SQLiteBroker):
    down = False

    def recover_worker(self, worker_id: str) -> Recovery:
        if self.down:
            raise BrokerUnavailable("database is unreachable")
        return super().recover_worker(worker_id)


def test_the_watch_recovers_a_dead_neighbours_jobs_once_the_recovery_gets_through(
    tmp_path: Path, holders: list[Holder], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.worker")
    broker = FlakyRecovery(f"sqlite:///{tmp_path / 'jobs.db'}")
    folder = Path(broker.local_folder())
    assert folder == (tmp_path / "jobs.db.workers").resolve()
    jobs = broker.enqueue([spec() for _ in range(3)])
    broker.claim(["q"], 3, 30.0, "w-dead")
    dead = hold(holders, folder, "w-dead")
    counters = Counters()
    watch = DeathWatch(broker, "w-me", counters)
    watch.start()
    assert watch.watching and watch.due_in(time.monotonic()) <= 0
    watch.run(time.monotonic())
    assert counters.recovered == 0

    dead.kill()
    broker.down = True
    with pytest.raises(BrokerUnavailable):
        watch.run(time.monotonic())
    assert file_name("w-dead") in names(folder)  # kept for the next look
    broker.down = False
    watch.run(time.monotonic())
    assert counters.recovered == 3
    back = [broker.get_job(j.id) for j in jobs]
    assert all(j is not None and j.state is JobState.READY and j.attempts == 1 for j in back)
    assert file_name("w-dead") not in names(folder)
    assert 0.15 < watch.due_in(time.monotonic()) <= 0.25
    message = "whose process is gone: 3 back to ready, 0 dead (attempts exhausted)"
    assert any(message in r.getMessage() for r in caplog.records)
    watch.stop()
    assert not folder.exists()
    broker.close()


def test_no_watch_without_a_folder_or_other_processes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    memory = DeathWatch(MemoryBroker(), "w")
    memory.start()
    assert not memory.watching and memory.due_in(0.0) is None
    assert not caplog.records

    broker = SQLiteBroker(f"sqlite:///{tmp_path / 'jobs.db'}")
    (tmp_path / "jobs.db.workers").write_text("a file where the folder should be")
    watch = DeathWatch(broker, "w")
    watch.start()
    assert not watch.watching and watch.due_in(0.0) is None
    [record] = [r for r in caplog.records if "no lock file" in r.getMessage()]
    assert "come back when its lease expires" in record.getMessage()
    watch.stop()
    broker.close()


def test_a_dead_file_this_process_may_not_remove_is_recovered_once(
    folder: Path, holders: list[Holder], monkeypatch: pytest.MonkeyPatch
) -> None:
    me = LockDir(str(folder), "w-me")
    me.register()
    hold(holders, folder, "w-dead").kill()
    dead_path = str(folder / file_name("w-dead"))
    unlink = os.unlink

    def refuse(path: str) -> None:  # another user's folder, say, that lets others read it
        if path == dead_path:
            raise PermissionError(13, "Permission denied", path)
        unlink(path)

    monkeypatch.setattr(lockdir.os, "unlink", refuse)
    [gone] = me.look()
    gone.bury()
    assert file_name("w-dead") in names(folder)
    assert me.look() == []  # recovered already: not taken for a new death
    me.close()


def test_registering_while_the_last_worker_removes_the_folder(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last worker to leave removes the empty folder, perhaps just after a starting
    worker made it: the starting one makes it again."""
    real_open = os.open
    removed: list[str] = []

    def open_after_rmdir(path: str, flags: int, mode: int = 0o777) -> int:
        if path.endswith(lockdir.TEMP_SUFFIX) and not removed:
            os.rmdir(folder)
            removed.append(path)
        return real_open(path, flags, mode)

    monkeypatch.setattr(lockdir.os, "open", open_after_rmdir)
    me = LockDir(str(folder), "w-me")
    assert me.register() is None and me.registered() and removed
    me.close()


FORKING_HOLDER = """
import os, sys, time
from sluicegate.worker.lockdir import LockDir
LockDir(sys.argv[1], sys.argv[2]).register()
child = os.fork()
if child == 0:
    # os.fork() returns here only after the at-fork hooks ran: the lock is let go.
    os.write(1, f"child {os.getpid()}\\n".encode())  # one write: never mixed with the parent's
    time.sleep(600)
    os._exit(0)
os.write(1, f"parent {child}\\n".encode())
time.sleep(600)
"""


def test_a_forked_child_does_not_keep_its_parents_lock(folder: Path) -> None:
    """A task that forks without exec (multiprocessing's "fork" start method) leaves a
    child sharing the worker's open files: the child lets go of the lock before its own
    code runs. (Between the fork and the child's first instructions the child still
    shares it; a worker dying in that instant is seen at the watch's next look.) So the
    test waits for the child's word, printed after ``os.fork()`` returned in it, not only
    the parent's: on a busy machine the child may not have run at all yet."""
    proc = subprocess.Popen(
        [sys.executable, "-c", FORKING_HOLDER, str(folder), "w-forking"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    said = dict(proc.stdout.readline().split() for _ in range(2))
    assert said.keys() == {"parent", "child"} and said["parent"] == said["child"]
    child = int(said["child"])
    me = LockDir(str(folder), "w-me")
    me.register()
    try:
        assert me.look() == []
        proc.kill()
        proc.wait(10)
        assert os.path.exists(f"/proc/{child}")  # the child lives on
        [gone] = me.look()
        assert gone.worker_id == "w-forking"
        gone.bury()
    finally:
        os.kill(child, signal.SIGKILL)
        proc.stdout.close()
        me.close()


def test_folder_trouble_is_logged_once_and_a_removed_file_made_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.worker")
    broker = SQLiteBroker(f"sqlite:///{tmp_path / 'jobs.db'}")
    watch = DeathWatch(broker, "w-me")
    watch.start()
    assert watch.dir is not None
    look = watch.dir.look

    def too_many_files() -> list[lockdir.Gone]:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(watch.dir, "look", too_many_files)
    for _ in range(3):
        watch.run(time.monotonic())  # not a broker error: nothing raised, no backoff
    monkeypatch.setattr(watch.dir, "look", look)
    os.unlink(watch.dir.path)  # as a cleaner of temporary folders might
    watch.run(time.monotonic())
    assert watch.dir.registered()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("cannot look in the lock folder" in m for m in messages) == 1
    assert sum("usable again" in m for m in messages) == 1
    assert sum("was removed: made again" in m for m in messages) == 1
    watch.stop()
    broker.close()
