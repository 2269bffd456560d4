"""Cross-process wake-ups for one SQLite database: a doorbell per waiting process.

SQLite has no LISTEN/NOTIFY. Each process that waits for work binds a Unix datagram
socket in a folder beside the database file (``jobs.db.bells/``); a process that
commits work (an enqueue, a release, a retry) sends one byte to every socket there. A
waiting process wakes at once and sleeps in between, instead of polling the database
every few milliseconds. Sockets left by processes that died are removed by the next ring.

Where Unix sockets are missing (Windows) or cannot be made there (a read-only folder,
a path too long for a socket), the process waits by polling instead. Writers that do not
ring are seen by the broker's slower data_version check (``sqlite.watch``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading

RING = b"!"
MAX_SOCKET_PATH = 100  # bytes; sun_path holds 104-108 depending on the system


def _folder(db_path: str, suffix: str = ".bells") -> str:
    """Beside the database file: every process that uses the database can reach it (a
    private /tmp, as systemd's PrivateTmp gives each service, would split them). One
    folder per kind of news: ``.bells`` (work to claim), ``.done`` (jobs finished, for
    processes waiting for results), so a ring wakes only those who want it."""
    return os.path.realpath(db_path) + suffix


class Doorbell:
    """Rings every process waiting on one database; ``listen`` makes this process one."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sender.setblocking(False)
        self._lock = threading.Lock()

    def _bells(self) -> list[str]:
        """The sockets in the folder, read at every ring: a handful of entries, and a
        cached listing keyed on the folder's mtime could miss a socket bound within the
        same timestamp tick."""
        try:
            return [e.path for e in os.scandir(self.folder)]
        except OSError:
            return []

    def ring(self) -> None:
        """One byte to every waiting process; never blocks, never raises."""
        with self._lock:
            for path in self._bells():
                try:
                    self._sender.sendto(RING, path)
                except (ConnectionRefusedError, FileNotFoundError):
                    with contextlib.suppress(OSError):
                        os.unlink(path)  # its process is gone
                except OSError:
                    pass  # a full buffer already holds a ring; anything else: the poll covers

    def listen(self) -> Bell | None:
        try:
            return Bell(self.folder)
        except OSError:
            return None

    def close(self) -> None:
        self._sender.close()


class Bell:
    """This process's socket in the folder: ``wait`` returns True when rung."""

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, f"{os.getpid()}-{secrets.token_hex(3)}")
        if len(os.fsencode(self.path)) > MAX_SOCKET_PATH:
            raise OSError(f"socket path too long for AF_UNIX: {self.path}")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            for attempt in range(3):  # a process leaving may remove the empty folder meanwhile
                os.makedirs(folder, exist_ok=True)
                try:
                    self._sock.bind(self.path)
                    break
                except FileNotFoundError:
                    if attempt == 2:
                        raise
            os.chmod(self.path, 0o666)  # a producer running as another user may ring too
        except OSError:
            self._sock.close()
            self._remove_files()
            raise

    def wait(self, timeout: float | None) -> bool:
        """Until rung or ``timeout`` s; rings that piled up meanwhile count as one."""
        self._sock.settimeout(timeout)
        try:
            self._sock.recv(64)
        except OSError:  # the timeout, or a closed socket
            return False
        self._sock.setblocking(False)
        with contextlib.suppress(OSError):
            while self._sock.recv(64):
                pass
        return True

    def interrupt(self) -> None:
        """Wake ``wait`` now (to stop the thread that waits)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s, contextlib.suppress(OSError):
            s.setblocking(False)  # a full queue already holds a wake-up
            s.sendto(RING, self.path)

    def close(self) -> None:
        self._sock.close()
        self._remove_files()

    def _remove_files(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(self.path))  # only if no other process waits there


def open_doorbell(db_path: str, suffix: str = ".bells") -> Doorbell | None:
    """A doorbell for ``db_path`` (its folder: ``_folder``), or None where Unix datagram
    sockets are unavailable."""
    if not hasattr(socket, "AF_UNIX"):
        return None
    try:
        return Doorbell(_folder(db_path, suffix))
    except OSError:
        return None
