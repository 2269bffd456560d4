"""A small loopback TCP proxy a test puts between workers and PostgreSQL, to break the
network on purpose.

- ``cut()``: reset every current connection (RST to both ends, as a crashed middlebox or
  a dropped NAT entry would), mid-query or idle.
- ``block()`` / ``unblock()``: while blocked, new connections are accepted and reset at
  once (the server is "down"); existing ones are left alone (``cut()`` them too for a
  full outage).
- ``fail_commits(modes, marker)``: make the commit of the next transactions that carried
  ``marker`` (say, a string only acks send) end with the connection reset, its fate
  unknown to the client: ``"lost"`` drops the COMMIT before the server sees it (rolled
  back), ``"committed"`` lets the server commit and swallows the reply; ``"silent"``
  lets the server commit and then black-holes that connection (no reply, no reset: the
  client hears nothing until ``restore()``). With
  ``then_block``, the server also "goes away" at that moment: every other connection is
  reset and new ones are refused until ``unblock()``, so the client cannot ask again.

Threads, blocking sockets: one accept thread, two pump threads per connection.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import struct
import threading
from collections.abc import Iterable

COMMIT = b"COMMIT\x00"  # the query text of a COMMIT, in a simple or extended-protocol message
ROLLBACK = b"ROLLBACK\x00"
FAULT_MODES = ("lost", "committed", "silent")


def _set_reset_on_close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN."""
    _set_reset_on_close(sock)
    sock.close()


class _Link:
    """One proxied connection: client <-> upstream."""

    def __init__(self, proxy: TcpProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.lock = threading.Lock()
        self.dead = False
        self.pumps_left = 2
        self.marked = False  # this transaction sent the marker
        self.swallow_reply = False  # the COMMIT went through; drop its reply and reset
        # Set while bytes flow in that direction (True: client to server); cleared by
        # a black hole, which the pump of that direction then waits out.
        self.flowing = {True: threading.Event(), False: threading.Event()}
        for direction in (True, False):
            self.flowing[direction].set()

    def stall(self, up: bool, down: bool) -> None:
        for direction, stalled in ((True, up), (False, down)):
            if stalled:
                self.flowing[direction].clear()

    def resume(self) -> None:
        for event in self.flowing.values():
            event.set()

    def _wait_flowing(self, upward: bool) -> bool:
        """Hold what was read (data or the end) while this direction is black-holed;
        False when the link was killed meanwhile."""
        flowing = self.flowing[upward]
        while not flowing.wait(0.05):
            if self.dead:
                return False
        return True

    def start(self) -> None:
        for src, dst, upward in (
            (self.client, self.upstream, True),
            (self.upstream, self.client, False),
        ):
            threading.Thread(
                target=self._pump, args=(src, dst, upward), daemon=True, name="tcpproxy-pump"
            ).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upward: bool) -> None:
        try:
            while True:
                try:
                    data = src.recv(65536)
                except OSError:
                    data = b""
                if not self._wait_flowing(upward) or not data:
                    break
                data = self._upward(data) if upward else self._downward(data)
                if data is None:
                    break
                try:
                    dst.sendall(data)
                except OSError:
                    break
        finally:
            self._end()

    def _upward(self, data: bytes) -> bytes | None:
        """Client to server: watch for the marker, then for that transaction's COMMIT."""
        proxy = self.proxy
        if proxy.marker and proxy.marker in data:
            self.marked = True
        if not self.marked or (COMMIT not in data and ROLLBACK not in data):
            return data
        self.marked = False
        if COMMIT not in data:
            return data
        mode = proxy.take_fault()
        if mode is not None and proxy.block_on_fault:
            proxy.block()
            proxy.cut(sparing=self)
        if mode == "lost":
            self.kill()
            proxy.fault_done(mode)
            return None  # the server never sees the COMMIT: the transaction rolls back
        if mode == "committed":
            self.swallow_reply = True  # the server commits; the client never hears so
        if mode == "silent":
            self.stall(up=True, down=True)  # before the reply can come back
            proxy.fault_done(mode)
        return data

    def _downward(self, data: bytes) -> bytes | None:
        if self.swallow_reply:
            self.swallow_reply = False
            self.kill()
            self.proxy.fault_done("committed")  # the server replied: it has committed
            return None
        return data

    def kill(self) -> None:
        """Reset both ends now (the pumps wake, and the last one closes with RST)."""
        with self.lock:
            if self.dead:
                return
            self.dead = True
        for sock in (self.client, self.upstream):
            _set_reset_on_close(sock)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)  # wakes a pump blocked in recv, sends nothing

    def _end(self) -> None:
        with self.lock:
            self.pumps_left -= 1
            last = self.pumps_left == 0
            if not self.dead:
                self.dead = True
                wake = True
            else:
                wake = False
        if wake:  # an orderly end on one side: end the other side too
            for sock in (self.client, self.upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        if self.swallow_reply:  # the connection died before the reply: fate unknown still
            self.swallow_reply = False
            self.proxy.fault_done("committed")
        if last:
            self.client.close()
            self.upstream.close()
            self.proxy.forget(self)


class TcpProxy:
    """Listens on 127.0.0.1:``port`` (a free one) and forwards to ``target``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self._blocked = False
        self._closed = threading.Event()
        self._faults: collections.deque[str] = collections.deque()
        self.marker = b""
        self.block_on_fault = False
        self.accepted = 0
        self.refused = 0
        self.cut_total = 0
        self._faults_under_way = 0
        self.faults_fired: list[str] = []  # faults done: the client's connection is gone
        self._stall_new: tuple[bool, bool] | None = None  # a black hole's (up, down) for new links
        self._thread = threading.Thread(target=self._accept_loop, daemon=True, name="tcpproxy")
        self._thread.start()

    # ---- control ------------------------------------------------------------------
    def cut(self, sparing: _Link | None = None) -> int:
        """Reset every current connection; returns how many there were."""
        with self._lock:
            links = [link for link in self._links if link is not sparing]
        for link in links:
            link.kill()
        self.cut_total += len(links)
        return len(links)

    def block(self) -> None:
        self._blocked = True

    def unblock(self) -> None:
        self._blocked = False

    def blackhole(self, up: bool = True, down: bool = True, new_connections: bool = True) -> int:
        """Forward nothing more in the chosen directions (connections stay open; see the
        module's docstring); returns how many connections it caught."""
        with self._lock:
            links = list(self._links)
            if new_connections:
                self._stall_new = (up, down)
        for link in links:
            link.stall(up, down)
        return len(links)

    def restore(self) -> None:
        """End a black hole: what waited is forwarded now, in order."""
        with self._lock:
            links = list(self._links)
            self._stall_new = None
        for link in links:
            link.resume()

    def connections(self) -> int:
        with self._lock:
            return len(self._links)

    def fail_commits(self, modes: Iterable[str], marker: bytes, then_block: bool = False) -> None:
        """Give the next COMMITs of transactions that sent ``marker`` an unknown fate."""
        modes = list(modes)
        assert all(m in FAULT_MODES for m in modes), modes
        with self._lock:
            self.marker = marker
            self.block_on_fault = then_block
            self._faults.extend(modes)

    def faults_pending(self) -> int:
        """Faults armed or still under way (a COMMIT forwarded, its reply not yet seen)."""
        with self._lock:
            return len(self._faults) + self._faults_under_way

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
        self._listener.close()
        self.cut()

    # ---- internals ----------------------------------------------------------------
    def take_fault(self) -> str | None:
        with self._lock:
            if not self._faults:
                return None
            self._faults_under_way += 1
            return self._faults.popleft()

    def fault_done(self, mode: str) -> None:
        with self._lock:
            self._faults_under_way -= 1
            self.faults_fired.append(mode)

    def forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            if self._blocked:
                self.refused += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                self.refused += 1
                _reset(client)
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self, client, upstream)
            with self._lock:
                self._links.add(link)
                self.accepted += 1
                if self._stall_new is not None:
                    link.stall(*self._stall_new)
            link.start()
