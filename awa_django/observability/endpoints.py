"""The worker's HTTP port: ``/metrics`` (when a sink can be scraped), ``/healthz`` and ``/readyz``
(when probes are attached); every other path is 404, so a probe pointed at the wrong path fails
instead of reading a metrics page as "healthy".

One ``ThreadingHTTPServer`` on a daemon thread: requests never run on the worker's loop. Each
answer reads what the loop last recorded (``probes``) or renders the metrics registry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from awa_django.exceptions import ConfigurationError

if TYPE_CHECKING:
    from awa_django.observability.probes import Probes

logger = logging.getLogger(__name__)

MetricsPage = Callable[[str], tuple[bytes, str]]
"""The metrics page for an ``Accept`` header: (body, content type)."""


class EndpointServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``addr:port`` until ``close()``."""

    def __init__(self, port: int, addr: str, *, metrics: MetricsPage | None = None) -> None:
        self.metrics = metrics
        self.probes: Probes | None = None
        handler = type("Handler", (_Handler,), {"endpoints": self})
        try:
            self._server = ThreadingHTTPServer((addr, port), handler)
        except OSError as exc:
            served, flag = ("metrics", "--metrics-port") if metrics is not None else ("probes", "--health-port")
            raise ConfigurationError(
                f"cannot serve {served} on {addr}:{port}: {exc}; pick a free port with {flag} "
                "(each worker process on a host needs its own)"
            ) from exc
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self.addr = addr
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"awa-http-{self.port}", daemon=True)
        self._thread.start()

    def paths(self) -> list[str]:
        return (["/metrics"] if self.metrics is not None else []) + (
            ["/healthz", "/readyz"] if self.probes is not None else []
        )

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class _Handler(BaseHTTPRequestHandler):
    endpoints: EndpointServer
    server_version = "awa-worker"

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _answer(self, *, head: bool) -> None:
        path = urlsplit(self.path).path
        endpoints = self.endpoints
        probes = endpoints.probes
        if path == "/metrics" and endpoints.metrics is not None:
            body, content_type = endpoints.metrics(self.headers.get("Accept", ""))
            self._send(200, body, content_type, head)
        elif path in ("/healthz", "/readyz") and probes is not None:
            answer = probes.liveness() if path == "/healthz" else probes.readiness()
            self._send(answer.status, answer.encoded(), "application/json", head)
        else:
            served = ", ".join(endpoints.paths()) or "nothing"
            self._send(
                404, f"not found: {path}; this port serves {served}\n".encode(), "text/plain; charset=utf-8", head
            )

    def _send(self, status: int, body: bytes, content_type: str, head: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("http %s " + format, self.address_string(), *args)
