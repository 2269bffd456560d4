"""The worker's metrics port: Prometheus exposition at /metrics, the health check at /healthz.

Served from a daemon thread, so a scrape never runs on the worker's loop. /metrics
renders the snapshot the registry heartbeat last took (at most one interval old):
reading the live recorder from another thread could catch it mid-update. /healthz
asks the health check now, so a stuck loop shows at once; 200 when healthy, 503 not.
Bound to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from ..errors import ConfigError
from ..metrics.prometheus import SnapshotCollector

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIEnvironment

    from ..metrics.schema import Health, Snapshot

log = logging.getLogger("sluicegate.worker")


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
        pass


class MetricsServer:
    def __init__(
        self,
        host: str,
        port: int,
        latest: Callable[[], Snapshot | None],
        health: Callable[[], Health],
        worker_id: str,
        worker_host: str,
    ) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(SnapshotCollector(latest, worker_id, worker_host))
        self._metrics = make_wsgi_app(registry)
        self._health = health
        try:
            self._server = make_server(
                host, port, self._app, server_class=_Server, handler_class=_QuietHandler
            )
        except OSError as exc:  # in use, or not an address of this machine
            raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror}") from None
        self.port = self._server.server_port  # the real one when 0 asked for any free port
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="sluicegate-metrics", daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        log.info("metrics and health on http://%s:%d/metrics, /healthz", *self._address())

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def _app(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") in ("/healthz", "/health"):
            health = self._health()
            status = "200 OK" if health["healthy"] else "503 Service Unavailable"
            body = json.dumps(health).encode()
            start_response(status, [("Content-Type", "application/json")])
            return [body]
        result: Iterable[bytes] = self._metrics(environ, start_response)
        return result
