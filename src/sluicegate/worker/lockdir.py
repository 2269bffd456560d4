"""Which workers of this host are gone, known from the kernel rather than from a lease.

Every worker process holds an exclusive ``flock`` on a file of its own, named after its
worker id, in a folder its storage names (``Broker.local_folder``: beside a SQLite
database, or a per-user folder per PostgreSQL schema). The kernel drops the lock when the
process ends, however it ends (SIGKILL, a crash, the OOM killer), and never while it
lives, stopped (SIGSTOP) or not. The lock belongs to the open file, not to a pid, so a
reused pid cannot pass for the dead worker. A file whose lock another process can take
is therefore a dead worker's.

The protocol, safe with any number of workers looking at once:

- A file appears under its name only already locked: it is written and locked under a
  temporary name, then hard-linked to its name (which fails if the name exists).
- Only the holder of a file's lock removes it. Whoever takes the lock of a file checks
  that the name still leads to the same file (it may have been removed and made again
  meanwhile); if not, it lets go and looks again later.
- A dead worker's file is removed only after its jobs were recovered: if recovery
  fails, the lock is let go and the next look (here or in another worker) tries again.

A lock would outlive its worker in a child made with a bare ``fork`` (no exec, as
multiprocessing's "fork" start method does): the child shares the open file. Forked
children close it at once (``os.register_at_fork``), so the lock stays the worker's alone.
Only a fork that bypasses Python's hooks (C code calling fork() without exec) could still
keep it: then the worker's death goes unseen here, and its jobs come back by lease expiry,
as they do across hosts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass, field

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: workers rely on their leases
    fcntl = None  # type: ignore[assignment]

SUFFIX = ".lock"
TEMP_SUFFIX = ".tmp"
STALE_TEMP_AFTER = 60.0  # s: a temporary file this old whose lock is free was left behind
TAKE_OVER_WAIT = 2.0  # s: how long register() waits for a file of its own name to free


_HELD: set[int] = set()  # the lock files' descriptors of this process's workers


def _forget_in_child() -> None:
    """In a forked child: close the workers' lock files, which must die with the worker."""
    for fd in _HELD:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_in_child)


class WorkerIdInUse(OSError):
    """A live process holds the lock file of this worker id."""


def file_name(worker_id: str) -> str:
    """A worker's file name: a hash of its id (any characters, any length)."""
    return hashlib.sha256(worker_id.encode()).hexdigest()[:32] + SUFFIX


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@dataclass(eq=False)
class Gone:
    """A dead worker's file, locked by this process until ``bury`` or ``let_go``."""

    worker_id: str
    path: str
    fd: int
    pid: int | None = None  # the dead worker's process id, as it wrote it
    unremovable: set[tuple[int, int]] = field(default_factory=set, repr=False)
    _done: bool = field(default=False, repr=False)

    def bury(self) -> None:
        """Its jobs are recovered: remove the file (it is ours to remove: we hold its lock).
        One this process may not remove (the folder's permissions) is not looked at again."""
        if not self._done:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            except OSError:
                found = os.fstat(self.fd)
                self.unremovable.add((found.st_dev, found.st_ino))
            self.let_go()

    def let_go(self) -> None:
        """Keep the file (recovery failed): release its lock for the next look."""
        if not self._done:
            self._done = True
            os.close(self.fd)


class LockDir:
    """This worker's lock file in ``folder``, and a look at everyone else's."""

    def __init__(self, folder: str, worker_id: str) -> None:
        if fcntl is None:  # pragma: no cover
            raise OSError("file locks (fcntl.flock) are not available on this system")
        self.folder = folder
        self.worker_id = worker_id
        self.name = file_name(worker_id)
        self.path = os.path.join(folder, self.name)
        self.fd: int | None = None
        self._file: tuple[int, int] | None = None  # (device, inode) of the file it holds
        self._open: dict[str, int] = {}  # other workers' files, kept open between looks
        self._unremovable: set[tuple[int, int]] = set()  # (device, inode) of dead ones' files

    # ---- this worker's own file ------------------------------------------------------
    def register(self) -> Gone | None:
        """Create and lock this worker's file. Returns None once done, or the file a dead
        process left under this worker's own name (a worker id used again): recover its
        jobs before claiming any, ``bury`` it, and call again. Raises WorkerIdInUse when a
        live process keeps it locked, OSError when the folder cannot be used."""
        deadline = time.monotonic() + TAKE_OVER_WAIT
        while True:
            temp = os.path.join(self.folder, f".{self.name}.{secrets.token_hex(6)}{TEMP_SUFFIX}")
            fd = self._create(temp)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                content = {"worker_id": self.worker_id, "pid": os.getpid()}
                os.write(fd, json.dumps(content).encode())
                try:
                    os.link(temp, self.path)
                except FileExistsError:
                    pass
                else:
                    self.fd, fd = fd, -1
                    _HELD.add(self.fd)
                    found = os.fstat(self.fd)
                    self._file = (found.st_dev, found.st_ino)
                    if (stale := self._open.pop(self.name, None)) is not None:
                        os.close(stale)
                    return None
            finally:
                os.unlink(temp)
                if fd != -1:
                    os.close(fd)
            gone = self._take(self.name)
            if gone is not None:
                return gone
            if time.monotonic() > deadline:
                raise WorkerIdInUse(
                    f"a live process holds the lock file of worker {self.worker_id}"
                )
            time.sleep(0.05)  # another worker is burying it, or its owner lives: look again

    def _create(self, temp: str) -> int:
        """Create ``temp`` in the folder, making the folder first. The last worker of the
        folder to leave removes it when empty, perhaps between the two: then again."""
        for _ in range(10):
            os.makedirs(self.folder, exist_ok=True)
            try:
                return os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                continue
        raise FileNotFoundError(f"{self.folder} keeps disappearing")

    def registered(self) -> bool:
        """Does this worker's name still lead to the file it holds locked? (A cleaner of
        temporary folders may have removed it.)"""
        return self._holds() and self._named()

    def _holds(self) -> bool:
        """Is ``fd`` still the file it locked (not closed by stray code, its number reused)?"""
        try:
            held = os.fstat(self.fd) if self.fd is not None else None
        except OSError:
            return False
        return held is not None and (held.st_dev, held.st_ino) == self._file

    def _named(self) -> bool:
        try:
            named = os.stat(self.path)
        except OSError:
            return False
        return (named.st_dev, named.st_ino) == self._file

    def unregister(self) -> None:
        """Let go of this worker's file: removed if its name still leads to it."""
        if self.fd is not None and self._holds():
            if self._named():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
            os.close(self.fd)
        if self.fd is not None:
            _HELD.discard(self.fd)
        self.fd = self._file = None

    def close(self) -> None:
        """Remove this worker's file (it ends with nothing held) and let go of the others'."""
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()
        self.unregister()
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)  # only if empty: the last worker of this storage to leave

    # ---- everyone else's ---------------------------------------------------------------
    def look(self) -> list[Gone]:
        """The files of other workers whose process is gone, each locked by this process
        (``bury`` it once its jobs are recovered, or ``let_go``). Removes temporary files
        left by workers that died while registering."""
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            names = []
        present = set(names)
        for name in [n for n in self._open if n not in present]:
            os.close(self._open.pop(name))
        found = []
        for name in names:
            if name.endswith(SUFFIX) and name != self.name:
                gone = self._take(name)
                if gone is not None:
                    found.append(gone)
            elif name.endswith(TEMP_SUFFIX):
                self._clean_temp(name)
        return found

    def _take(self, name: str) -> Gone | None:
        """Lock ``name`` if its process is gone and it is still the file under that name."""
        path = os.path.join(self.folder, name)
        fd = self._open.get(name)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except (FileNotFoundError, PermissionError):
                return None  # removed meanwhile; or another user's, whose peers look after it
            self._open[name] = fd
        if not _try_lock(fd):
            return None  # its process lives (stopped, perhaps): it keeps its jobs
        del self._open[name]
        try:
            held, named = os.fstat(fd), os.stat(path)
            file = (held.st_dev, held.st_ino)
            same = file == (named.st_dev, named.st_ino) and file not in self._unremovable
        except FileNotFoundError:
            same = False
        if not same:  # buried by another worker (and perhaps made again): look next time
            os.close(fd)
            return None
        try:
            content = json.loads(os.pread(fd, 4096, 0))
            worker_id, pid = str(content["worker_id"]), content.get("pid")
        except (ValueError, TypeError, KeyError):
            worker_id, pid = "", None
        if file_name(worker_id) != name:  # not a worker's file: nothing to recover
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            os.close(fd)
            return None
        return Gone(worker_id, path, fd, pid if isinstance(pid, int) else None, self._unremovable)

    def _clean_temp(self, name: str) -> None:
        path = os.path.join(self.folder, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if time.time() - os.fstat(fd).st_mtime > STALE_TEMP_AFTER and _try_lock(fd):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        finally:
            os.close(fd)
